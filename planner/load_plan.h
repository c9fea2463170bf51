#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "core/box_geometry.h"

namespace ckptdb::planner {

// One target shard a rank wants filled: the box `box` of tensor `flat_key`.
struct LoadTarget {
  std::string flat_key;
  Box box;
};

// One stored chunk read by one rank.
struct ChunkRead {
  // The tensor's key in the stored tensors the plan was made from, which
  // outlive the plan (a load of many small tensors copied each key again).
  std::string_view flat_key;
  // Index into TensorMetadata::chunks.
  size_t chunk = 0;
  int reader_rank = 0;
  uint64_t nbytes = 0;
  // The chunk's first byte in the checkpoint's canonical byte order: tensors
  // in flat-key order, each tensor's chunks in stored order (by global
  // offset). It depends only on the checkpoint, so every rank gives a chunk
  // the same position whichever tensors it decoded (ChunkPositions).
  uint64_t position = 0;
};

// One box copied from a read chunk into a target shard: a read item
// (docs/design.md).
struct ReadItem {
  size_t read =
      0;  // index into LoadPlan::reads (gives the chunk and reader rank)
  int dest_rank = 0;
  size_t target = 0;  // index into the dest rank's targets
  Box box;            // the piece, in the chunk's own coordinates
  Shape dest_origin;  // where the piece begins in the target's coordinates
  uint64_t num_elements() const { return static_cast<uint64_t>(box.volume()); }
};

// A load plan: the global one (every needed chunk, every item), or one
// rank's part of it (BuildRankLoadPlan).
struct LoadPlan {
  // Sorted by (flat key, chunk), i.e. by position.
  std::vector<ChunkRead> reads;
  // Sorted by (read, dest rank, target).
  std::vector<ReadItem> items;
  // Bytes each rank reads; empty in a rank's part.
  std::vector<uint64_t> read_bytes_per_rank;

  std::string ToString() const;
};

// Plans a load of `targets` (indexed by load rank) from the stored `tensors`
// (by flat key). Overlaps are found through per-tensor BoxIndex, not by
// testing every pair. Each needed chunk gets one reader among the ranks
// needing it (its needers): the needers of a chunk, ascending, taken in turn
// by the chunks with exactly those needers, in (key, chunk) order, so that
// every needer can tell the reader of every chunk it needs from what it needs
// alone. InvalidArgument when a target names an unknown key or lies outside
// its tensor. The reference for BuildRankLoadPlan.
Result<LoadPlan> BuildLoadPlan(
    const std::map<std::string, TensorMetadata>& tensors,
    const std::vector<std::vector<LoadTarget>>& targets);

// Where a load target lives, as every rank learns it: the reader of a slice
// converts it to `dtype`, and sends it device to device when the target is in
// memory of its rank's DeviceTransport device.
struct TargetPlacement {
  DType dtype = DType::kFloat32;
  bool on_device = false;
  friend bool operator==(const TargetPlacement&,
                         const TargetPlacement&) = default;
};

// Load targets grouped by class: ranks whose targets are identical form one
// class, and the targets travel between ranks once per class.
struct TargetClasses {
  // targets[c]: the targets of every rank of class c.
  std::vector<std::vector<LoadTarget>> targets;
  // class_of_rank[r]: rank r's class.
  std::vector<int> class_of_rank;
  // Optional, [class][target]: where the target lives. BuildRankLoadPlan
  // only asks whether it lies in device memory, to give a receiver of a
  // device box the items of its co-receivers.
  std::vector<std::vector<TargetPlacement>> placements;
};

// Rank `rank`'s part of the plan BuildLoadPlan makes for the same targets:
// every read it performs with all its items, and every read it receives from
// with only its own items (plus, for a device target, the items of the other
// ranks receiving the same box into device targets). Costs O(the chunks this
// rank needs x their needers + every class's targets), not O(the job's
// items). `tensors` must hold every tensor of the checkpoint (dtype and
// shape), with chunks at least for the tensors of `rank`'s targets. Validates
// every class's targets, so that every rank fails alike.
Result<LoadPlan> BuildRankLoadPlan(
    const std::map<std::string, TensorMetadata>& tensors,
    const TargetClasses& classes, int rank);

// The tensor of each of `plan`'s reads, by read: one lookup per run of reads
// of one tensor. Every read's tensor must be in `tensors`.
std::vector<const TensorMetadata*> TensorsOfReads(
    const LoadPlan& plan, const std::map<std::string, TensorMetadata>& tensors);

// True when rank `rank`'s target `target` lies in device memory that a
// DeviceTransport reaches.
using OnDeviceLookup = std::function<bool(int rank, size_t target)>;

// The part of `global` rank `rank` gets from BuildRankLoadPlan; `on_device`
// as in TargetClasses (may be empty). For tests.
LoadPlan RestrictToRank(const LoadPlan& global, int rank,
                        const OnDeviceLookup& on_device = nullptr);

}  // namespace ckptdb::planner
