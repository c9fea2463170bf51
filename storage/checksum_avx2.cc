// XXH3-64 compiled with -mavx2 (only this file): called by ChunkChecksum once
// the CPU is known to have AVX2. XXH_INLINE_ALL keeps every xxHash symbol of
// this file private, apart from the library's.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace ckptdb::storage {

uint64_t ChunkChecksumAvx2(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}

}  // namespace ckptdb::storage
