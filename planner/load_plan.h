#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "planner/box.h"

namespace ckptdb::planner {

// One target shard a rank wants filled: the box `box` of tensor `flat_key`.
struct LoadTarget {
  std::string flat_key;
  Box box;
};

// One stored chunk read by one rank.
struct ChunkRead {
  std::string flat_key;
  size_t chunk = 0;  // index into TensorMetadata::chunks
  int reader_rank = 0;
  uint64_t nbytes = 0;
  // The chunk's first byte in the checkpoint's canonical byte order: tensors
  // in flat-key order (each NumElements(global_shape) x DTypeSize(dtype)
  // bytes), each tensor's chunks in stored order. The same on every rank,
  // whichever tensors it loads.
  uint64_t position = 0;
};

// One box copied from a read chunk into a target shard: the read item of
// DESIGN.md.
struct ReadItem {
  size_t read =
      0;  // index into LoadPlan::reads (gives the chunk and reader rank)
  int dest_rank = 0;
  size_t target = 0;  // index into the dest rank's targets
  Shape
      storage_offset;  // begin of the box relative to the chunk's global offset
  Shape dest_offset;  // begin of the box relative to the target's global offset
  Shape lengths;
  uint64_t num_elements() const {
    return static_cast<uint64_t>(NumElements(lengths));
  }
};

struct LoadPlan {
  std::vector<ChunkRead> reads;  // every needed chunk exactly once
  std::vector<ReadItem> items;   // sorted by (read, dest rank, target)
  std::vector<uint64_t> read_bytes_per_rank;

  std::string ToString() const;
};

// Plans a load of `targets` (indexed by load rank) from the stored `tensors`
// (by flat key). Overlaps are found through a per-tensor index sorted by chunk
// offset, not by testing every pair. Each needed chunk gets one reader: the
// rank needing it with the fewest bytes to read so far. InvalidArgument when a
// target names an unknown key or lies outside its tensor.
Result<LoadPlan> BuildLoadPlan(
    const std::map<std::string, TensorMetadata>& tensors,
    const std::vector<std::vector<LoadTarget>>& targets);

// True when rank `rank`'s target `target` lies in device memory that a
// DeviceTransport reaches.
using OnDeviceLookup = std::function<bool(int rank, size_t target)>;

// The part of a global plan that rank `rank` needs (its per-rank plan):
// every read it performs with all its items, and every read it receives from
// with only its own items, except that for an item of `rank` into a device
// target (per `on_device`, when given) the plan also keeps the items of other
// ranks that receive the same box (storage offset and lengths) into device
// targets. Reads stay in the global order and `read` indices refer to the
// restricted reads; read_bytes_per_rank is left empty.
LoadPlan RestrictToRank(const LoadPlan& global, int rank,
                        const OnDeviceLookup& on_device = {});

}  // namespace ckptdb::planner
