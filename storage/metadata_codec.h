#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"

namespace ckptdb::storage {

// The format new records are written in. Format 3 has the records of format
// 2; it says that the chunks may be in value files (storage/value_files.h),
// which builds that read only 1 and 2 would find missing. Format 4 keeps the
// chunks of all tensors of at most kMaxSmallTensorChunks chunks together in
// one record (the small tensors' record, at SmallTensorsKey(id)) instead of a
// record each: a model of many small tensors writes, reads back, walks and
// deletes two records instead of one per tensor, and the main record, which
// listings read, does not grow. Builds that read only up to 3 refuse format 4
// by its version. Format 5 has the records of format 4; it says that chunks
// from kExternalValueBytes (1 KiB) are in value files, where format 4 kept
// those under 64 KiB in table files: a build that reads up to 4 would take
// such a chunk's pointer for damaged bytes, so it refuses format 5 by its
// version instead. Formats 1 (one record per checkpoint, every chunk inline)
// to 4 are still read. The layouts: storage/checkpoint.capnp; the keys:
// storage/keys.h.
inline constexpr uint32_t kFormatVersion = 5;

// The most chunks a tensor may have for its chunks to be in the small
// tensors' record (format 4). Few enough that that record stays proportional
// to the number of tensors, whatever their sharding; a partial load of a
// tensor of more chunks reads only that tensor's record.
inline constexpr size_t kMaxSmallTensorChunks = 4;

// Serializes a checkpoint as records of the `meta` column family, in key
// order: the main record at MetaKey(id) (info, values, user metadata, and per
// tensor its key, path, dtype, global shape and chunk count), then one record
// per tensor of more than kMaxSmallTensorChunks chunks at TensorRecordKey(id,
// key) holding its chunks, then, when there are any, the chunks of the other
// tensors together at SmallTensorsKey(id). Chunks are boxes and writer ranks
// packed (a few bytes a chunk; a chunk that continues a regular grid costs
// one), checksums 8 bytes each. Chunk sizes are not stored: a chunk holds
// volume * dtype size bytes.
std::vector<std::pair<std::string, std::string>> EncodeCheckpointRecords(
    const CheckpointMetadata& meta);

// The records of `meta` in format `version` (2 to kFormatVersion): below 4,
// every tensor's chunks in a record of its own, as stores written in formats 2
// and 3 hold them; for tests of reading such stores.
std::vector<std::pair<std::string, std::string>>
EncodeCheckpointRecordsOfFormat(const CheckpointMetadata& meta,
                                uint32_t version);

// The format-1 record of a checkpoint (one message, chunks inline), as stores
// of version 1 hold it: for tests of reading such stores.
std::string EncodeCheckpointV1(const CheckpointMetadata& meta);

// A decoded main record.
struct MainRecord {
  uint32_t format_version = 0;
  // Format 1: the whole checkpoint. Formats 2 to 4: every tensor with its
  // dtype and global shape but no chunks (DecodeTensorRecord and
  // DecodeSmallTensors read them).
  CheckpointMetadata meta;
  // Formats 2 to 4: the tensors that have a record of their own, each with
  // the number of chunks its record must hold.
  std::map<std::string, uint64_t, std::less<>> chunk_counts;
  // Format 4: per tensor of meta.tensors, in key order, whether its chunks
  // are in the small tensors' record; and the chunk counts of those that are,
  // in the same order (empty when none are).
  std::vector<bool> small;
  std::vector<uint64_t> small_counts;

  // Whether the tensors' chunks are in the main record itself (format 1;
  // formats 2 and 3 keep them in tensor records).
  bool has_chunks() const { return format_version == 1; }
};

// Parses and validates a main record (any format) from an untrusted
// source: traversal and nesting limits, the format version, every dtype,
// shape, offset, size, count and rank are checked before use. Any defect gives
// Corruption (never a crash); an unknown version is Corruption naming it. The
// tensors' volumes must add up to the recorded nbytes. Format 1's chunks come
// back sorted by global offset. With `paths` false, meta.flat_mapping and
// meta.path_kinds stay empty and the paths are not read (each must still have
// a part): what a load needs, which matches its leaves by flat key.
Result<MainRecord> DecodeMainRecord(std::string_view bytes, bool paths = true);

// Decodes tensor `key`'s record (formats 2 to 4) against its main record: the
// same checkpoint id, key and chunk count; every varint, extent and writer rank
// is bounds-checked, and the chunks must partition the tensor. Returns its
// chunks sorted by global offset, with nbytes = volume * dtype size. Corruption
// naming the tensor on any defect, never a crash.
Result<std::vector<ChunkMetadata>> DecodeTensorRecord(const MainRecord& main,
                                                      std::string_view key,
                                                      std::string_view bytes);
// The same for `tensor`, an entry of main.meta.tensors the caller has found.
Result<std::vector<ChunkMetadata>> DecodeTensorRecord(
    const MainRecord& main,
    const std::pair<const std::string, TensorMetadata>& tensor,
    std::string_view bytes);

// Fills the chunks of the tensors of `main` whose chunks are in the small
// tensors' record `bytes` (format 4), of those that `wanted` names (sorted,
// each once) or of all when it is null; the others keep none. Corruption on
// a record of another checkpoint or version, a count that differs from the
// main record's, or a damaged entry (naming its tensor); never a crash.
Status DecodeSmallTensors(MainRecord* main, std::string_view bytes,
                          const std::vector<std::string_view>* wanted);

// Fills the chunks of every tensor of a main record (formats 2 to 4) that has
// a record of its own (chunk_counts) from those records, which
// `next(&tensor_key, &bytes)` yields in key order (false at the end; the views
// stay valid until the next call). Corruption naming the tensor when a record
// is missing, is not one of a tensor with a record, or is damaged.
Status DecodeAllTensorRecords(
    MainRecord* main,
    const std::function<bool(std::string_view*, std::string_view*)>& next);

// Decodes a checkpoint from all its records as EncodeCheckpointRecords lays
// them out (or from a lone format-1 record), checking the keys too: a missing
// or stray record is Corruption.
Result<CheckpointMetadata> DecodeCheckpointRecords(
    const std::vector<std::pair<std::string, std::string>>& records);

// Only the summary fields of a main record (either format); cheaper than
// DecodeMainRecord for listings.
Result<CheckpointInfo> DecodeCheckpointInfo(std::string_view bytes);

}  // namespace ckptdb::storage
