#pragma once

// Boxes of a tensor's index space, and the numpy-like indexes that select one
// (DB::Read of part of a tensor).

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/types.h"

namespace ckptdb {

// A half-open box [origin, origin + shape) in a tensor's global index space. A
// 0-d box (empty origin and shape) holds one element. The one box type of the
// library: shards, chunks and reads are all described by it.
struct Box {
  Shape origin{};
  Shape shape{};

  int64_t volume() const { return NumElements(shape); }
  size_t ndim() const { return shape.size(); }
  int64_t exclusive_max(size_t dim) const { return origin[dim] + shape[dim]; }

  friend bool operator==(const Box&, const Box&) = default;
  friend auto operator<=>(const Box&, const Box&) = default;
};

// One dimension of a TensorIndex, as numpy reads `a[i]` or `a[start:stop]`.
// Negative positions count from the end of the dimension.
struct IndexEntry {
  // A single position: selects it and drops the dimension from the result.
  static IndexEntry At(int64_t position) {
    IndexEntry e;
    e.single = true;
    e.start = position;
    return e;
  }
  // The positions [start, stop); nullopt: the start or the end of the
  // dimension. As numpy slices, bounds beyond the dimension are clamped to
  // it, and a start at or after the stop selects nothing. `step` is kept to
  // be refused by name: only 1 is supported.
  static IndexEntry Range(std::optional<int64_t> start = std::nullopt,
                          std::optional<int64_t> stop = std::nullopt,
                          int64_t step = 1) {
    IndexEntry e;
    e.start = start;
    e.stop = stop;
    e.step = step;
    return e;
  }
  // The positions [start, stop) exactly (a Box's extent in one dimension):
  // both must lie in the dimension, start <= stop; nothing is clamped.
  static IndexEntry Exact(int64_t start, int64_t stop) {
    IndexEntry e = Range(start, stop);
    e.exact = true;
    return e;
  }

  // True for At: the dimension is dropped from the result.
  bool single = false;
  std::optional<int64_t> start{};
  std::optional<int64_t> stop{};
  int64_t step = 1;
  // Exact: out-of-range bounds are an error instead of clamped.
  bool exact = false;

  friend bool operator==(const IndexEntry&, const IndexEntry&) = default;
};

// Which part of a tensor to read: one entry per leading dimension; dimensions
// without an entry are taken whole (an empty index is the whole tensor).
using TensorIndex = std::vector<IndexEntry>;

// The index as numpy would print it: "[1024:2048, :]", "[3, -2:]", "[]".
std::string IndexToString(const TensorIndex& index);

// The index of exactly `box` (every dimension a range, none dropped).
TensorIndex IndexOfBox(const Box& box);

}  // namespace ckptdb
