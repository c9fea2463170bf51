#pragma once

#include <cstddef>
#include <optional>

#include "ckptdb/types.h"
#include "planner/box.h"

namespace ckptdb::engine {

// A box inside a dense row-major buffer: `data` holds a whole array of `shape`;
// the box starts at `offset` within it.
struct StridedBox {
  const void* data;
  const Shape& shape;
  const Shape& offset;
};

struct MutableStridedBox {
  void* data;
  const Shape& shape;
  const Shape& offset;
};

// Copies a box of `lengths` elements from `src` to `dst` without intermediate
// buffers: the innermost dimensions that are contiguous in both buffers are
// merged into one memcpy per run. When `src_dtype != dst_dtype` each element is
// converted (numeric dtypes only). REQUIRES: both boxes lie inside their
// buffers.
void CopyBox(StridedBox src, DType src_dtype, MutableStridedBox dst,
             DType dst_dtype, const Shape& lengths);

// ContiguousRun lives with the boxes of the planner (planner/box.h).
using planner::ContiguousRun;

// Converts `n` contiguous elements. REQUIRES: IsNumeric(from) && IsNumeric(to),
// or from == to.
void ConvertElements(const void* src, DType from, void* dst, DType to,
                     size_t n);

// Minifloat codecs used by ConvertElements, exposed for tests.
uint16_t FloatToHalf(double v);
double HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(double v);
double BFloat16ToFloat(uint16_t h);
uint8_t FloatToE4M3FN(double v);
double E4M3FNToFloat(uint8_t v);
uint8_t FloatToE5M2(double v);
double E5M2ToFloat(uint8_t v);

}  // namespace ckptdb::engine
