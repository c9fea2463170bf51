#pragma once

#include <cstddef>
#include <cstdint>
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
