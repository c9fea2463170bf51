#pragma once

// Test helpers shared by the planner's property tests.

#include <cstdint>
#include <random>
#include <vector>

#include "core/box_geometry.h"

namespace ckptdb::planner::testing {

// Splits `box` recursively at random points into a partition (kd-tree style,
// not a grid), at most `depth` levels deep.
inline void RandomPartition(const Box& box, std::mt19937& rng, int depth,
                            std::vector<Box>& out) {
  std::vector<size_t> splittable;
  for (size_t d = 0; d < box.ndim(); ++d) {
    if (box.shape[d] > 1) splittable.push_back(d);
  }
  if (depth == 0 || splittable.empty() || rng() % 4 == 0) {
    out.push_back(box);
    return;
  }
  const size_t d = splittable[rng() % splittable.size()];
  const int64_t cut = 1 + static_cast<int64_t>(rng() % (box.shape[d] - 1));
  Box lo = box, hi = box;
  lo.shape[d] = cut;
  hi.origin[d] += cut;
  hi.shape[d] -= cut;
  RandomPartition(lo, rng, depth - 1, out);
  RandomPartition(hi, rng, depth - 1, out);
}

// Row-major index of coordinate `coord` in an array of `shape`.
inline int64_t Linear(const Shape& shape, const Shape& coord) {
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + coord[d];
  return index;
}

// Calls fn(coord) for every element of `box`, in row-major order.
template <typename Fn>
void ForEachElement(const Box& box, Fn&& fn) {
  if (box.volume() == 0) return;
  Shape coord = box.origin;
  while (true) {
    fn(coord);
    size_t d = box.ndim();
    while (true) {
      if (d == 0) return;
      --d;
      if (++coord[d] < box.exclusive_max(d)) break;
      coord[d] = box.origin[d];
    }
  }
}

}  // namespace ckptdb::planner::testing
