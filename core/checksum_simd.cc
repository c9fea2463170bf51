// XXH3-64 compiled for one x86 instruction set (only this file gets the
// flags): CMake builds it once per set, naming the function with
// CKPTDB_CHECKSUM_FN, and ChunkChecksum calls it once the CPU is known to
// have that set. XXH_INLINE_ALL keeps every xxHash symbol of this file
// private, apart from the library's.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#include "core/checksum.h"

#if !defined(CKPTDB_CHECKSUM_FN) || !defined(CKPTDB_CHECKSUM_RUNS_FN) || \
    !defined(CKPTDB_XXH3_VECTOR) || !defined(CKPTDB_HASH128_FN) ||       \
    !defined(CKPTDB_DIGEST_BLOCKS_FN)
#error "built by storage/CMakeLists.txt with a function name and vector set"
#endif
#if XXH_VECTOR != CKPTDB_XXH3_VECTOR
#error "xxHash did not pick the instruction set this file is compiled for"
#endif

namespace ckptdb::storage {

uint64_t CKPTDB_CHECKSUM_FN(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}

ContentHash CKPTDB_HASH128_FN(const void* data, size_t n) {
  const XXH128_hash_t h = XXH3_128bits(data, n);
  return {h.low64, h.high64};
}

uint64_t CKPTDB_CHECKSUM_RUNS_FN(const ByteRun* runs, size_t n) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (size_t i = 0; i < n; ++i)
    XXH3_64bits_update(&state, runs[i].data, runs[i].size);
  return XXH3_64bits_digest(&state);
}

bool CKPTDB_DIGEST_BLOCKS_FN(const void* data, size_t n, bool content,
                             BlockSink sink, void* context,
                             ChunkDigest* digest) {
  const char* bytes = static_cast<const char*>(data);
  XXH3_state_t state;
  if (content) {
    XXH3_128bits_reset(&state);
  } else {
    XXH3_64bits_reset(&state);
  }
  for (size_t at = 0; at < n; at += kDigestBlockBytes) {
    const size_t size = n - at < kDigestBlockBytes ? n - at : kDigestBlockBytes;
    if (content) {
      XXH3_128bits_update(&state, bytes + at, size);
    } else {
      XXH3_64bits_update(&state, bytes + at, size);
    }
    if (!sink(context, bytes + at, size)) return false;
  }
  if (content) {
    const XXH128_hash_t h = XXH3_128bits_digest(&state);
    digest->content = {h.low64, h.high64};
    digest->checksum = h.low64;
  } else {
    digest->checksum = XXH3_64bits_digest(&state);
  }
  return true;
}

}  // namespace ckptdb::storage
