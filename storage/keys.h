#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ckptdb/types.h"

namespace ckptdb::storage {

// Keys of the `chunks` column family: an order-preserving encoding of
//   (checkpoint id, writer rank, tensor key, global offset)
// as big-endian id (8 bytes), big-endian rank (4 bytes), the tensor key with
// 0x00 escaped as 0x00 0xFF and terminated by 0x00 0x01, then each offset as 8
// big-endian bytes. One checkpoint's chunks form one key range, and one
// writer's chunks a sub-range of it, so the files that the writers of a save
// stage never overlap each other or anything stored before.
std::string EncodeChunkKey(int64_t checkpoint_id, int32_t writer_rank,
                           std::string_view tensor_key,
                           const Shape& global_offset);
// EncodeChunkKey appended to `out`: a caller encoding key after key into one
// buffer does not allocate a string for each. `tensor_key` must not point into
// `*out`.
void AppendChunkKey(int64_t checkpoint_id, int32_t writer_rank,
                    std::string_view tensor_key, const Shape& global_offset,
                    std::string* out);

// [begin, end) of every chunk key of a checkpoint, and of one writer within it.
std::string CheckpointKeyPrefix(int64_t checkpoint_id);
// A key after every chunk key of the checkpoint and before the next one's
// (exclusive end of its range that still decodes to `checkpoint_id`).
std::string CheckpointKeyEnd(int64_t checkpoint_id);
std::string WriterKeyPrefix(int64_t checkpoint_id, int32_t writer_rank);

// The checkpoint id a chunk key starts with; false when the key is too short.
bool DecodeCheckpointId(std::string_view key, int64_t* checkpoint_id);

// Keys of the `meta` column family:
//   MetaKey(id)              = big-endian id (8 bytes): the checkpoint's main
//                              record, its commit point;
//   TensorRecordKey(id, key) = MetaKey(id), 0x00, the tensor's flat key bytes
//                              as they are: one tensor's chunks (format 2);
//   SmallTensorsKey(id)      = MetaKey(id), 0x01: the chunks of the tensors
//                              of few chunks, together (format 4).
// A checkpoint's records thus form the range [MetaKey(id), MetaRangeEnd(id)):
// the main record first, then its tensor records in flat-key order (RocksDB's
// bytewise order is std::string's), then the small tensors' record. Only main
// records are checkpoints; scans that enumerate checkpoints skip the others
// (DecodeMetaKey rejects them).
std::string MetaKey(int64_t checkpoint_id);
bool DecodeMetaKey(std::string_view key, int64_t* checkpoint_id);
std::string TensorRecordKey(int64_t checkpoint_id, std::string_view tensor_key);
std::string SmallTensorsKey(int64_t checkpoint_id);
bool DecodeSmallTensorsKey(std::string_view key, int64_t* checkpoint_id);
// The exclusive end of a checkpoint's records: MetaKey(id), 0x02 (0x01 before
// format 4, whose stores have no key in between).
std::string MetaRangeEnd(int64_t checkpoint_id);
// Splits a tensor record's key; false for any other key.
bool DecodeTensorRecordKey(std::string_view key, int64_t* checkpoint_id,
                           std::string_view* tensor_key);

// Special meta keys, sorted after every checkpoint record.
inline constexpr std::string_view kStoreMarkerKey =
    "\xff"
    "store";
// The store marker's value.
inline constexpr std::string_view kStoreMarker = "ckptdb-store 1";
// The next checkpoint id as of the last rewrite of the metadata from the
// copies; the journal's high-water mark carries it from commit to commit.
inline constexpr std::string_view kNextIdKey =
    "\xff"
    "next_id";

// The contents of RocksDB's IDENTITY file as the store first recorded them:
// no checkpoint depends on that file, but damage to it is reported and
// undone.
inline constexpr std::string_view kIdentityKey =
    "\xff"
    "store_identity";

// The checksums (ChunkChecksum) of RocksDB's OPTIONS files as a read-write
// open found them once RocksDB had written its own: the database never reads
// those files, so damage that still parses would otherwise go unseen. One
// "name=<16 hex digits>\n" line a file.
inline constexpr std::string_view kOptionsFilesKey =
    "\xff"
    "options_files";

void PutBigEndian64(std::string* out, uint64_t v);
uint64_t GetBigEndian64(const char* p);

}  // namespace ckptdb::storage
