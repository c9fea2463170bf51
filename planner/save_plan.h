#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"
#include "core/box_geometry.h"
#include "planner/flatten.h"

namespace ckptdb::planner {

// One shard a rank offers to save.
struct SaveShard {
  std::string flat_key;
  Path path;
  DType dtype = DType::kFloat32;
  Shape global_shape;
  Box box;
  // Parallel to path; empty when every part is a dict's str key.
  PathKinds kinds = {};
};

// One small value a rank offers to save.
struct SaveValue {
  std::string flat_key;
  Path path;
  Value value;
  // Parallel to path; empty when every part is a dict's str key.
  PathKinds kinds = {};
};

// What one rank holds: the input of BuildSavePlan.
struct RankSaveLayout {
  std::vector<SaveShard> shards;
  std::vector<SaveValue> values;
};

// One chunk to store: a box written by `writer_rank` from its shard
// `source_shard` (an index into that rank's RankSaveLayout::shards).
struct PlannedChunk {
  Box box;
  int writer_rank = 0;
  size_t source_shard = 0;
  uint64_t nbytes = 0;
};

struct PlannedTensor {
  std::string flat_key;
  DType dtype = DType::kFloat32;
  Shape global_shape;
  std::vector<PlannedChunk> chunks;  // sorted by box; a partition of the tensor
};

// The global save plan every rank computes identically from every rank's
// layout.
struct SavePlan {
  // Sorted by flat key.
  std::vector<PlannedTensor> tensors;
  // From the lowest rank holding each.
  std::map<std::string, Value> values;
  // Every tensor and value key.
  std::map<std::string, Path> flat_mapping;
  // The kinds of the parts of those paths that are not all str keys.
  std::map<std::string, PathKinds> path_kinds;
  // Bytes each rank writes.
  std::vector<uint64_t> bytes_per_rank;
  uint64_t total_bytes = 0;

  // Multi-line, deterministic description for tests and debugging.
  std::string ToString() const;
};

// Validates the layouts of all ranks and plans the save: a key must have one
// dtype and global shape everywhere and be either a tensor or a value
// everywhere; each box must lie inside its tensor; overlapping boxes must be
// identical (replicas, stored once); the boxes must cover each tensor without
// a gap (all checked by CheckPartition, partition.h; of several overlaps and
// gaps, the first in row-major order is reported). Boxes larger than
// `max_chunk_bytes` are split along outer dimensions. Errors name the key,
// ranks and shapes, and for a gap the first element no rank holds.
//
// Writers: the holders of a box (ascending) take turns over the chunks of all
// boxes with exactly those holders, in (key, box, chunk) order, starting at
// the ordinal of the set's first chunk in the plan's bytes; so the
// replicas of a box share its writing, and every holder can tell the writer
// of each chunk it holds from its own boxes alone. REQUIRES: max_chunk_bytes
// > 0.
Result<SavePlan> BuildSavePlan(const std::vector<RankSaveLayout>& ranks,
                               size_t max_chunk_bytes);

// Save layouts grouped by class: ranks whose layouts are identical (data-
// parallel replicas) form one class, whose layout travels between ranks once.
struct SaveClasses {
  // layouts[c]: the layout of every rank of class c.
  std::vector<RankSaveLayout> layouts;
  // class_of_rank[r]: rank r's class.
  std::vector<int> class_of_rank;
};

// The plan BuildSavePlan makes for the ranks' layouts, from their classes.
// With `only_writer` >= 0, `tensors` keeps only the chunks that rank writes
// (its part of the save; the other fields stay whole), and planning costs
// O(every class's boxes + the chunks of the boxes that rank holds), not O(the
// job's chunks). Errors name the lowest rank of a class.
Result<SavePlan> BuildClassSavePlan(const SaveClasses& classes,
                                    size_t max_chunk_bytes,
                                    int only_writer = -1);

}  // namespace ckptdb::planner
