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

// Appends the key a chunk of `tensor_key` of checkpoint `id` is stored under.
void AppendChunkKeyOf(int64_t id, std::string_view tensor_key,
                      const ChunkMetadata& chunk, std::string* out) {
  AppendChunkKey(StoredIn(id, chunk), chunk.writer_rank, tensor_key,
                 chunk.box.origin, out);
}

// The key a chunk of `tensor_key` of checkpoint `id` is stored under.
std::string ChunkKey(int64_t id, std::string_view tensor_key,
                     const ChunkMetadata& chunk) {
  std::string key;
  AppendChunkKeyOf(id, tensor_key, chunk, &key);
  return key;
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

}  // namespace

void StoreImpl::ForgetIndex(int64_t id) {
  if (files_) files_->Forget(id);
  std::lock_guard lock(held_mu_);
  held_values_checked_.erase(id);
}

Status StoreImpl::ReadThroughRocks(int64_t checkpoint_id,
                                   std::string_view tensor_key,
                                   const ChunkMetadata& chunk,
                                   const std::string& key,
                                   ChunkBuffer* buffer) {
  rocksdb::ReadOptions ro;
  // A small chunk shares its data block with its neighbours, which a load
  // reads next: the block is cached (one read of it for all of them, not one
  // per chunk). A large chunk has a block of its own, read once.
  ro.fill_cache = chunk.nbytes < kOwnBlockBytes;
  // RocksDB's block checksums too, although the chunk's own is verified
  // below: a block read unverified is parsed as it is, and a flipped byte in
  // its keys or entry headers failed RocksDB's assertions (a build with them,
  // as Debian's, aborted the process) where it must be a CorruptionError.
  // Loads read most chunks straight from their files (ReadDirect), not here.
  ro.verify_checksums = true;
  rocksdb::Status s = db_->Get(ro, chunks_, key, &buffer->impl().slice);
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
  auto& slice = buffer->impl().slice;
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
  const Status read = files_->ReadValueFile(*fd, path, what, pointer, buffer);
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

namespace {

// Copies a value pinned in RocksDB's memory into `slice`'s own buffer and
// lets go of the pin.
void OwnPinnedBytes(rocksdb::PinnableSlice& slice) {
  if (!slice.IsPinned()) return;
  std::string bytes(slice.data(), slice.size());
  slice.Reset();
  *slice.GetSelf() = std::move(bytes);
  slice.PinSelf();
}

}  // namespace

Result<ChunkBuffer> StoreImpl::ReadChunk(int64_t checkpoint_id,
                                         std::string_view tensor_key,
                                         const ChunkMetadata& chunk) {
  std::shared_lock lock(mu_);
  // A re-open that failed (Refresh, on another thread) left no database.
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  const std::string key = ChunkKey(checkpoint_id, tensor_key, chunk);
  ChunkBuffer buffer;
  if (chunk.nbytes >= kOwnBlockBytes) {  // may start a block of its own
    ChunkBuffer::Impl& impl = buffer.impl();
    impl.pool = pool_;
    // The size comes from the record; a direct read allocates it before any
    // file says how large the chunk is (reading through RocksDB does not).
    try {
      impl.owned = static_cast<char*>(pool_->Allocate(chunk.nbytes));
    } catch (const std::bad_alloc&) {
      impl.owned = nullptr;
    }
    if (impl.owned != nullptr &&
        files_->ReadDirect(StoredIn(checkpoint_id, chunk), key, chunk.checksum,
                           {{impl.owned, chunk.nbytes}})) {
      impl.owned_size = chunk.nbytes;
      return buffer;
    }
    if (impl.owned != nullptr)
      pool_->Deallocate(std::exchange(impl.owned, nullptr));
  }
  Status read =
      ReadThroughRocks(checkpoint_id, tensor_key, chunk, key, &buffer);
  // The buffer outlives the shared lock: a value pinned in RocksDB's block
  // cache would outlive the database that a Release or Refresh on another
  // thread closes. It owns a copy of its bytes instead.
  if (read.ok()) OwnPinnedBytes(buffer.impl().slice);
  if (read.IsCorruption()) {
    // A damaged pointer, index or footer: the copy of the chunk's location
    // finds its bytes.
    ChunkBuffer copy;
    if (ReadThroughCopy(checkpoint_id, tensor_key, chunk, key, &copy).ok())
      return copy;
  }
  CKPTDB_RETURN_IF_ERROR(ReadAtItsPath(read));
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
  Status read =
      ReadThroughRocks(checkpoint_id, tensor_key, chunk, key, &buffer);
  if (!read.IsCorruption()) return ReadAtItsPath(read);
  ChunkBuffer copy;
  if (!ReadThroughCopy(checkpoint_id, tensor_key, chunk, key, &copy).ok())
    return ReadAtItsPath(read);
  const std::string why =
      read.message() +
      "; the chunk's bytes are intact and read back through the copy of its "
      "location (" +
      CopyPath(path_, CopyKind::kLocators, StoredIn(checkpoint_id, chunk)) +
      "): no data lost, reads use the copy, and a read-write open writes the "
      "chunk's table file again from it";
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
  return ReadChunksScattered(checkpoint_id, {{tensor_key, &chunk, pieces}});
}

Status StoreImpl::ReadChunksScattered(int64_t checkpoint_id,
                                      const std::vector<ChunkToRead>& reads) {
  std::shared_lock lock(mu_);
  // A re-open that failed (Refresh, on another thread) left no database.
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  // Every read's key, one after another in one buffer (ends[i]: where read
  // i's ends).
  std::string keys;
  std::vector<size_t> ends(reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    AppendChunkKeyOf(checkpoint_id, reads[i].tensor_key, *reads[i].chunk,
                     &keys);
    ends[i] = keys.size();
  }
  auto key = [&](size_t i) {
    const size_t begin = i == 0 ? 0 : ends[i - 1];
    return std::string_view(keys).substr(begin, ends[i] - begin);
  };
  std::vector<ChunkFileReader::DirectRead> direct(reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    const ChunkMetadata& chunk = *reads[i].chunk;
    direct[i] = {StoredIn(checkpoint_id, chunk), key(i), chunk.checksum,
                 reads[i].pieces};
  }
  std::vector<char> done;
  files_->ReadDirectMany(direct, &done);
  // The others one by one, through RocksDB (which names what is wrong).
  for (size_t i = 0; i < reads.size(); ++i) {
    if (done[i]) continue;
    CKPTDB_RETURN_IF_ERROR(ReadAtItsPath(
        ReadThroughRocksInto(checkpoint_id, reads[i], std::string(key(i)))));
  }
  return Status::OK();
}

Status StoreImpl::ReadThroughRocksInto(int64_t checkpoint_id,
                                       const ChunkToRead& read,
                                       const std::string& key) {
  ChunkBuffer buffer;
  Status s = ReadThroughRocks(checkpoint_id, read.tensor_key, *read.chunk, key,
                              &buffer);
  if (s.IsCorruption()) {
    ChunkBuffer copy;
    if (ReadThroughCopy(checkpoint_id, read.tensor_key, *read.chunk, key, &copy)
            .ok()) {
      buffer = std::move(copy);
      s = Status::OK();
    }
  }
  CKPTDB_RETURN_IF_ERROR(s);
  const char* from = buffer.bytes().data();
  for (const ChunkPiece& p : read.pieces) {
    std::memcpy(p.data, from, p.size);
    from += p.size;
  }
  return Status::OK();
}

ChunkBuffer::ChunkBuffer() = default;
ChunkBuffer::ChunkBuffer(ChunkBuffer&&) noexcept = default;
ChunkBuffer& ChunkBuffer::operator=(ChunkBuffer&&) noexcept = default;
ChunkBuffer::~ChunkBuffer() = default;
ChunkBuffer::Impl& ChunkBuffer::impl() {
  if (impl_ == nullptr) impl_ = std::make_unique<Impl>();
  return *impl_;
}
std::string_view ChunkBuffer::bytes() const {
  if (impl_ == nullptr) return {};
  if (impl_->owned != nullptr)
    return std::string_view(impl_->owned, impl_->owned_size);
  return std::string_view(impl_->slice.data(), impl_->slice.size());
}
bool ChunkBuffer::read_directly() const {
  return impl_ != nullptr && impl_->owned != nullptr;
}

}  // namespace ckptdb::storage
