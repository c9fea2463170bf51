#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "ckptdb/metadata.h"

namespace ckptdb::storage {

// The checksum of a chunk's bytes: XXH3-64 (seed 0), as stored in the
// checkpoint metadata. On x86-64 it runs xxHash's AVX-512 or AVX2 code where
// the CPU has it (compiled here, since the Debian library is built for
// baseline x86-64 and hashes at about a quarter of the speed); the value is
// the same on every CPU.
uint64_t ChunkChecksum(const void* data, size_t n);

// A piece of a chunk's bytes.
struct ByteRun {
  const void* data;
  size_t size;
};

// ChunkChecksum of the concatenation of `runs` (XXH3's streaming form, which
// gives the same value), without joining them: for chunks read straight into
// the places their bytes go.
uint64_t ChunkChecksumOfRuns(const ByteRun* runs, size_t n);

// The 128-bit content hash of a chunk's bytes (XXH3-128, seed 0), which
// incremental saves compare: the fastest code this CPU runs, the same value
// on every CPU.
ContentHash ChunkContentHash(const void* data, size_t n);

// A chunk's checksum and content hash, in one pass over the bytes where they
// share it: for inputs over 240 bytes, XXH3-64 is the low half of XXH3-128
// (both run the same accumulation and merge it with the same secret; xxHash's
// output is stable since 0.8.0, and checksum_test.cc checks the equality).
struct ChunkDigest {
  uint64_t checksum;
  ContentHash content;
};
ChunkDigest ChunkChecksumAndContentHash(const void* data, size_t n);

// Takes a chunk's bytes a block at a time, right after the block was hashed;
// returns false to stop.
using BlockSink = bool (*)(void* context, const char* block, size_t size);

// The bytes DigestInBlocks hashes before handing them on: small enough to be
// still in the CPU's cache when the sink reads them.
inline constexpr size_t kDigestBlockBytes = size_t{256} << 10;

// ChunkChecksum of `data` (and, with `content`, ChunkContentHash; else the
// content hash is left zero), hashed block by block, each block handed to
// `sink` once hashed: a consumer that reads the bytes anyway (a file write)
// then reads them from the cache, and the chunk costs one pass over memory
// instead of two. nullopt when the sink stopped the walk.
std::optional<ChunkDigest> DigestInBlocks(const void* data, size_t n,
                                          bool content, BlockSink sink,
                                          void* context);
template <typename Sink>  // bool(const char* block, size_t size)
std::optional<ChunkDigest> DigestInBlocks(const void* data, size_t n,
                                          bool content, Sink& sink) {
  return DigestInBlocks(
      data, n, content,
      [](void* s, const char* block, size_t size) {
        return (*static_cast<Sink*>(s))(block, size);
      },
      &sink);
}

// One way of computing ChunkChecksum.
struct ChecksumImpl {
  const char* name;
  uint64_t (*fn)(const void* data, size_t n);
  uint64_t (*runs_fn)(const ByteRun* runs, size_t n);
};

// Every implementation this CPU can run, fastest first (ChunkChecksum uses
// the first), ending with the library's portable one: for tests and
// benchmarks.
std::vector<ChecksumImpl> ChecksumImpls();

}  // namespace ckptdb::storage
