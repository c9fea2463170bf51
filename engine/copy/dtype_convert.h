#pragma once

// Element-wise conversion between numeric dtypes, and the minifloat codecs
// (float16, bfloat16, float8) it uses. Floats convert through double, rounding
// half to even; float to integer truncates toward zero and saturates (NaN: 0);
// integer to integer wraps like a C cast.
#include <cstddef>
#include <cstdint>

#include "ckptdb/types.h"

namespace ckptdb::engine {

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
