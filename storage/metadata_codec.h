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
// which builds that read only 1 and 2 would find missing. Formats 1 (one
// record per checkpoint, every chunk inline) and 2 are still read. The
// layouts: storage/checkpoint.capnp; the keys: storage/keys.h.
inline constexpr uint32_t kFormatVersion = 3;

// Serializes a checkpoint as format-2 records of the `meta` column family, in
// key order: the main record at MetaKey(id) (info, values, user metadata, and
// per tensor its key, path, dtype, global shape and chunk count), then one
// record per tensor (an empty one too) at TensorRecordKey(id, key) holding its
// chunks: boxes and writer ranks packed (a few bytes a chunk; a chunk that
// continues a regular grid costs one), checksums 8 bytes each. Chunk sizes are
// not stored: a chunk holds volume * dtype size bytes.
std::vector<std::pair<std::string, std::string>> EncodeCheckpointRecords(
    const CheckpointMetadata& meta);

// The format-1 record of a checkpoint (one message, chunks inline), as stores
// of version 1 hold it: for tests of reading such stores.
std::string EncodeCheckpointV1(const CheckpointMetadata& meta);

// A decoded main record.
struct MainRecord {
  uint32_t format_version = 0;
  // Format 1: the whole checkpoint. Format 2: every tensor with its dtype and
  // global shape but no chunks (DecodeTensorRecord reads them).
  CheckpointMetadata meta;
  // Format 2: each tensor's number of chunks, which its record must hold.
  std::map<std::string, uint64_t, std::less<>> chunk_counts;

  // Whether the tensors' chunks are in the main record itself (format 1;
  // formats 2 and 3 keep them in tensor records).
  bool has_chunks() const { return format_version == 1; }
};

// Parses and validates a main record (format 1 or 2) from an untrusted
// source: traversal and nesting limits, the format version, every dtype,
// shape, offset, size, count and rank are checked before use. Any defect gives
// Corruption (never a crash); an unknown version is Corruption naming it. The
// tensors' volumes must add up to the recorded nbytes. Format 1's chunks come
// back sorted by global offset.
Result<MainRecord> DecodeMainRecord(std::string_view bytes);

// Decodes tensor `key`'s record (format 2) against its main record: the same
// checkpoint id, key and chunk count; every varint, extent and writer rank is
// bounds-checked, and the chunks must partition the tensor. Returns its chunks
// sorted by global offset, with nbytes = volume * dtype size. Corruption
// naming the tensor on any defect, never a crash.
Result<std::vector<ChunkMetadata>> DecodeTensorRecord(const MainRecord& main,
                                                      std::string_view key,
                                                      std::string_view bytes);
// The same for `tensor`, an entry of main.meta.tensors the caller has found.
Result<std::vector<ChunkMetadata>> DecodeTensorRecord(
    const MainRecord& main,
    const std::pair<const std::string, TensorMetadata>& tensor,
    std::string_view bytes);

// Fills the chunks of every tensor of a format-2 main record from its tensor
// records, which `next(&tensor_key, &bytes)` yields in key order (false at the
// end; the views stay valid until the next call). Corruption naming the
// tensor when a record is missing, is not one of the checkpoint's tensors, or
// is damaged.
Status DecodeAllTensorRecords(
    MainRecord* main,
    const std::function<bool(std::string_view*, std::string_view*)>& next);

// Decodes a checkpoint from all its records as EncodeCheckpointRecords lays
// them out (or from a lone format-1 record), checking the keys too.
Result<CheckpointMetadata> DecodeCheckpointRecords(
    const std::vector<std::pair<std::string, std::string>>& records);

// Only the summary fields of a main record (either format); cheaper than
// DecodeMainRecord for listings.
Result<CheckpointInfo> DecodeCheckpointInfo(std::string_view bytes);

}  // namespace ckptdb::storage
