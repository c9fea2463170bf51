#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/box.h"
#include "ckptdb/types.h"

namespace ckptdb::planner {

// The library's one box type (ckptdb/box.h).
using ckptdb::Box;

// "{offset [0, 4], shape [2, 4]}".
std::string BoxToString(const Box& box);

// The common part of two boxes of the same rank, or nullopt when they share no
// element.
std::optional<Box> Intersect(const Box& a, const Box& b);

// True when `inner` lies inside `outer`.
bool Contains(const Box& outer, const Box& inner);

// Splits `box` (of elements of `elem_size` bytes) into boxes of at most
// `max_bytes` each (at least one element each), cutting along outer dimensions
// only: every piece is a contiguous run of the row-major buffer holding `box`.
// Returns {box} when it already fits.
std::vector<Box> SplitBox(const Box& box, size_t elem_size, size_t max_bytes);

// The sizes of SplitBox's pieces without making them: `runs` runs (one per
// index of the dimensions cut into single indices) of `per_run` pieces each,
// every piece of `piece_bytes` but the last of a run, of `last_bytes`.
struct SplitSizes {
  uint64_t runs = 1;
  uint64_t per_run = 1;
  uint64_t piece_bytes = 0;
  uint64_t last_bytes = 0;
  uint64_t count() const { return runs * per_run; }
};
SplitSizes SplitBoxSizes(const Box& box, size_t elem_size, size_t max_bytes);

// The byte offset of the box [offset, offset + lengths) inside a dense
// row-major array of `shape` when the box is one contiguous run of memory
// (leading lengths 1, then one partial dimension, then whole dimensions);
// nullopt otherwise. An empty box is the run at 0.
std::optional<size_t> ContiguousRun(const Shape& shape, const Shape& offset,
                                    const Shape& lengths, size_t elem_size);

}  // namespace ckptdb::planner
