#include "ckptdb/convert.h"

#include "engine/copy/dtype_convert.h"

namespace ckptdb {

void ConvertElements(const void* src, DType from, void* dst, DType to,
                     size_t n) {
  engine::ConvertElements(src, from, dst, to, n);
}

}  // namespace ckptdb
