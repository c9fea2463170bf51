#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/box.h"
#include "ckptdb/types.h"

namespace ckptdb {

// Which checkpoint an operation addresses: the latest committed one, or one by
// step, tag or id.
struct CheckpointSelector {
  enum class Kind { kLatest, kStep, kTag, kId, kInvalid };
  Kind kind = Kind::kLatest;
  int64_t number = 0;  // step or id
  std::string tag{};

  static CheckpointSelector Latest() { return {}; }
  static CheckpointSelector Step(int64_t step) {
    return {Kind::kStep, step, {}};
  }
  static CheckpointSelector Tag(std::string tag) {
    return {Kind::kTag, 0, std::move(tag)};
  }
  static CheckpointSelector Id(int64_t id) { return {Kind::kId, id, {}}; }
  // A selector that could not be built on this rank (a binding found bad
  // input; `why` says what): every call given it fails with InvalidArgument
  // `why`, and a collective call (Load, Delete) still takes part, failing on
  // every rank, so that the other ranks never wait for, or pair their next
  // call with, a rank that left. Kept in `tag`.
  static CheckpointSelector Invalid(std::string why) {
    return {Kind::kInvalid, 0, std::move(why)};
  }

  // "latest", "step 5", "tag 'best'", "id 3".
  std::string ToString() const;
};

// Summary of one committed checkpoint.
struct CheckpointInfo {
  int64_t id = 0;                    // increasing within a store
  std::optional<int64_t> step{};     // training step given at save
  std::optional<std::string> tag{};  // unique within a store
  double created = 0;                // unix seconds
  int32_t world_size = 1;            // number of ranks that saved it
  int64_t num_tensors = 0;
  int64_t nbytes = 0;  // tensor bytes, each stored box counted once
  // Tensor bytes this checkpoint wrote; the rest of `nbytes` it shares with
  // earlier checkpoints (incremental saves). Equal to `nbytes` for a
  // checkpoint saved without incremental saves, or before them.
  int64_t nbytes_written = 0;
  // Earlier checkpoints whose stored chunks this one refers to, ascending.
  // Their bytes stay in the store while this checkpoint does, even once
  // they are deleted themselves.
  std::vector<int64_t> references{};
  // Empty unless both copies of the checkpoint's record are damaged: then
  // only `id` is set, this says what is damaged, and the calls that need the
  // checkpoint fail with Corruption. A listing never leaves a checkpoint out.
  std::string damage{};

  friend bool operator==(const CheckpointInfo&,
                         const CheckpointInfo&) = default;
};

// A 128-bit content hash of a chunk's bytes (XXH3-128, seed 0): what an
// incremental save compares to decide that a chunk is unchanged.
struct ContentHash {
  uint64_t low = 0;
  uint64_t high = 0;
  friend bool operator==(const ContentHash&, const ContentHash&) = default;
};

// One stored box of a tensor.
struct ChunkMetadata {
  Box box{};                // in the tensor's global index space
  int32_t writer_rank = 0;  // rank that wrote it; part of its storage key
  uint64_t nbytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes
  // The checkpoint whose stored bytes these are: 0 for the checkpoint that
  // records the chunk; an earlier checkpoint's id for a chunk an incremental
  // save found unchanged (writer_rank then is the rank that wrote it there).
  int64_t holder_id = 0;
  // Absent in checkpoints saved before incremental saves.
  std::optional<ContentHash> content_hash{};
};

struct TensorMetadata {
  DType dtype = DType::kFloat32;
  Shape global_shape{};
  std::vector<ChunkMetadata>
      chunks{};  // sorted by box origin; a partition of the tensor
};

// Everything a checkpoint records besides tensor bytes.
struct CheckpointMetadata {
  CheckpointInfo info{};
  std::map<std::string, TensorMetadata> tensors{};  // by flat key
  std::map<std::string, std::vector<std::string>>
      flat_mapping{};  // flat key -> path
  // Flat key -> how each part of its path addresses its container (int keys,
  // list and tuple indexes). Keys absent here have only dict str keys (all of
  // a store written before kinds were recorded).
  std::map<std::string, PathKinds> path_kinds{};
  std::map<std::string, Value> values{};  // small values by flat key
  std::map<std::string, std::string> user_metadata{};
};

}  // namespace ckptdb
