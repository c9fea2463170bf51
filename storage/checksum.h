#pragma once

#include <cstddef>
#include <cstdint>

namespace ckptdb::storage {

// The checksum of a chunk's bytes: XXH3-64 (seed 0), as stored in the
// checkpoint metadata. On x86-64 CPUs with AVX2 it runs xxHash's AVX2 code
// (compiled here, since the Debian library is built for baseline x86-64 and
// hashes at about half the speed); the value is the same on every CPU.
uint64_t ChunkChecksum(const void* data, size_t n);

// The library's portable XXH3-64, for tests.
uint64_t ReferenceChecksum(const void* data, size_t n);

}  // namespace ckptdb::storage
