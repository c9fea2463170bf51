#include "bench/baselines.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/checksum.h"

namespace ckptdb::bench {
namespace {

void WriteAll(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) Die("writing " + path + ": " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void ReadAll(int fd, uint8_t* p, size_t n, off_t at, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30), at);
    if (r <= 0) Die("reading " + path + ": short read");
    p += r;
    at += r;
    n -= static_cast<size_t>(r);
  }
}

// The chunk size of the store: what a verifying writer or reader hashes at a
// time.
uint64_t ChunkBytes(const Config& c) {
  return c.chunk_bytes > 0 ? c.chunk_bytes : ckptdb::Options().max_chunk_bytes;
}

// Hashes `b` in chunk-sized pieces, as a save must to checksum its chunks and
// compare them with the last checkpoint's; with `fd`, each piece is written
// right after its hash (while still in cache).
uint64_t HashPieces(const Config& c, const Buffer& b, int fd,
                    const std::string& path) {
  uint64_t sum = 0;
  const size_t piece = ChunkBytes(c);
  for (size_t at = 0; at < b.size(); at += piece) {
    const size_t n = std::min(piece, b.size() - at);
    const auto digest =
        ckptdb::storage::ChunkChecksumAndContentHash(b.data() + at, n);
    sum ^= digest.checksum ^ digest.content.high;
    if (fd >= 0) WriteAll(fd, b.data() + at, n, path);
  }
  return sum;
}

// Creates `path` (truncating it), has `write` fill the open descriptor, then
// fsyncs and closes it.
template <typename Fn>
void WriteSynced(const std::string& path, Fn&& write) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("creating " + path + ": " + std::strerror(errno));
  write(fd);
  if (::fsync(fd) != 0) Die("fsync " + path + ": " + std::strerror(errno));
  ::close(fd);
}

}  // namespace

volatile uint64_t benchmark_sink = 0;

std::string BaselineFile(const Config& c, int rank) {
  return c.dir + "/baseline/rank-" + std::to_string(rank) + ".bin";
}

std::string ChangedFile(const Config& c, int rank) {
  return BaselineFile(c, rank) + ".changed";
}

void BaselineWrite(const Config& c, int rank, const Layout& l, bool check) {
  const std::string path = BaselineFile(c, rank);
  uint64_t sum = 0;
  WriteSynced(path, [&](int fd) {
    for (const auto& b : l.buffers) {
      if (check)
        sum ^= HashPieces(c, b, fd, path);
      else
        WriteAll(fd, b.data(), b.size(), path);
    }
  });
  benchmark_sink = sum;
}

void IncrementalFloor(const Config& c, int rank, const Layout& l,
                      size_t changed) {
  uint64_t sum = 0;
  for (const auto& b : l.buffers) sum ^= HashPieces(c, b, -1, "");
  const std::string path = ChangedFile(c, rank);
  WriteSynced(path, [&](int fd) {
    for (size_t i = 0; i < std::min(changed, l.buffers.size()); ++i)
      WriteAll(fd, l.buffers[i].data(), l.buffers[i].size(), path);
  });
  benchmark_sink = sum;
}

void BaselineRead(const Config& c, int writers, uint64_t per_writer,
                  uint64_t from, Layout& l, bool check) {
  uint64_t sum = 0;
  size_t buf = 0, in_buf = 0;
  uint64_t at = from, left = l.bytes();
  while (left > 0) {
    const int file = static_cast<int>(at / per_writer);
    const uint64_t off = at % per_writer;
    const std::string path = BaselineFile(c, std::min(file, writers - 1));
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) Die("opening " + path + ": " + std::strerror(errno));
    uint64_t in_file = std::min(left, per_writer - off);
    uint64_t pos = off;
    while (in_file > 0) {
      auto& b = l.buffers[buf];
      size_t n = std::min<uint64_t>(in_file, b.size() - in_buf);
      if (check) n = std::min<size_t>(n, ChunkBytes(c));
      ReadAll(fd, b.data() + in_buf, n, static_cast<off_t>(pos), path);
      if (check) sum ^= ckptdb::storage::ChunkChecksum(b.data() + in_buf, n);
      pos += n;
      in_buf += n;
      in_file -= n;
      left -= n;
      at += n;
      if (in_buf == b.size()) {
        ++buf;
        in_buf = 0;
      }
    }
    ::close(fd);
  }
  benchmark_sink = sum;
}

void ExchangeFloor(MPI_Comm comm, uint64_t nbytes, Layout& l) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const int to = (rank + 1) % ranks, from = (rank + ranks - 1) % ranks;
  uint64_t piece = uint64_t{16} << 20;
  for (const auto& b : l.buffers) piece = std::min<uint64_t>(piece, b.size());
  uint64_t incoming = 0;
  MPI_Sendrecv(&nbytes, 1, MPI_UINT64_T, to, 1, &incoming, 1, MPI_UINT64_T,
               from, 1, comm, MPI_STATUS_IGNORE);
  // Every rank takes part in as many steps as the busiest.
  uint64_t steps = (std::max(nbytes, incoming) + piece - 1) / piece;
  MPI_Allreduce(MPI_IN_PLACE, &steps, 1, MPI_UINT64_T, MPI_MAX, comm);
  const size_t n = l.buffers.size();
  // With one buffer, what arrives goes to a copy of it: MPI needs the send
  // and receive buffers apart.
  std::vector<uint8_t> only;
  if (n < 2) only.resize(piece);
  for (uint64_t k = 0; k < steps; ++k) {
    const uint64_t out_n = std::min(nbytes, piece);
    const uint64_t in_n = std::min(incoming, piece);
    const uint8_t* src = l.buffers[k % n].data();
    uint8_t* dst = n < 2 ? only.data() : l.buffers[(k + n / 2) % n].data();
    MPI_Sendrecv(src, static_cast<int>(out_n), MPI_BYTE, to, 2, dst,
                 static_cast<int>(in_n), MPI_BYTE, from, 2, comm,
                 MPI_STATUS_IGNORE);
    nbytes -= out_n;
    incoming -= in_n;
  }
}

}  // namespace ckptdb::bench
