#include "storage/checksum.h"

#include <xxhash.h>

namespace ckptdb::storage {

#if defined(CKPTDB_XXH3_AVX2)
uint64_t ChunkChecksumAvx2(const void* data, size_t n);  // checksum_avx2.cc

uint64_t ChunkChecksum(const void* data, size_t n) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 ? ChunkChecksumAvx2(data, n) : XXH3_64bits(data, n);
}
#else
uint64_t ChunkChecksum(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}
#endif

uint64_t ReferenceChecksum(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}

}  // namespace ckptdb::storage
