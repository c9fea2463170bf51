// Chunk reads: straight from value files, or from table files where a chunk
// starts a block (chunk_files.h), through RocksDB otherwise; every read
// checksum-checked.
#include <fcntl.h>
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>

#include "core/checksum.h"
#include "storage/keys.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace {

// The checkpoint whose key range holds the chunk's bytes: its holder for a
// chunk an incremental save shares, `id` otherwise.
int64_t StoredIn(int64_t id, const ChunkMetadata& chunk) {
  return chunk.holder_id != 0 ? chunk.holder_id : id;
}

// The key a chunk of `tensor_key` of checkpoint `id` is stored under.
std::string ChunkKey(int64_t id, std::string_view tensor_key,
                     const ChunkMetadata& chunk) {
  return EncodeChunkKey(StoredIn(id, chunk), chunk.writer_rank, tensor_key,
                        chunk.box.origin);
}

std::string ChunkName(int64_t id, std::string_view key,
                      const ChunkMetadata& chunk) {
  return "chunk of tensor '" + std::string(key) + "' at offset " +
         ShapeToString(chunk.box.origin) + " (checkpoint id " +
         std::to_string(id) +
         (chunk.holder_id != 0
              ? ", stored with checkpoint id " + std::to_string(chunk.holder_id)
              : std::string()) +
         ")";
}

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

std::optional<
    std::pair<std::shared_ptr<const FileOffsets>, FileOffsets::Location>>
StoreImpl::LocateValue(int64_t id, const std::string& key) {
  std::lock_guard lock(direct_mu_);
  auto [it, fresh] = direct_.try_emplace(id);
  if (fresh && direct_.size() > 4) {
    // A few checkpoints' indexes are kept (each holds its files open).
    direct_.erase(direct_.begin() == it ? std::next(it) : direct_.begin());
  }
  DirectIndex& index = it->second;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (const auto& file : index.files) {
      if (!file->Holds(key)) continue;
      std::optional<FileOffsets::Location> at = file->ValueOffset(key);
      if (!at) return std::nullopt;  // shares a block
      return std::pair(file, *at);
    }
    if (attempt == 1) break;
    // Not in a file seen so far: ask RocksDB which file holds the key.
    const std::string end = key + '\0';
    const rocksdb::Range range(key, end);
    rocksdb::TablePropertiesCollection tables;
    if (!db_->GetPropertiesOfTablesInRange(chunks_, &range, 1, &tables).ok())
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

void StoreImpl::ForgetIndex(int64_t id) {
  std::lock_guard lock(direct_mu_);
  direct_.erase(id);
  held_values_checked_.erase(id);
}

bool StoreImpl::ReadDirect(int64_t id, const std::string& key,
                           const ChunkMetadata& chunk,
                           const std::vector<ChunkPiece>& pieces) {
  const auto located = LocateValue(id, key);
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
  return ChunkChecksumOfRuns(runs.data(), runs.size()) == chunk.checksum;
}

Status StoreImpl::ReadThroughRocks(int64_t checkpoint_id,
                                   std::string_view tensor_key,
                                   const ChunkMetadata& chunk,
                                   const std::string& key, ChunkBuffer* buffer,
                                   bool verify_blocks) {
  rocksdb::ReadOptions ro;
  // A small chunk shares its data block with its neighbours, which a load
  // reads next: the block is cached (one read of it for all of them, not one
  // per chunk). A large chunk has a block of its own, read once.
  ro.fill_cache = chunk.nbytes < kOwnBlockBytes;
  // The chunk's own checksum, over the whole value, is verified below: for
  // loads, a second pass over the block for RocksDB's would only cost time.
  ro.verify_checksums = verify_blocks;
  rocksdb::Status s = db_->Get(ro, chunks_, key, &buffer->impl_->slice);
  if (s.IsNotFound()) {
    // A checkpoint deleted since the caller read its metadata (by another
    // rank's retention policy, say) is gone, not damaged.
    rocksdb::PinnableSlice record;
    if (GetRecord(checkpoint_id, &record).IsNotFound()) {
      return Status::NotFound(
          "checkpoint id " + std::to_string(checkpoint_id) + " of store '" +
          path_ + "' was deleted while it was read (" +
          ChunkName(checkpoint_id, tensor_key, chunk) + ")");
    }
    return Status::Corruption(ChunkName(checkpoint_id, tensor_key, chunk) +
                              " is missing");
  }
  if (s.IsCorruption()) {
    return Status::Corruption(ChunkName(checkpoint_id, tensor_key, chunk) +
                              " is damaged: " + s.ToString());
  }
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(s, "reading " + ChunkName(checkpoint_id, tensor_key, chunk)));
  auto& slice = buffer->impl_->slice;
  std::optional<ValuePointer> pointer;
  if (slice.size() != chunk.nbytes && chunk.nbytes >= kExternalValueBytes)
    pointer = DecodeValuePointer(slice.ToStringView());
  if (pointer) {
    const ValuePointer at = *pointer;
    slice.Reset();
    CKPTDB_RETURN_IF_ERROR(
        ReadPointedValue(checkpoint_id, tensor_key, chunk, at, buffer));
  } else if (slice.size() != chunk.nbytes) {
    return Status::Corruption(ChunkName(checkpoint_id, tensor_key, chunk) +
                              " holds " + std::to_string(slice.size()) +
                              " bytes, expected " +
                              std::to_string(chunk.nbytes));
  }
  const std::string_view bytes = buffer->bytes();
  if (ChunkChecksum(bytes.data(), bytes.size()) != chunk.checksum) {
    return Status::Corruption(
        ChunkName(checkpoint_id, tensor_key, chunk) +
        (pointer ? " (in value file " +
                       ValueFilePath(path_, StoredIn(checkpoint_id, chunk),
                                     *pointer) +
                       ")"
                 : std::string()) +
        " is damaged: checksum mismatch");
  }
  return Status::OK();
}

Status StoreImpl::ReadPointedValue(int64_t checkpoint_id,
                                   std::string_view tensor_key,
                                   const ChunkMetadata& chunk,
                                   const ValuePointer& pointer,
                                   ChunkBuffer* buffer) {
  const std::string path =
      ValueFilePath(path_, StoredIn(checkpoint_id, chunk), pointer);
  const std::string what = ChunkName(checkpoint_id, tensor_key, chunk) +
                           " (in value file " + path + ")";
  if (pointer.nbytes != chunk.nbytes || pointer.rank != chunk.writer_rank) {
    return Status::Corruption(what + " is damaged: its pointer names " +
                              std::to_string(pointer.nbytes) +
                              " bytes of writer rank " +
                              std::to_string(pointer.rank) + ", expected " +
                              std::to_string(chunk.nbytes) + " of rank " +
                              std::to_string(chunk.writer_rank));
  }
  Result<int> fd = fs_->OpenForDirectRead(
      path, " to read " + ChunkName(checkpoint_id, tensor_key, chunk));
  if (fd.status().IsNotFound()) return ValueFileGone(checkpoint_id, what);
  CKPTDB_RETURN_IF_ERROR(fd.status());
  const Status read = ReadValueFile(*fd, path, what, pointer, buffer);
  ::close(*fd);
  return read;
}

Status StoreImpl::ValueFileGone(int64_t checkpoint_id,
                                const std::string& what) {
  // A checkpoint deleted since the caller read its metadata is gone, not
  // damaged. This handle may still see its record and table files (a
  // read-only handle sees the store as of its open): the journal on disk
  // says whether it is still committed.
  rocksdb::PinnableSlice record;
  if (GetRecord(checkpoint_id, &record).IsNotFound() ||
      DeletedSinceOpen(checkpoint_id)) {
    return Status::NotFound("checkpoint id " + std::to_string(checkpoint_id) +
                            " of store '" + path_ +
                            "' was deleted while it was read (" + what + ")");
  }
  return Status::Corruption(what + " is missing");
}

bool StoreImpl::DeletedSinceOpen(int64_t checkpoint_id) {
  Result<JournalState> state = ReadJournal(*fs_, path_);
  // At or below the high-water mark and not committed: a delete took it. (A
  // record above the mark is one whose save died before the journal named it:
  // committed, and its loss is damage.)
  return state.ok() && state->journal &&
         checkpoint_id <= state->journal->high_water &&
         !state->journal->committed.contains(checkpoint_id);
}

Status StoreImpl::ReadValueFile(int fd, const std::string& path,
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

Result<ChunkBuffer> StoreImpl::ReadChunk(int64_t checkpoint_id,
                                         std::string_view tensor_key,
                                         const ChunkMetadata& chunk) {
  std::shared_lock lock(mu_);
  // A re-open that failed (Refresh, on another thread) left no database.
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  const std::string key = ChunkKey(checkpoint_id, tensor_key, chunk);
  ChunkBuffer buffer;
  if (chunk.nbytes >= kOwnBlockBytes) {  // may start a block of its own
    ChunkBuffer::Impl& impl = *buffer.impl_;
    impl.pool = pool_;
    // The size comes from the record; a direct read allocates it before any
    // file says how large the chunk is (reading through RocksDB does not).
    try {
      impl.owned = static_cast<char*>(pool_->Allocate(chunk.nbytes));
    } catch (const std::bad_alloc&) {
      impl.owned = nullptr;
    }
    if (impl.owned != nullptr &&
        ReadDirect(StoredIn(checkpoint_id, chunk), key, chunk,
                   {{impl.owned, chunk.nbytes}})) {
      impl.owned_size = chunk.nbytes;
      return buffer;
    }
    if (impl.owned != nullptr)
      pool_->Deallocate(std::exchange(impl.owned, nullptr));
  }
  Status read =
      ReadThroughRocks(checkpoint_id, tensor_key, chunk, key, &buffer);
  if (read.IsCorruption()) {
    // A damaged pointer, index or footer: the copy of the chunk's location
    // finds its bytes.
    ChunkBuffer copy;
    if (ReadThroughCopy(checkpoint_id, tensor_key, chunk, key, &copy).ok())
      return copy;
  }
  CKPTDB_RETURN_IF_ERROR(read);
  return buffer;
}

Status StoreImpl::VerifyChunk(int64_t checkpoint_id,
                              std::string_view tensor_key,
                              const ChunkMetadata& chunk,
                              std::string* through_copy) {
  std::shared_lock lock(mu_);
  // A re-open that failed (Refresh, on another thread) left no database.
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  const std::string key = ChunkKey(checkpoint_id, tensor_key, chunk);
  ChunkBuffer buffer;
  Status read = ReadThroughRocks(checkpoint_id, tensor_key, chunk, key, &buffer,
                                 /*verify_blocks=*/true);
  if (!read.IsCorruption()) return read;
  ChunkBuffer copy;
  if (!ReadThroughCopy(checkpoint_id, tensor_key, chunk, key, &copy).ok())
    return read;
  const std::string why =
      read.message() +
      "; the chunk's bytes are intact and read back through the copy of its "
      "location (" +
      CopyPath(path_, CopyKind::kLocators, StoredIn(checkpoint_id, chunk)) +
      "): no data lost, reads use the copy";
  if (through_copy == nullptr) return Status::Corruption(why);
  *through_copy = why;
  return Status::OK();
}

Status StoreImpl::ReadChunkInto(int64_t checkpoint_id,
                                std::string_view tensor_key,
                                const ChunkMetadata& chunk, void* dst) {
  return ReadChunkScattered(checkpoint_id, tensor_key, chunk,
                            {{static_cast<char*>(dst), chunk.nbytes}});
}

Status StoreImpl::ReadChunkScattered(int64_t checkpoint_id,
                                     std::string_view tensor_key,
                                     const ChunkMetadata& chunk,
                                     const std::vector<ChunkPiece>& pieces) {
  std::shared_lock lock(mu_);
  // A re-open that failed (Refresh, on another thread) left no database.
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  const std::string key = ChunkKey(checkpoint_id, tensor_key, chunk);
  if (ReadDirect(StoredIn(checkpoint_id, chunk), key, chunk, pieces))
    return Status::OK();
  ChunkBuffer buffer;
  Status read =
      ReadThroughRocks(checkpoint_id, tensor_key, chunk, key, &buffer);
  if (read.IsCorruption()) {
    ChunkBuffer copy;
    if (ReadThroughCopy(checkpoint_id, tensor_key, chunk, key, &copy).ok()) {
      buffer = std::move(copy);
      read = Status::OK();
    }
  }
  CKPTDB_RETURN_IF_ERROR(read);
  const char* from = buffer.bytes().data();
  for (const ChunkPiece& p : pieces) {
    std::memcpy(p.data, from, p.size);
    from += p.size;
  }
  return Status::OK();
}

ChunkBuffer::ChunkBuffer() : impl_(std::make_unique<Impl>()) {}
ChunkBuffer::ChunkBuffer(ChunkBuffer&&) noexcept = default;
ChunkBuffer& ChunkBuffer::operator=(ChunkBuffer&&) noexcept = default;
ChunkBuffer::~ChunkBuffer() = default;
std::string_view ChunkBuffer::bytes() const {
  if (impl_->owned != nullptr)
    return std::string_view(impl_->owned, impl_->owned_size);
  return std::string_view(impl_->slice.data(), impl_->slice.size());
}
bool ChunkBuffer::read_directly() const { return impl_->owned != nullptr; }

}  // namespace ckptdb::storage
