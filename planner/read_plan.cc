#include "planner/read_plan.h"

#include <algorithm>

#include "planner/box_index.h"

namespace ckptdb::planner {
namespace {

Status BadIndex(const std::string& key, const Shape& shape,
                const TensorIndex& index, const std::string& why) {
  return Status::InvalidArgument("tensor '" + key + "' of shape " +
                                 ShapeToString(shape) + ": index " +
                                 IndexToString(index) + " " + why);
}

// A position of a dimension of `extent`, negative ones counted from the end.
int64_t FromEnd(int64_t position, int64_t extent) {
  return position < 0 ? position + extent : position;
}

// The [begin, end) of dimension `d` that entry `e` selects, or the reason it
// selects none validly.
Result<std::pair<int64_t, int64_t>> ResolveEntry(const IndexEntry& e, size_t d,
                                                 int64_t extent) {
  const std::string dim = " in dimension " + std::to_string(d) +
                          " (of extent " + std::to_string(extent) + ")";
  if (e.single) {
    const int64_t at = FromEnd(e.start.value_or(0), extent);
    if (at < 0 || at >= extent) {
      return Status::InvalidArgument("is out of range: position " +
                                     std::to_string(e.start.value_or(0)) + dim);
    }
    return std::pair<int64_t, int64_t>{at, at + 1};
  }
  if (e.step != 1) {
    return Status::InvalidArgument("has step " + std::to_string(e.step) + dim +
                                   ": only step 1 is supported");
  }
  int64_t begin = e.start ? FromEnd(*e.start, extent) : 0;
  int64_t end = e.stop ? FromEnd(*e.stop, extent) : extent;
  if (!e.exact) {  // numpy's slice: clamped to the dimension, maybe empty
    begin = std::clamp<int64_t>(begin, 0, extent);
    end = std::clamp<int64_t>(end, begin, extent);
    return std::pair<int64_t, int64_t>{begin, end};
  }
  if (begin < 0 || begin > extent || end < 0 || end > extent) {
    return Status::InvalidArgument(
        "is out of range: " + std::to_string(e.start.value_or(0)) + ":" +
        std::to_string(e.stop.value_or(extent)) + dim);
  }
  if (begin > end) {
    return Status::InvalidArgument("has start " + std::to_string(begin) +
                                   " after stop " + std::to_string(end) + dim);
  }
  return std::pair<int64_t, int64_t>{begin, end};
}

}  // namespace

Result<BoxReadPlan> ResolveIndex(const std::string& key, const Shape& shape,
                                 const TensorIndex& index) {
  if (index.size() > shape.size()) {
    return BadIndex(key, shape, index,
                    "has " + std::to_string(index.size()) +
                        (index.size() == 1 ? " entry" : " entries") +
                        ", more than the tensor's " +
                        std::to_string(shape.size()) + " dimensions");
  }
  BoxReadPlan plan;
  plan.box = {Shape(shape.size(), 0), shape};
  for (size_t d = 0; d < index.size(); ++d) {
    Result<std::pair<int64_t, int64_t>> range =
        ResolveEntry(index[d], d, shape[d]);
    if (!range.ok()) {
      return BadIndex(key, shape, index, range.status().message());
    }
    plan.box.origin[d] = range->first;
    plan.box.shape[d] = range->second - range->first;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < index.size() && index[d].single) continue;
    plan.result_shape.push_back(plan.box.shape[d]);
  }
  return plan;
}

Result<BoxReadPlan> PlanBoxRead(const std::string& key,
                                const TensorMetadata& tensor,
                                const TensorIndex& index) {
  CKPTDB_ASSIGN_OR_RETURN(BoxReadPlan plan,
                          ResolveIndex(key, tensor.global_shape, index));
  if (plan.box.volume() == 0) return plan;
  const BoxIndex chunks(ChunkBoxes(tensor.chunks), tensor.global_shape.size());
  chunks.ForEachOverlap(plan.box, [&](size_t chunk, const Box& common) {
    plan.parts.push_back({chunk, common});
  });
  return plan;
}

}  // namespace ckptdb::planner
