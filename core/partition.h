#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/types.h"
#include "core/box_geometry.h"

namespace ckptdb::planner {

// The one check that a tensor's boxes (shards of a save, chunks of a stored
// record) partition it. Pure and deterministic; callers turn a problem into a
// message in their own words (key, rank, chunk).

// What is wrong with a set of boxes, in the order the check looks for it.
enum class PartitionError {
  kNone,
  kBadShape,   // the global shape has a negative extent or > 2^62 elements
  kWrongRank,  // a box has another number of dimensions than the tensor
  kOutside,    // a box has a negative offset or extent, or ends past the tensor
  kEmptyBox,   // a box holds no element (PartitionOptions::allow_empty_boxes)
  kOverlap,    // an element lies in two boxes (that are not identical replicas)
  kGap,        // an element lies in no box
};

// "overlap", "gap", ...
std::string_view PartitionErrorName(PartitionError error);

struct PartitionOptions {
  // Identical boxes are replicas of one box: allowed, and counted once. When
  // false, two identical boxes overlap.
  bool allow_replicas = false;
  // Boxes holding no element are ignored (they must still lie inside the
  // tensor). When false, such a box is a kEmptyBox problem.
  bool allow_empty_boxes = false;
  // Work bound of the main (corner) method: it runs while the boxes have at
  // most this many corners each on average (plus 2^20 in all); a box cut in k
  // dimensions has 2^k. Beyond it, a sweep that finds the same problems but
  // reports an overlap before a gap and no gap element. Tests set it to 0.
  size_t corners_per_box = 16;
};

// The first problem found, or error == kNone. Box indices refer to the input;
// of several identical replicas, the lowest index stands for all.
struct PartitionProblem {
  PartitionError error = PartitionError::kNone;
  // kWrongRank, kOutside, kEmptyBox: the lowest offending box. kOverlap: the
  // lower of the two boxes.
  size_t box = 0;
  // kOverlap: the other box (> box).
  size_t other_box = 0;
  // kOverlap: the elements boxes `box` and `other_box` share.
  Box overlap;
  // kGap: the first element in row-major order that no box holds; nullopt when
  // the sweep (see PartitionOptions::corners_per_box) found the gap.
  std::optional<Shape> missing_element;
  // kGap: elements the distinct non-empty boxes hold, summed (saturating at
  // INT64_MAX; may reach `total` when boxes also overlap elsewhere), and the
  // tensor's elements.
  int64_t covered = 0;
  int64_t total = 0;

  bool ok() const { return error == PartitionError::kNone; }
  // "overlap: boxes 0 and 2 share {offset [1, 0], shape [1, 4]}", for tests.
  std::string ToString() const;
};

// kNone when `box` lies inside a tensor of `global_shape` (a box of extent 0
// may sit at the tensor's end), else kWrongRank or kOutside. Never overflows.
PartitionError CheckBoxInside(const Shape& global_shape, const Box& box);
// The same for the box at `origin` of `shape`, without building it.
PartitionError CheckBoxInside(const Shape& global_shape, const Shape& origin,
                              const Shape& shape);

// Checks that `boxes` partition a tensor of `global_shape`: the shape is valid,
// every box lies inside it (CheckBoxInside, in input order), no box is empty
// (unless allowed), and every element lies in exactly one box (identical boxes
// counting once when replicas are allowed). With no overlap and no gap, the
// distinct boxes' volumes sum to the tensor's.
//
// Of several overlaps and gaps, the one at the first element in row-major
// order is reported (for an overlap, PartitionProblem::overlap begins at that
// element), naming the two lowest boxes holding it. Time O(C log C) and memory
// 8 C bytes for C = the boxes' corners, kept only in dimensions where a box
// ends before the tensor: two per box of a row or column partition, four per
// box of a 2-d grid. Beyond PartitionOptions::corners_per_box, the sweep: it
// compares boxes open at the same coordinate of one dimension, pairwise in the
// worst case.
PartitionProblem CheckPartition(const Shape& global_shape,
                                const std::vector<Box>& boxes,
                                const PartitionOptions& options = {});

// CheckPartition over boxes held elsewhere (the shards of a layout), without
// copying them. REQUIRES: no pointer is null.
PartitionProblem CheckPartitionOfPointers(const Shape& global_shape,
                                          std::span<const Box* const> boxes,
                                          const PartitionOptions& options = {});

}  // namespace ckptdb::planner
