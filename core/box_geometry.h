#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/box.h"
#include "ckptdb/metadata.h"
#include "ckptdb/types.h"

namespace ckptdb::planner {

// The library's one box type (ckptdb/box.h).
using ckptdb::Box;

// "{offset [0, 4], shape [2, 4]}".
std::string BoxToString(const Box& box);

// The common part of two boxes of the same rank, or nullopt when they share no
// element.
std::optional<Box> Intersect(const Box& a, const Box& b);

// True when two boxes of the same rank share an element (Intersect has a
// value), without building the common part.
bool Meet(const Box& a, const Box& b);

// The boxes of `chunks`, borrowed: for the checks and indexes that take
// boxes held elsewhere (CheckPartitionOfPointers, BoxIndex).
std::vector<const Box*> ChunkBoxes(const std::vector<ChunkMetadata>& chunks);

// True when `inner` lies inside `outer`.
bool Contains(const Box& outer, const Box& inner);

// Splits `box` (of elements of `elem_size` bytes) into boxes of at most
// `max_bytes` each (at least one element each), cutting along outer dimensions
// only: every piece is a contiguous run of the row-major buffer holding `box`.
// Returns {box} when it already fits.
std::vector<Box> SplitBox(const Box& box, size_t elem_size, size_t max_bytes);
// The same pieces into `pieces` (cleared first; its memory reused by a caller
// that splits box after box).
void SplitBox(const Box& box, size_t elem_size, size_t max_bytes,
              std::vector<Box>& pieces);

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

// One contiguous run shared by two dense row-major arrays: `nbytes` bytes at
// byte `src` of the first and at byte `dst` of the second.
struct RunPair {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t nbytes = 0;
  friend bool operator==(const RunPair&, const RunPair&) = default;
};

// Calls fn(RunPair) for each run that copies the box of `lengths` at
// `src_offset` in an array of `src_shape` to `dst_offset` in an array of
// `dst_shape` (elements of `elem_size` bytes), in the box's row-major order:
// the innermost dimensions that are whole in both arrays join one run.
template <typename Fn>
void ForEachRunPair(const Shape& src_shape, const Shape& src_offset,
                    const Shape& dst_shape, const Shape& dst_offset,
                    const Shape& lengths, size_t elem_size, Fn&& fn) {
  const size_t ndim = lengths.size();
  if (NumElements(lengths) == 0) return;
  uint64_t run = elem_size;
  size_t inner = ndim;  // dims [inner, ndim) form the run
  while (inner > 0) {
    const size_t d = --inner;
    run *= static_cast<uint64_t>(lengths[d]);
    if (lengths[d] != src_shape[d] || lengths[d] != dst_shape[d]) break;
  }
  std::vector<uint64_t> src_stride(ndim, elem_size),
      dst_stride(ndim, elem_size);
  for (size_t d = ndim; d-- > 1;) {
    src_stride[d - 1] = src_stride[d] * static_cast<uint64_t>(src_shape[d]);
    dst_stride[d - 1] = dst_stride[d] * static_cast<uint64_t>(dst_shape[d]);
  }
  RunPair at{0, 0, run};
  for (size_t d = 0; d < ndim; ++d) {
    at.src += static_cast<uint64_t>(src_offset[d]) * src_stride[d];
    at.dst += static_cast<uint64_t>(dst_offset[d]) * dst_stride[d];
  }
  std::vector<int64_t> index(inner, 0);  // odometer over dims [0, inner)
  while (true) {
    fn(at);
    size_t d = inner;
    while (true) {
      if (d == 0) return;
      --d;
      at.src += src_stride[d];
      at.dst += dst_stride[d];
      if (++index[d] < lengths[d]) break;
      at.src -= static_cast<uint64_t>(lengths[d]) * src_stride[d];
      at.dst -= static_cast<uint64_t>(lengths[d]) * dst_stride[d];
      index[d] = 0;
    }
  }
}

}  // namespace ckptdb::planner
