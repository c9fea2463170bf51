#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "ckptdb/types.h"
#include "core/box_geometry.h"

namespace ckptdb::engine {

// A box inside a buffer holding a whole array of `buffer_shape`: the box starts
// at `origin` within it. The buffer is dense row-major unless `strides`
// (element strides, one per dimension, non-negative) says otherwise.
struct StridedBox {
  const void* data;
  const Shape& buffer_shape;
  const Shape& origin;
  std::span<const int64_t> strides = {};
};

struct MutableStridedBox {
  void* data;
  const Shape& buffer_shape;
  const Shape& origin;
  std::span<const int64_t> strides = {};
};

// The element strides of a buffer of `shape`: `strides`, or those of a dense
// row-major array when it is empty.
std::vector<size_t> ElementStrides(const Shape& shape,
                                   std::span<const int64_t> strides);

// How a box of `lengths` walks two buffers of the given element strides: the
// innermost dimensions [inner, ndim) that are one contiguous run in both
// merge into `run` elements (dimensions of extent 1 never break a run).
struct BoxRun {
  size_t inner = 0;
  size_t run = 1;
};
BoxRun InnermostRun(const Shape& lengths, const std::vector<size_t>& a,
                    const std::vector<size_t>& b);

// Copies a box of `lengths` elements from `src` to `dst` without intermediate
// buffers: the innermost dimensions that are contiguous in both buffers are
// merged into one memcpy per run (strided buffers: one element per run when
// the innermost stride is not 1). When `src_dtype != dst_dtype` each element is
// converted (numeric dtypes only, ConvertElements). REQUIRES: both boxes lie
// inside their buffers.
void CopyBox(StridedBox src, DType src_dtype, MutableStridedBox dst,
             DType dst_dtype, const Shape& lengths);

// ContiguousRun lives with the boxes of the planner (core/box_geometry.h).
using planner::ContiguousRun;

}  // namespace ckptdb::engine
