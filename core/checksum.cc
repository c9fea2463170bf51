#include "core/checksum.h"

#include <xxhash.h>

#include <algorithm>

namespace ckptdb::storage {

#if defined(CKPTDB_XXH3_X86)
// checksum_simd.cc, compiled once per instruction set.
uint64_t ChunkChecksumAvx512(const void* data, size_t n);
uint64_t ChunkChecksumAvx2(const void* data, size_t n);
uint64_t ChunkChecksumAvx512OfRuns(const ByteRun* runs, size_t n);
uint64_t ChunkChecksumAvx2OfRuns(const ByteRun* runs, size_t n);
ContentHash ChunkContentHashAvx512(const void* data, size_t n);
ContentHash ChunkContentHashAvx2(const void* data, size_t n);
bool ChunkDigestAvx512InBlocks(const void* data, size_t n, bool content,
                               BlockSink sink, void* context,
                               ChunkDigest* digest);
bool ChunkDigestAvx2InBlocks(const void* data, size_t n, bool content,
                             BlockSink sink, void* context,
                             ChunkDigest* digest);
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

bool LibraryDigestInBlocks(const void* data, size_t n, bool content,
                           BlockSink sink, void* context, ChunkDigest* digest) {
  const char* bytes = static_cast<const char*>(data);
  XXH3_state_t* state = XXH3_createState();
  if (content) {
    XXH3_128bits_reset(state);
  } else {
    XXH3_64bits_reset(state);
  }
  bool walked = true;
  for (size_t at = 0; at < n && walked; at += kDigestBlockBytes) {
    const size_t size = std::min(n - at, kDigestBlockBytes);
    if (content) {
      XXH3_128bits_update(state, bytes + at, size);
    } else {
      XXH3_64bits_update(state, bytes + at, size);
    }
    walked = sink(context, bytes + at, size);
  }
  if (walked && content) {
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    digest->content = {h.low64, h.high64};
    digest->checksum = h.low64;
  } else if (walked) {
    digest->checksum = XXH3_64bits_digest(state);
  }
  XXH3_freeState(state);
  return walked;
}

using DigestInBlocksFn = bool (*)(const void*, size_t, bool, BlockSink, void*,
                                  ChunkDigest*);

DigestInBlocksFn FastestDigestInBlocks() {
#if defined(CKPTDB_XXH3_X86)
  if (__builtin_cpu_supports("avx512f")) return ChunkDigestAvx512InBlocks;
  if (__builtin_cpu_supports("avx2")) return ChunkDigestAvx2InBlocks;
#endif
  return LibraryDigestInBlocks;
}

// Above this length XXH3 hashes "long" inputs, where the 64-bit value is the
// low half of the 128-bit one; below, the two differ.
constexpr size_t kXxh3MidSizeMax = 240;

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
  const ContentHash content = ChunkContentHash(data, n);
  return {n > kXxh3MidSizeMax ? content.low : ChunkChecksum(data, n), content};
}

std::optional<ChunkDigest> DigestInBlocks(const void* data, size_t n,
                                          bool content, BlockSink sink,
                                          void* context) {
  static const DigestInBlocksFn fastest = FastestDigestInBlocks();
  ChunkDigest digest;
  if (!fastest(data, n, content, sink, context, &digest)) return std::nullopt;
  if (content && n <= kXxh3MidSizeMax) digest.checksum = ChunkChecksum(data, n);
  return digest;
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
