#include "core/partition.h"

#include <algorithm>
#include <array>
#include <limits>

namespace ckptdb::planner {
namespace {

using BoxPtrs = std::span<const Box* const>;

// How the corner method works. The indicator of a box [a, b) is the product
// over dimensions of (H(x - a_d) - H(x - b_d)) with H the unit step, so a sum
// of box indicators equals a signed sum of "orthants" H(x - c) at the boxes'
// corners c. Orthants at distinct points are linearly independent, hence the
// boxes hold every element of the tensor exactly once iff their signed corners
// add up to the tensor's own (+1 at the origin) and cancel everywhere else.
// Inside the tensor an orthant whose corner sits at a tensor end is zero, so
// such corners are dropped: a box has 2^k corners for the k dimensions in
// which it ends before the tensor does. If p is the first corner (row-major)
// whose signed sum is off by r != 0, no other off corner lies below p in every
// dimension, so p is held by 1 + r boxes, and no earlier element is held by
// other than one box: p is the first element held by no box or by several.

constexpr int64_t kMaxElements = int64_t{1} << 62;
constexpr size_t kCornerSlack = size_t{1} << 20;

// Elements of `shape`, or -1 when an extent is negative or there are more
// than 2^62.
int64_t CheckedElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) return -1;
  }
  return n;
}

PartitionProblem BoxProblem(PartitionError error, size_t box) {
  PartitionProblem problem;
  problem.error = error;
  problem.box = box;
  return problem;
}

// Checks every box in input order; `live` gets the non-empty ones, ascending.
PartitionProblem CheckEachBox(const Shape& global_shape, BoxPtrs boxes,
                              const PartitionOptions& options,
                              std::vector<size_t>* live) {
  live->reserve(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    const PartitionError inside = CheckBoxInside(global_shape, *boxes[i]);
    if (inside != PartitionError::kNone) return BoxProblem(inside, i);
    if (boxes[i]->volume() > 0) {
      live->push_back(i);
    } else if (!options.allow_empty_boxes) {
      return BoxProblem(PartitionError::kEmptyBox, i);
    }
  }
  return {};
}

// The row-major index of a live box's first element.
uint64_t Origin(const Shape& strides, const Box& box) {
  uint64_t linear = 0;
  for (size_t d = 0; d < box.ndim(); ++d)
    linear += static_cast<uint64_t>(box.origin[d] * strides[d]);
  return linear;
}

// Keeps, of each set of identical boxes in `live`, the lowest index. Sorts by
// first element (integers), then by shape only among boxes that share it.
void DropReplicas(const Shape& global_shape, BoxPtrs boxes,
                  std::vector<size_t>* live) {
  const Shape strides = RowMajorStrides(global_shape);
  std::vector<std::pair<uint64_t, size_t>> order;
  order.reserve(live->size());
  for (size_t i : *live) order.emplace_back(Origin(strides, *boxes[i]), i);
  std::sort(order.begin(), order.end());
  std::vector<bool> replica(boxes.size(), false);
  for (size_t run = 0; run < order.size();) {
    size_t end = run + 1;
    while (end < order.size() && order[end].first == order[run].first) ++end;
    if (end - run > 1) {
      std::sort(order.begin() + run, order.begin() + end,
                [&](const auto& a, const auto& b) {
                  const auto c =
                      boxes[a.second]->shape <=> boxes[b.second]->shape;
                  return c != 0 ? c < 0 : a.second < b.second;
                });
      for (size_t i = run + 1; i < end; ++i) {
        replica[order[i].second] =
            boxes[order[i].second]->shape == boxes[order[i - 1].second]->shape;
      }
    }
    run = end;
  }
  std::erase_if(*live, [&](size_t i) { return replica[i]; });
}

// The number of dimensions in which `box` ends before the tensor.
size_t CountCutDims(const Shape& global_shape, const Box& box) {
  size_t k = 0;
  for (size_t d = 0; d < box.ndim(); ++d)
    k += box.exclusive_max(d) < global_shape[d] ? 1 : 0;
  return k;
}

// The corners of the live boxes, saturating at SIZE_MAX.
size_t CountCorners(const Shape& global_shape, BoxPtrs boxes,
                    const std::vector<size_t>& live) {
  size_t corners = 0;
  for (size_t i : live) {
    const size_t k = CountCutDims(global_shape, *boxes[i]);
    if (k >= 63 || __builtin_add_overflow(corners, size_t{1} << k, &corners)) {
      return std::numeric_limits<size_t>::max();
    }
  }
  return corners;
}

// Appends the kept corners of `box` as (row-major index << 1 | positive).
void AppendCorners(const Shape& global_shape, const Shape& strides,
                   const Box& box, std::vector<uint64_t>* keys) {
  // Steps between a box's lower and upper corner in its cut dimensions; the
  // corner budget keeps them fewer than 63.
  std::array<uint64_t, 63> steps;
  size_t k = 0;
  uint64_t linear = 0;
  for (size_t d = 0; d < box.ndim(); ++d) {
    linear += static_cast<uint64_t>(box.origin[d] * strides[d]);
    if (box.exclusive_max(d) < global_shape[d]) {
      CKPTDB_ASSERT(k < steps.size());
      steps[k++] = static_cast<uint64_t>(box.shape[d] * strides[d]);
    }
  }
  // Gray code: step m flips bit ctz(m), one corner to the next.
  uint64_t gray = 0;
  bool positive = true;
  keys->push_back(linear << 1 | 1);
  for (uint64_t m = 1; m < (uint64_t{1} << k); ++m) {
    const int bit = __builtin_ctzll(m);
    gray ^= uint64_t{1} << bit;
    linear = (gray >> bit & 1) ? linear + steps[bit] : linear - steps[bit];
    positive = !positive;
    keys->push_back(linear << 1 | (positive ? 1 : 0));
  }
}

// The row-major index of the first element not held by exactly one box, or
// nullopt when every element is. REQUIRES: `keys` sorted.
std::optional<uint64_t> FirstOffCorner(const std::vector<uint64_t>& keys,
                                       int64_t* held) {
  size_t i = 0;
  if (keys.empty() || keys[0] >> 1 != 0) {
    *held = 0;  // the origin, held by no box
    return 0;
  }
  while (i < keys.size()) {
    const uint64_t linear = keys[i] >> 1;
    int64_t residual = linear == 0 ? -1 : 0;
    for (; i < keys.size() && keys[i] >> 1 == linear; ++i)
      residual += (keys[i] & 1) ? 1 : -1;
    if (residual != 0) {
      *held = 1 + residual;
      return linear;
    }
  }
  return std::nullopt;
}

Shape Unlinear(uint64_t linear, const Shape& global_shape) {
  Shape element(global_shape.size(), 0);
  for (size_t d = global_shape.size(); d-- > 0;) {
    const uint64_t extent = static_cast<uint64_t>(global_shape[d]);
    element[d] = static_cast<int64_t>(linear % extent);
    linear /= extent;
  }
  return element;
}

int64_t CoveredElements(BoxPtrs boxes, const std::vector<size_t>& live) {
  int64_t covered = 0;
  for (size_t i : live) {
    if (__builtin_add_overflow(covered, boxes[i]->volume(), &covered))
      return std::numeric_limits<int64_t>::max();
  }
  return covered;
}

PartitionProblem OverlapProblem(BoxPtrs boxes, size_t a, size_t b) {
  PartitionProblem problem = BoxProblem(PartitionError::kOverlap, a);
  problem.other_box = b;
  std::optional<Box> common = Intersect(*boxes[a], *boxes[b]);
  CKPTDB_ASSERT(common.has_value());
  problem.overlap = std::move(*common);
  return problem;
}

PartitionProblem GapProblem(BoxPtrs boxes, const std::vector<size_t>& live,
                            int64_t total, std::optional<Shape> missing) {
  PartitionProblem problem;
  problem.error = PartitionError::kGap;
  problem.missing_element = std::move(missing);
  problem.covered = CoveredElements(boxes, live);
  problem.total = total;
  return problem;
}

PartitionProblem CheckByCorners(const Shape& global_shape, int64_t total,
                                BoxPtrs boxes, const std::vector<size_t>& live,
                                size_t corners) {
  const Shape strides = RowMajorStrides(global_shape);
  std::vector<uint64_t> keys;
  keys.reserve(corners);
  for (size_t i : live) AppendCorners(global_shape, strides, *boxes[i], &keys);
  std::sort(keys.begin(), keys.end());
  int64_t held = 1;
  const std::optional<uint64_t> first = FirstOffCorner(keys, &held);
  if (!first) return {};
  CKPTDB_ASSERT(held >= 0 && held != 1);
  Shape element = Unlinear(*first, global_shape);
  if (held == 0) return GapProblem(boxes, live, total, std::move(element));
  const Box point{element, Shape(element.size(), 1)};
  std::vector<size_t> holders;
  for (size_t i : live) {
    if (Contains(*boxes[i], point)) holders.push_back(i);
  }
  CKPTDB_ASSERT(holders.size() == static_cast<size_t>(held));
  return OverlapProblem(boxes, holders[0], holders[1]);
}

// The dimension in which the boxes' begins take the most values.
size_t SweepDim(BoxPtrs boxes, const std::vector<size_t>& live) {
  size_t dim = 0, most = 0;
  for (size_t d = 0; d < boxes[live[0]]->ndim(); ++d) {
    std::vector<int64_t> begins;
    for (size_t i : live) begins.push_back(boxes[i]->origin[d]);
    std::sort(begins.begin(), begins.end());
    const size_t distinct =
        std::unique(begins.begin(), begins.end()) - begins.begin();
    if (distinct > most) {
      most = distinct;
      dim = d;
    }
  }
  return dim;
}

// The fallback for boxes cut in many dimensions: a sweep along SweepDim that
// compares each box with those still open at its begin, then the volumes.
PartitionProblem CheckBySweep(int64_t total, BoxPtrs boxes,
                              const std::vector<size_t>& live) {
  if (!live.empty()) {
    const size_t dim = SweepDim(boxes, live);
    std::vector<size_t> order = live;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return boxes[a]->origin[dim] < boxes[b]->origin[dim];
    });
    std::vector<size_t> open;
    for (size_t i : order) {
      const int64_t begin = boxes[i]->origin[dim];
      std::erase_if(open, [&](size_t j) {
        return boxes[j]->exclusive_max(dim) <= begin;
      });
      for (size_t j : open) {
        if (Intersect(*boxes[i], *boxes[j]))
          return OverlapProblem(boxes, std::min(i, j), std::max(i, j));
      }
      open.push_back(i);
    }
  }
  const int64_t covered = CoveredElements(boxes, live);
  CKPTDB_ASSERT(covered <= total);
  if (covered < total) return GapProblem(boxes, live, total, std::nullopt);
  return {};
}

// Whether the corner method stays within PartitionOptions::corners_per_box.
bool UseCorners(size_t corners, size_t live, size_t ndim,
                const PartitionOptions& options) {
  if (ndim == 0) return true;  // one corner per box; the sweep needs a dim
  if (options.corners_per_box == 0) return false;
  size_t budget = 0;
  if (__builtin_mul_overflow(options.corners_per_box, live, &budget) ||
      __builtin_add_overflow(budget, kCornerSlack, &budget)) {
    budget = std::numeric_limits<size_t>::max() - 1;
  }
  return corners <= budget;  // CountCorners saturates at SIZE_MAX
}

}  // namespace

std::string_view PartitionErrorName(PartitionError error) {
  switch (error) {
    case PartitionError::kNone:
      return "none";
    case PartitionError::kBadShape:
      return "bad shape";
    case PartitionError::kWrongRank:
      return "wrong rank";
    case PartitionError::kOutside:
      return "outside";
    case PartitionError::kEmptyBox:
      return "empty box";
    case PartitionError::kOverlap:
      return "overlap";
    case PartitionError::kGap:
      return "gap";
  }
  return "?";
}

std::string PartitionProblem::ToString() const {
  std::string out(PartitionErrorName(error));
  switch (error) {
    case PartitionError::kNone:
    case PartitionError::kBadShape:
      return out;
    case PartitionError::kWrongRank:
    case PartitionError::kOutside:
    case PartitionError::kEmptyBox:
      return out + ": box " + std::to_string(box);
    case PartitionError::kOverlap:
      return out + ": boxes " + std::to_string(box) + " and " +
             std::to_string(other_box) + " share " + BoxToString(overlap);
    case PartitionError::kGap:
      if (missing_element)
        out += ": no box holds " + ShapeToString(*missing_element) + ",";
      return out + " boxes hold " + std::to_string(covered) + " of " +
             std::to_string(total) + " elements";
  }
  return out;
}

PartitionError CheckBoxInside(const Shape& global_shape, const Box& box) {
  return CheckBoxInside(global_shape, box.origin, box.shape);
}

PartitionError CheckBoxInside(const Shape& global_shape, const Shape& origin,
                              const Shape& shape) {
  const size_t ndim = global_shape.size();
  if (origin.size() != ndim || shape.size() != ndim)
    return PartitionError::kWrongRank;
  for (size_t d = 0; d < ndim; ++d) {
    // Written so that no sum can overflow.
    if (origin[d] < 0 || shape[d] < 0 || origin[d] > global_shape[d] ||
        shape[d] > global_shape[d] - origin[d]) {
      return PartitionError::kOutside;
    }
  }
  return PartitionError::kNone;
}

PartitionProblem CheckPartitionOfPointers(const Shape& global_shape,
                                          std::span<const Box* const> boxes,
                                          const PartitionOptions& options) {
  const int64_t total = CheckedElements(global_shape);
  if (total < 0) return BoxProblem(PartitionError::kBadShape, 0);
  // Every box the whole tensor (one, or replicas where they are allowed): a
  // partition with nothing to compare, the layout of most tensors.
  const auto whole = [&](const Box* box) {
    return box->shape == global_shape &&
           box->origin.size() == global_shape.size() &&
           std::all_of(box->origin.begin(), box->origin.end(),
                       [](int64_t o) { return o == 0; });
  };
  if (total > 0 && !boxes.empty() &&
      (boxes.size() == 1 || options.allow_replicas) &&
      std::all_of(boxes.begin(), boxes.end(), whole))
    return {};
  std::vector<size_t> live;
  PartitionProblem problem = CheckEachBox(global_shape, boxes, options, &live);
  if (!problem.ok()) return problem;
  if (options.allow_replicas) DropReplicas(global_shape, boxes, &live);
  if (total == 0) {
    CKPTDB_ASSERT(live.empty());  // every box inside an empty tensor is empty
    return {};
  }
  const size_t corners = CountCorners(global_shape, boxes, live);
  if (UseCorners(corners, live.size(), global_shape.size(), options))
    return CheckByCorners(global_shape, total, boxes, live, corners);
  return CheckBySweep(total, boxes, live);
}

PartitionProblem CheckPartition(const Shape& global_shape,
                                const std::vector<Box>& boxes,
                                const PartitionOptions& options) {
  std::vector<const Box*> pointers(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) pointers[i] = &boxes[i];
  return CheckPartitionOfPointers(global_shape, pointers, options);
}

}  // namespace ckptdb::planner
