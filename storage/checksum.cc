#include "storage/checksum.h"

#include <xxhash.h>

namespace ckptdb::storage {

#if defined(CKPTDB_XXH3_X86)
// checksum_simd.cc, compiled once per instruction set.
uint64_t ChunkChecksumAvx512(const void* data, size_t n);
uint64_t ChunkChecksumAvx2(const void* data, size_t n);
#endif

std::vector<ChecksumImpl> ChecksumImpls() {
  std::vector<ChecksumImpl> impls;
#if defined(CKPTDB_XXH3_X86)
  // xxHash's AVX-512 path needs AVX512F only; libgcc also checks that the OS
  // saves the vector registers.
  if (__builtin_cpu_supports("avx512f"))
    impls.push_back({"avx512", ChunkChecksumAvx512});
  if (__builtin_cpu_supports("avx2"))
    impls.push_back({"avx2", ChunkChecksumAvx2});
#endif
  impls.push_back({"library", XXH3_64bits});
  return impls;
}

uint64_t ChunkChecksum(const void* data, size_t n) {
  static const auto fastest = ChecksumImpls().front().fn;
  return fastest(data, n);
}

}  // namespace ckptdb::storage
