#pragma once

#include <cstddef>

#include "ckptdb/types.h"

namespace ckptdb {

// Converts `n` contiguous elements of dtype `from` at `src` into dtype `to` at
// `dst`, as a load with LoadOptions::cast converts. REQUIRES: from == to, or
// IsNumeric(from) && IsNumeric(to).
void ConvertElements(const void* src, DType from, void* dst, DType to,
                     size_t n);

}  // namespace ckptdb
