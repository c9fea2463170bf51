#include "storage/chunk_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "core/checksum.h"

namespace ckptdb::storage {
namespace {

// Reads into `iov` (consumed) from byte `at` of `fd`, until every piece is
// full; false on an error or an early end of file.
bool PreadAll(int fd, std::vector<iovec>& iov, uint64_t at) {
  size_t first = 0;
  while (true) {
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
    if (first == iov.size()) return true;
    const int count =
        static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t r = ::preadv(fd, &iov[first], count, static_cast<off_t>(at));
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

std::optional<
    std::pair<std::shared_ptr<const FileOffsets>, FileOffsets::Location>>
ChunkFileReader::Locate(int64_t id, const std::string& key) {
  std::lock_guard lock(mu_);
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
    const std::string end = key + '\0';
    const rocksdb::Range range(key, end);
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
  const auto located = Locate(id, key);
  if (!located) return false;
  const FileOffsets::Location& at = located->second;
  if (!fs_->CheckRead(*at.path).ok()) return false;
  std::vector<iovec> iov;
  iov.reserve(pieces.size());
  for (const ChunkPiece& p : pieces) iov.push_back({p.data, p.size});
  if (!PreadAll(at.fd, iov, at.offset)) return false;
  std::vector<ByteRun> runs;
  runs.reserve(pieces.size());
  for (const ChunkPiece& p : pieces) runs.push_back({p.data, p.size});
  return ChunkChecksumOfRuns(runs.data(), runs.size()) == checksum;
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
  ChunkBuffer::Impl& impl = *buffer->impl_;
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
