#include "core/checksum.h"

#include <xxhash.h>

namespace ckptdb::storage {

#if defined(CKPTDB_XXH3_X86)
// checksum_simd.cc, compiled once per instruction set.
uint64_t ChunkChecksumAvx512(const void* data, size_t n);
uint64_t ChunkChecksumAvx2(const void* data, size_t n);
uint64_t ChunkChecksumAvx512OfRuns(const ByteRun* runs, size_t n);
uint64_t ChunkChecksumAvx2OfRuns(const ByteRun* runs, size_t n);
ContentHash ChunkContentHashAvx512(const void* data, size_t n);
ContentHash ChunkContentHashAvx2(const void* data, size_t n);
#endif

namespace {

uint64_t LibraryChecksumOfRuns(const ByteRun* runs, size_t n) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (size_t i = 0; i < n; ++i)
    XXH3_64bits_update(state, runs[i].data, runs[i].size);
  const uint64_t value = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return value;
}

ContentHash LibraryContentHash(const void* data, size_t n) {
  const XXH128_hash_t h = XXH3_128bits(data, n);
  return {h.low64, h.high64};
}

using ContentHashFn = ContentHash (*)(const void*, size_t);

ContentHashFn FastestContentHash() {
#if defined(CKPTDB_XXH3_X86)
  if (__builtin_cpu_supports("avx512f")) return ChunkContentHashAvx512;
  if (__builtin_cpu_supports("avx2")) return ChunkContentHashAvx2;
#endif
  return LibraryContentHash;
}

}  // namespace

ContentHash ChunkContentHash(const void* data, size_t n) {
  static const ContentHashFn fastest = FastestContentHash();
  return fastest(data, n);
}

ChunkDigest ChunkChecksumAndContentHash(const void* data, size_t n) {
  // Above this length XXH3 hashes "long" inputs, where the 64-bit value is
  // the low half of the 128-bit one; below, the two differ.
  constexpr size_t kXxh3MidSizeMax = 240;
  const ContentHash content = ChunkContentHash(data, n);
  return {n > kXxh3MidSizeMax ? content.low : ChunkChecksum(data, n), content};
}

std::vector<ChecksumImpl> ChecksumImpls() {
  std::vector<ChecksumImpl> impls;
#if defined(CKPTDB_XXH3_X86)
  // xxHash's AVX-512 path needs AVX512F only; libgcc also checks that the OS
  // saves the vector registers.
  if (__builtin_cpu_supports("avx512f"))
    impls.push_back({"avx512", ChunkChecksumAvx512, ChunkChecksumAvx512OfRuns});
  if (__builtin_cpu_supports("avx2"))
    impls.push_back({"avx2", ChunkChecksumAvx2, ChunkChecksumAvx2OfRuns});
#endif
  impls.push_back({"library", XXH3_64bits, LibraryChecksumOfRuns});
  return impls;
}

uint64_t ChunkChecksum(const void* data, size_t n) {
  static const auto fastest = ChecksumImpls().front().fn;
  return fastest(data, n);
}

uint64_t ChunkChecksumOfRuns(const ByteRun* runs, size_t n) {
  static const auto fastest = ChecksumImpls().front().runs_fn;
  return fastest(runs, n);
}

}  // namespace ckptdb::storage
