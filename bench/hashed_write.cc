// A shared library for the Python benchmarks' floor of a checksumming save
// (bench/python_save.py loads it with ctypes): plain code that writes bytes
// to a file while hashing them as a save must, with the library's own hash
// and block size, so that the floor and ckptdb pay the same per byte.
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "core/checksum.h"

// Writes the `n` bytes at `data` to `fd` (at its offset), each block of
// storage::kDigestBlockBytes right after it is hashed (XXH3-128 and the
// checksum, in one pass, as an incremental save hashes every chunk); stores
// the checksum in *checksum. Returns 0, or the errno of the failed write.
extern "C" int ckpt_bench_hashed_write(int fd, const void* data, size_t n,
                                       uint64_t* checksum) {
  int error = 0;
  auto write = [&](const char* block, size_t size) {
    while (size > 0) {
      const ssize_t w = ::write(fd, block, size);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error = w < 0 ? errno : EIO;
        return false;
      }
      block += w;
      size -= static_cast<size_t>(w);
    }
    return true;
  };
  const auto digest =
      ckptdb::storage::DigestInBlocks(data, n, /*content=*/true, write);
  if (digest) *checksum = digest->checksum;
  return error;
}
