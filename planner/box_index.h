#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/box_geometry.h"

namespace ckptdb::planner {

// A static index over boxes of one tensor answering "which boxes meet this
// box". Per dimension (up to kIndexedDims), the boxes sorted by their begin
// there with a running maximum of their end: a query takes, of the indexed
// dimensions, the one with the fewest candidates (boxes that begin before the
// query ends and may still reach its begin) and tests only those. So a
// row-parallel query (all rows, some columns) against chunks cut into row
// bands of column blocks scans one column block, not every chunk.
//
// The boxes are borrowed: they must outlive the index and not change. Every
// box has `ndim` dimensions.
class BoxIndex {
 public:
  static constexpr size_t kIndexedDims = 4;
  // Up to this many boxes are scanned in order, with no index to build (a
  // tensor of one chunk, a target of one box: most of a model's tensors).
  static constexpr size_t kScannedBoxes = 4;

  BoxIndex(std::vector<const Box*> boxes, size_t ndim);
  explicit BoxIndex(const std::vector<Box>& boxes, size_t ndim);
  // An index of no boxes, to Rebuild.
  BoxIndex() = default;

  // Indexes `boxes` (of `ndim` dimensions) instead of what it held, in the
  // memory it has: a planner indexes tensor after tensor.
  void Rebuild(std::span<const Box* const> boxes, size_t ndim);

  // Calls fn(box index) for every box meeting `query` with at least one
  // element, in ascending box index, without building the common parts.
  template <typename Fn>
  void ForEachMeeting(const Box& query, Fn&& fn) const {
    ForEachCandidate(query, [&](size_t b) {
      if (Meet(*boxes_[b], query)) fn(b);
    });
  }

  // Calls fn(box index, intersection) for every box meeting `query` with at
  // least one element, in ascending box index. 0-d boxes all meet a 0-d query.
  template <typename Fn>
  void ForEachOverlap(const Box& query, Fn&& fn) const {
    ForEachCandidate(query, [&](size_t b) {
      if (ndim_ == 0) {
        fn(b, Box{});
      } else if (auto common = Intersect(*boxes_[b], query)) {
        fn(b, *common);
      }
    });
  }

 private:
  struct Axis {
    size_t dim;
    // Box indices by begin in this dimension (then index).
    std::vector<uint32_t> order;
    // max_end[i]: the largest end among order[0..i] in this dimension.
    std::vector<int64_t> max_end;
  };

  // Calls fn(box index) for each box that may meet `query`, ascending: every
  // box where there is no axis (few boxes, or none indexable), else those
  // Candidates finds.
  template <typename Fn>
  void ForEachCandidate(const Box& query, Fn&& fn) const {
    if (axes_.empty()) {
      for (size_t b = 0; b < boxes_.size(); ++b) fn(b);
      return;
    }
    Candidates(query, &scratch_);
    for (uint32_t b : scratch_) fn(static_cast<size_t>(b));
  }

  // The indices of the boxes that may meet `query`, ascending, by the axis
  // with the fewest. REQUIRES: an axis.
  void Candidates(const Box& query, std::vector<uint32_t>* out) const;
  int64_t Begin(uint32_t b, size_t d) const { return boxes_[b]->origin[d]; }
  // Builds the axes over boxes_ (none for few boxes).
  void BuildAxes();
  int64_t End(uint32_t b, size_t d) const {
    return boxes_[b]->exclusive_max(d);
  }

  std::vector<const Box*> boxes_;
  size_t ndim_ = 0;
  std::vector<Axis> axes_;
  // Reused by ForEachOverlap; the index is not thread-safe for queries.
  mutable std::vector<uint32_t> scratch_;
};

}  // namespace ckptdb::planner
