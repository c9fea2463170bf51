#include "storage/chunk_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "core/checksum.h"

namespace ckptdb::storage {
namespace {

// The kernel copies a read's bytes with `rep movsb`, which on some x86 cores
// (AMD's with FSRM, measured here) runs about 5 times slower when the
// destination lies 1 to 31 bytes past the source modulo 4096 (a page of the
// file's cache against the caller's memory): every numpy array over glibc's
// mmap threshold starts 16 bytes into a page, so a large tensor read straight
// into one at a page-aligned file offset took 18 ms for 40 MiB against 6.5 ms
// into aligned memory. Such pieces are read through a buffer aligned with the
// file and copied by memcpy, which avoids that case (bench/README.md).
// Pieces of kBouncedBytes or more go through kBounceBytes at a time (below
// that, the slow copy costs less than the call).
constexpr size_t kBounceBytes = size_t{1} << 20;
constexpr size_t kBouncedBytes = size_t{64} << 10;
constexpr size_t kPage = 4096;

bool CopiesSlowly(const void* dst, uint64_t at) {
  const uint64_t skew = (reinterpret_cast<uintptr_t>(dst) - at) % kPage;
  return skew >= 1 && skew < 32;
}

// This thread's buffer for such reads (page-aligned, a page more than
// kBounceBytes), or null when it cannot be allocated (the read then goes
// straight into the destination, slowly).
char* ThreadBuffer() {
  thread_local std::unique_ptr<char, void (*)(void*)> buffer(nullptr,
                                                             std::free);
  if (!buffer) {
    buffer.reset(
        static_cast<char*>(std::aligned_alloc(kPage, kBounceBytes + kPage)));
  }
  return buffer.get();
}

// Reads `n` bytes from byte `at` of `fd` into `dst` through `buffer`
// (ThreadBuffer); false on an error or an early end of file.
bool PreadThroughBuffer(int fd, char* buffer, char* dst, size_t n,
                        uint64_t at) {
  while (n > 0) {
    // Aligned with the file's pages, so the kernel's copy is the fast one.
    char* place = buffer + at % kPage;
    const size_t want = std::min(n, kBounceBytes);
    const ssize_t r = ::pread(fd, place, want, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    std::memcpy(dst, place, static_cast<size_t>(r));
    dst += r;
    n -= static_cast<size_t>(r);
    at += static_cast<uint64_t>(r);
  }
  return true;
}

// Whether `piece`, read from byte `at`, goes through ThreadBuffer.
bool ThroughBuffer(const iovec& piece, uint64_t at) {
  return piece.iov_len >= kBouncedBytes && CopiesSlowly(piece.iov_base, at) &&
         ThreadBuffer() != nullptr;
}

// Reads into `iov` (consumed) from byte `at` of `fd`, until every piece is
// full; false on an error or an early end of file.
bool PreadAll(int fd, std::vector<iovec>& iov, uint64_t at) {
  size_t first = 0;
  while (true) {
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
    if (first == iov.size()) return true;
    iovec& next = iov[first];
    if (ThroughBuffer(next, at)) {
      if (!PreadThroughBuffer(fd, ThreadBuffer(),
                              static_cast<char*>(next.iov_base), next.iov_len,
                              at))
        return false;
      at += next.iov_len;
      next.iov_len = 0;
      continue;
    }
    // Up to the next piece that goes through the buffer.
    size_t count = 1;
    uint64_t ahead = at + next.iov_len;
    while (first + count < iov.size() && count < IOV_MAX) {
      const iovec& v = iov[first + count];
      if (ThroughBuffer(v, ahead)) break;
      ahead += v.iov_len;
      ++count;
    }
    const ssize_t r = ::preadv(fd, &iov[first], static_cast<int>(count),
                               static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    at += static_cast<uint64_t>(r);
    for (size_t left = static_cast<size_t>(r); left > 0;) {
      iovec& v = iov[first];
      const size_t took = std::min(left, v.iov_len);
      v.iov_base = static_cast<char*>(v.iov_base) + took;
      v.iov_len -= took;
      left -= took;
      if (v.iov_len == 0) ++first;
    }
  }
}

}  // namespace

ChunkFileReader::ChunkFileReader(rocksdb::DB& db,
                                 rocksdb::ColumnFamilyHandle* chunks,
                                 std::shared_ptr<StoreFileSystem> fs,
                                 std::shared_ptr<BufferPool> pool,
                                 std::string store_path)
    : db_(db),
      chunks_(chunks),
      fs_(std::move(fs)),
      pool_(std::move(pool)),
      path_(std::move(store_path)) {}

std::optional<ChunkFileReader::Located> ChunkFileReader::Locate(
    int64_t id, std::string_view key) {
  auto [it, fresh] = indexes_.try_emplace(id);
  if (fresh && indexes_.size() > 4) {
    // A few checkpoints' indexes are kept (each holds its files open).
    indexes_.erase(indexes_.begin() == it ? std::next(it) : indexes_.begin());
  }
  Index& index = it->second;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (const auto& file : index.files) {
      if (!file->Holds(key)) continue;
      std::optional<FileOffsets::Location> at = file->ValueOffset(key);
      if (!at) return std::nullopt;  // a file that does not locate it
      return std::pair(file, *at);
    }
    if (attempt == 1) break;
    // Not in a file seen so far: ask RocksDB which file holds the key.
    const std::string end = std::string(key) + '\0';
    const rocksdb::Range range(rocksdb::Slice(key.data(), key.size()), end);
    rocksdb::TablePropertiesCollection tables;
    if (!db_.GetPropertiesOfTablesInRange(chunks_, &range, 1, &tables).ok())
      return std::nullopt;
    bool added = false;
    for (const auto& [path, props] : tables) {
      bool known = false;
      for (const auto& file : index.files) known |= file->path == path;
      if (known) continue;
      auto open_for_read = [&](const std::string& file) {
        Result<int> fd = fs_->OpenForDirectRead(file);
        return fd.ok() ? *fd : -1;
      };
      if (auto file = ParseFileOffsets(path, *props, path_, open_for_read)) {
        index.files.push_back(std::move(file));
        added = true;
      }
    }
    if (!added) return std::nullopt;
  }
  return std::nullopt;
}

void ChunkFileReader::Forget(int64_t id) {
  std::lock_guard lock(mu_);
  indexes_.erase(id);
}

bool ChunkFileReader::ReadDirect(int64_t id, const std::string& key,
                                 uint64_t checksum,
                                 const std::vector<ChunkPiece>& pieces) {
  std::vector<char> done;
  ReadDirectMany({{id, key, checksum, pieces}}, &done);
  return done[0] != 0;
}

void ChunkFileReader::ReadDirectMany(const std::vector<DirectRead>& reads,
                                     std::vector<char>* done) {
  done->assign(reads.size(), 0);
  struct Placed {
    size_t read;
    Located at;
    uint64_t nbytes;
  };
  std::vector<Placed> placed;
  placed.reserve(reads.size());
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < reads.size(); ++i) {
      std::optional<Located> at = Locate(reads[i].checkpoint_id, reads[i].key);
      if (!at) continue;
      uint64_t nbytes = 0;
      for (const ChunkPiece& p : reads[i].pieces) nbytes += p.size;
      placed.push_back({i, std::move(*at), nbytes});
    }
  }
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return std::pair(a.at.second.fd, a.at.second.offset) <
           std::pair(b.at.second.fd, b.at.second.offset);
  });
  std::vector<char> scratch(kMaxGapBytes);
  std::vector<iovec> iov;
  std::vector<ByteRun> runs;
  for (size_t first = 0; first < placed.size();) {
    // The run of values [first, end) read at once.
    const FileOffsets::Location& start = placed[first].at.second;
    uint64_t until = start.offset + placed[first].nbytes;
    uint64_t span = placed[first].nbytes;
    size_t pieces = reads[placed[first].read].pieces.size();
    size_t end = first + 1;
    for (; end < placed.size(); ++end) {
      const FileOffsets::Location& at = placed[end].at.second;
      const size_t more = reads[placed[end].read].pieces.size() + 1;
      if (at.fd != start.fd || at.offset < until ||
          at.offset - until > kMaxGapBytes ||
          span + placed[end].nbytes > kMaxSpanBytes ||
          pieces + more > static_cast<size_t>(IOV_MAX))
        break;
      until = at.offset + placed[end].nbytes;
      span += placed[end].nbytes;
      pieces += more;
    }
    if (!fs_->CheckRead(*start.path).ok()) {
      first = end;
      continue;  // read one by one, which reports the refusal
    }
    iov.clear();
    uint64_t at = start.offset;
    for (size_t k = first; k < end; ++k) {
      const uint64_t gap = placed[k].at.second.offset - at;
      if (gap > 0) iov.push_back({scratch.data(), gap});
      for (const ChunkPiece& p : reads[placed[k].read].pieces)
        iov.push_back({p.data, p.size});
      at = placed[k].at.second.offset + placed[k].nbytes;
    }
    if (PreadAll(start.fd, iov, start.offset)) {
      for (size_t k = first; k < end; ++k) {
        const DirectRead& read = reads[placed[k].read];
        runs.clear();
        for (const ChunkPiece& p : read.pieces)
          runs.push_back({p.data, p.size});
        (*done)[placed[k].read] =
            ChunkChecksumOfRuns(runs.data(), runs.size()) == read.checksum;
      }
    }
    first = end;
  }
}

Status ChunkFileReader::ReadValueFile(int fd, const std::string& path,
                                      const std::string& what,
                                      const ValuePointer& pointer,
                                      ChunkBuffer* buffer) {
  // The size first: the pointer comes from the store, which may come from
  // anywhere, and sizes no file holds must not be allocated.
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return Status::IOError("reading the size of " + path + " for " + what +
                           ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::Corruption(what + " is damaged: " + path +
                              " is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) < pointer.offset + pointer.nbytes) {
    return Status::Corruption(what + " is damaged: the file ends at byte " +
                              std::to_string(st.st_size) +
                              ", before its end at byte " +
                              std::to_string(pointer.offset + pointer.nbytes));
  }
  CKPTDB_RETURN_IF_ERROR(fs_->CheckRead(path));
  ChunkBuffer::Impl& impl = buffer->impl();
  impl.pool = pool_;
  try {
    impl.owned = static_cast<char*>(pool_->Allocate(pointer.nbytes));
  } catch (const std::bad_alloc&) {
    return Status::IOError("cannot allocate the " +
                           std::to_string(pointer.nbytes) + " bytes of " +
                           what);
  }
  impl.owned_size = pointer.nbytes;
  std::vector<iovec> iov = {{impl.owned, pointer.nbytes}};
  errno = 0;
  if (PreadAll(fd, iov, pointer.offset)) return Status::OK();
  if (errno != 0) {
    return Status::IOError("reading " + path + " for " + what + ": " +
                           std::strerror(errno));
  }
  return Status::Corruption(what + " is damaged: the file ends before byte " +
                            std::to_string(pointer.offset + pointer.nbytes));
}

}  // namespace ckptdb::storage
