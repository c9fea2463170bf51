#include "planner/box_index.h"

#include <algorithm>

namespace ckptdb::planner {

namespace {

std::vector<const Box*> PointersTo(const std::vector<Box>& boxes) {
  std::vector<const Box*> pointers;
  pointers.reserve(boxes.size());
  for (const Box& box : boxes) pointers.push_back(&box);
  return pointers;
}

}  // namespace

BoxIndex::BoxIndex(const std::vector<Box>& boxes, size_t ndim)
    : BoxIndex(PointersTo(boxes), ndim) {}

BoxIndex::BoxIndex(std::vector<const Box*> boxes_in, size_t ndim)
    : boxes_(std::move(boxes_in)), ndim_(ndim) {
  BuildAxes();
}

void BoxIndex::Rebuild(std::span<const Box* const> boxes, size_t ndim) {
  boxes_.assign(boxes.begin(), boxes.end());
  ndim_ = ndim;
  axes_.clear();
  BuildAxes();
}

void BoxIndex::BuildAxes() {
  const std::vector<const Box*>& boxes = boxes_;
  CKPTDB_ASSERT(boxes.size() < UINT32_MAX);
  if (boxes.size() <= kScannedBoxes) return;  // no axes: scanned
  const size_t indexed = std::min(ndim_, kIndexedDims);
  for (size_t d = 0; d < indexed; ++d) {
    const bool alike =
        d > 0 && std::all_of(boxes.begin(), boxes.end(), [&](const Box* b) {
          return b->origin[d] == boxes.front()->origin[d];
        });
    if (alike) continue;
    Axis& axis = axes_.emplace_back();
    axis.dim = d;
    axis.order.resize(boxes.size());
    for (size_t i = 0; i < boxes.size(); ++i)
      axis.order[i] = static_cast<uint32_t>(i);
    std::sort(axis.order.begin(), axis.order.end(),
              [&](uint32_t a, uint32_t b) {
                const int64_t ba = Begin(a, d), bb = Begin(b, d);
                return ba != bb ? ba < bb : a < b;
              });
    axis.max_end.resize(boxes.size());
    int64_t running = INT64_MIN;
    for (size_t i = 0; i < boxes.size(); ++i) {
      running = std::max(running, End(axis.order[i], d));
      axis.max_end[i] = running;
    }
  }
}

void BoxIndex::Candidates(const Box& query, std::vector<uint32_t>* out) const {
  out->clear();
  CKPTDB_ASSERT(!axes_.empty());
  // Per axis, candidates are order[lo, hi): they begin before the query ends
  // (hi), and from lo on the running end passes the query's begin.
  size_t best = 0, best_lo = 0, best_hi = 0;
  for (size_t a = 0; a < axes_.size(); ++a) {
    const Axis& axis = axes_[a];
    const size_t d = axis.dim;
    const int64_t begin = query.origin[d], end = query.exclusive_max(d);
    const size_t hi = static_cast<size_t>(
        std::partition_point(axis.order.begin(), axis.order.end(),
                             [&](uint32_t b) { return Begin(b, d) < end; }) -
        axis.order.begin());
    const size_t lo = static_cast<size_t>(
        std::partition_point(axis.max_end.begin(), axis.max_end.begin() + hi,
                             [&](int64_t e) { return e <= begin; }) -
        axis.max_end.begin());
    if (a == 0 || hi - lo < best_hi - best_lo) {
      best = a;
      best_lo = lo;
      best_hi = hi;
    }
  }
  const Axis& axis = axes_[best];
  for (size_t i = best_lo; i < best_hi; ++i) {
    if (End(axis.order[i], axis.dim) > query.origin[axis.dim])
      out->push_back(axis.order[i]);
  }
  std::sort(out->begin(), out->end());
}

}  // namespace ckptdb::planner
