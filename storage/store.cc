#include "storage/store.h"

#include <fcntl.h>
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/flush_block_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/table_properties.h>
#include <rocksdb/transaction_log.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <utility>

#include "storage/buffer_pool.h"
#include "storage/chunk_files.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;
namespace {

constexpr char kChunksCf[] = "chunks";
constexpr char kMetaCf[] = "meta";
constexpr char kStoreMarker[] = "ckptdb-store 1";
// Present in a store directory while it is being created.
constexpr char kCreatingFile[] = "CKPTDB_CREATING";

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return Status::IOError("opening directory " + dir + ": " +
                           std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    return Status::IOError("syncing directory " + dir + ": " +
                           std::strerror(errno));
  return Status::OK();
}

// Creates an empty file and makes it and its directory entry durable.
Status WriteDurably(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0)
    return Status::IOError("creating " + path + ": " + std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    return Status::IOError("syncing " + path + ": " + std::strerror(errno));
  return SyncDirectory(fs::path(path).parent_path().string());
}

// Discards RocksDB's info log: read-only opens must not create or rotate LOG
// files.
class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

// A small block cache whose allocator pools the buffers chunk reads land in.
std::shared_ptr<rocksdb::Cache> ChunkReadCache(
    std::shared_ptr<BufferPool> pool) {
  rocksdb::LRUCacheOptions cache;
  cache.capacity = size_t{8} << 20;
  cache.memory_allocator = std::move(pool);
  return rocksdb::NewLRUCache(cache);
}

rocksdb::ColumnFamilyOptions MetaCfOptions() {
  rocksdb::ColumnFamilyOptions options;
  options.compression = rocksdb::kNoCompression;
  return options;
}

}  // namespace

Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::OK();
  const std::string msg = context + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(msg);
  if (s.IsCorruption()) return Status::Corruption(msg);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(msg);
  if (s.IsIOError()) return Status::IOError(msg);
  return Status::Internal(msg);
}

rocksdb::ColumnFamilyOptions ChunkCfOptions(
    std::shared_ptr<rocksdb::Cache> block_cache) {
  rocksdb::ColumnFamilyOptions options;
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  // Chunks arrive only by ingestion of non-overlapping files into the
  // bottommost level; nothing ever needs to rewrite them.
  options.disable_auto_compactions = true;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 256 << 10;
  table.checksum = rocksdb::kXXH3;
  table.flush_block_policy_factory = NewChunkFlushBlockPolicyFactory();
  if (block_cache) table.block_cache = std::move(block_cache);
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.table_properties_collector_factories.push_back(
      NewValueOffsetCollectorFactory());
  return options;
}

void StoreImpl::CloseDb() {
  {
    std::lock_guard lock(direct_mu_);
    direct_.clear();
  }
  if (!db_) return;
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
  handles_.clear();
  chunks_ = meta_ = nullptr;
  db_->Close().PermitUncheckedError();
  db_.reset();
}

Status StoreImpl::OpenDbRetrying() {
  Status s = OpenDb();
  if (!options_.read_only) return s;
  // Up to ~2.5 s of a writer's activity; past it, the last open stands (a
  // failure, or a view that the next Refresh replaces).
  for (int attempt = 0; attempt < 40; ++attempt) {
    const bool changed_meanwhile = s.ok() && VersionStamp() != stamp_;
    if (!changed_meanwhile && !s.IsIOError() && !s.IsCorruption()) break;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(1 << attempt, 100)));
    if (db_) CloseDb();
    s = OpenDb();
  }
  return s;
}

Status StoreImpl::OpenDb() {
  // Taken before opening, so that a commit racing with the open is seen by the
  // next Refresh.
  const std::string stamp = options_.read_only ? VersionStamp() : std::string();
  std::error_code ec;
  const bool exists = fs::exists(path_, ec);
  if (exists && !fs::is_directory(path_, ec)) {
    return Status::InvalidArgument(
        "'" + path_ + "' is not a directory, so not a ckptdb store");
  }
  // A creation that did not finish (the CREATING file outlives it) left only
  // parts of a fresh, empty store: start it again.
  const fs::path creating = fs::path(path_) / kCreatingFile;
  if (exists && fs::exists(creating, ec)) {
    if (options_.read_only) {
      return Status::NotFound(
          "the creation of the store at '" + path_ +
          "' was interrupted; open it read-write to redo it");
    }
    for (const auto& entry : fs::directory_iterator(path_, ec)) {
      if (entry.path() != creating) fs::remove_all(entry.path(), ec);
    }
  }
  const bool has_db = exists && fs::exists(fs::path(path_) / "CURRENT", ec) &&
                      !fs::exists(creating, ec);
  if (!has_db) {
    const bool empty = !exists || fs::is_empty(path_, ec) ||
                       (fs::exists(creating, ec) &&
                        std::distance(fs::directory_iterator(path_, ec),
                                      fs::directory_iterator()) == 1);
    if (!empty) {
      return Status::InvalidArgument(
          "'" + path_ +
          "' is not a ckptdb store (a non-empty directory without one)");
    }
    if (options_.read_only || !options_.create_if_missing) {
      return Status::NotFound("no ckptdb store at '" + path_ + "'");
    }
    fs::create_directories(path_, ec);
    if (ec) {
      return Status::IOError("creating store directory '" + path_ +
                             "': " + ec.message());
    }
    RETURN_IF_ERROR(WriteDurably(creating.string()));
  }

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = !has_db;
  db_options.create_missing_column_families = !has_db;
  db_options.keep_log_file_num = 3;
  // Each checkpoint adds a few files per writer rank; keep descriptors bounded
  // (the table cache reopens evicted files on demand).
  db_options.max_open_files = 256;
  db_options.max_manifest_file_size = 64 << 20;
  // Chunks are read in key order, which is file order: let the kernel read
  // ahead (RocksDB would otherwise advise random access on every table).
  db_options.advise_random_on_open = false;
  if (options_.read_only) db_options.info_log = std::make_shared<NullLogger>();

  if (has_db) {
    std::vector<std::string> families;
    Status listed =
        FromRocks(rocksdb::DB::ListColumnFamilies(db_options, path_, &families),
                  "reading '" + path_ + "'");
    if (!listed.ok()) {
      return Status::InvalidArgument(
          "'" + path_ + "' is not a ckptdb store: " + listed.message());
    }
    auto has = [&](const char* name) {
      return std::find(families.begin(), families.end(), name) !=
             families.end();
    };
    if (!has(kChunksCf) || !has(kMetaCf)) {
      return Status::InvalidArgument(
          "'" + path_ + "' is a RocksDB database but not a ckptdb store");
    }
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kChunksCf, ChunkCfOptions(ChunkReadCache(pool_))},
      {kMetaCf, MetaCfOptions()},
  };
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      options_.read_only
          ? rocksdb::DB::OpenForReadOnly(db_options, path_, descriptors,
                                         &handles_, &raw)
          : rocksdb::DB::Open(db_options, path_, descriptors, &handles_, &raw);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status::FailedPrecondition(
          "store '" + path_ +
          "' is open for writing by another process: " + s.ToString());
    }
    return FromRocks(s, "opening store '" + path_ + "'");
  }
  db_.reset(raw);
  chunks_ = handles_[1];
  meta_ = handles_[2];

  // The marker is written right after creation. A store without it is accepted
  // only while its metadata is empty: a creation interrupted before the marker.
  std::string marker;
  s = db_->Get(rocksdb::ReadOptions(), meta_, kStoreMarkerKey, &marker);
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), meta_));
    it->SeekToFirst();
    const bool empty = !it->Valid() && it->status().ok();
    it.reset();
    if (!empty) {
      CloseDb();
      return Status::InvalidArgument(
          "'" + path_ + "' is not a ckptdb store (no store marker)");
    }
    if (!options_.read_only) {
      rocksdb::WriteOptions wo;
      wo.sync = options_.sync;
      RETURN_IF_ERROR(
          FromRocks(db_->Put(wo, meta_, kStoreMarkerKey, kStoreMarker),
                    "creating store"));
    }
  } else if (!s.ok() || marker != kStoreMarker) {
    CloseDb();
    return Status::InvalidArgument(
        "'" + path_ + "' is not a ckptdb store (unknown store marker)");
  }
  if (!has_db) {
    // The store is complete: from here on, a crash leaves a valid empty store.
    fs::remove(creating, ec);
    if (ec) return Status::IOError("finishing store creation: " + ec.message());
    RETURN_IF_ERROR(SyncDirectory(path_));
  }
  if (!options_.read_only) RETURN_IF_ERROR(RemoveLeftovers());
  stamp_ = stamp;
  return Status::OK();
}

template <typename Fn>
Status StoreImpl::ForEachRecord(Fn&& fn) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    int64_t id = 0;
    if (!DecodeMetaKey(std::string_view(it->key().data(), it->key().size()),
                       &id))
      break;
    if (!fn(id, std::string_view(it->value().data(), it->value().size())))
      break;
  }
  return FromRocks(it->status(), "listing checkpoints of '" + path_ + "'");
}

Status StoreImpl::DropChunks(int64_t checkpoint_id) {
  ForgetIndex(checkpoint_id);
  const std::string begin = CheckpointKeyPrefix(checkpoint_id);
  const std::string end = CheckpointKeyEnd(checkpoint_id);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  RETURN_IF_ERROR(
      FromRocks(db_->DeleteRange(wo, chunks_, begin, end), "deleting chunks"));
  rocksdb::Slice b(begin), e(end);
  RETURN_IF_ERROR(
      FromRocks(rocksdb::DeleteFilesInRange(db_.get(), chunks_, &b, &e, false),
                "reclaiming chunk files"));
  // Whole files went above; compacting the range drops the tombstone itself, so
  // that no file mentions the checkpoint any more. It touches no tensor bytes
  // of other checkpoints: their files do not overlap the range.
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction =
      rocksdb::BottommostLevelCompaction::kForce;
  return FromRocks(db_->CompactRange(compact, chunks_, &b, &e),
                   "compacting deleted chunks");
}

std::set<int64_t> StoreImpl::LiveChunkIds() {
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  std::set<int64_t> ids;
  for (const auto& f : files) {
    if (f.column_family_name != kChunksCf) continue;
    int64_t id = 0;
    if (DecodeCheckpointId(f.smallestkey, &id)) ids.insert(id);
    if (DecodeCheckpointId(f.largestkey, &id)) ids.insert(id);
  }
  return ids;
}

Status StoreImpl::RemoveLeftovers() {
  std::error_code ec;
  fs::remove_all(StagingDir(path_), ec);
  if (ec)
    return Status::IOError("removing staged files in " + StagingDir(path_) +
                           ": " + ec.message());
  // Every read-write open starts a new write-ahead log. RocksDB 7.x keeps the
  // earlier ones until a flush, which a store that is opened without being
  // written never runs, so empty logs pile up and each open recovers them all
  // (fixed upstream in RocksDB 8.3). An empty log older than the current one
  // holds no write; removing it is what that fix does. (RocksDB's own listing
  // skips empty logs, so the directory is read.)
  std::unique_ptr<rocksdb::LogFile> current;
  if (db_->GetCurrentWalFile(&current).ok()) {
    for (const auto& entry : fs::directory_iterator(path_, ec)) {
      const fs::path& file = entry.path();
      const std::string stem = file.stem().string();
      if (file.extension() != ".log" || stem.empty() || stem.size() > 18 ||
          stem.find_first_not_of("0123456789") != std::string::npos ||
          std::stoull(stem) >= current->LogNumber() ||
          !entry.is_regular_file(ec) || entry.file_size(ec) != 0)
        continue;
      fs::remove(file, ec);
    }
  }
  // Chunk files whose checkpoint has no metadata record belong to a save that
  // never committed (or a delete that did not finish). Found from file metadata
  // alone: no chunk byte is read.
  for (int64_t id : LiveChunkIds()) {
    std::string record;
    rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), meta_, MetaKey(id), &record);
    if (s.IsNotFound())
      RETURN_IF_ERROR(DropChunks(id));
    else
      RETURN_IF_ERROR(
          FromRocks(s, "checking checkpoint " + std::to_string(id)));
  }
  return Status::OK();
}

Result<std::vector<CheckpointInfo>> StoreImpl::List() {
  std::shared_lock lock(mu_);
  std::vector<CheckpointInfo> out;
  Status error;
  RETURN_IF_ERROR(ForEachRecord([&](int64_t id, std::string_view record) {
    auto info = DecodeCheckpointInfo(record);
    if (!info.ok()) {
      error = info.status().WithContext("checkpoint id " + std::to_string(id));
      return false;
    }
    out.push_back(*info);
    return true;
  }));
  RETURN_IF_ERROR(error);
  return out;
}

Result<int64_t> StoreImpl::Resolve(const CheckpointSelector& which) {
  ASSIGN_OR_RETURN(auto all, List());
  using Kind = CheckpointSelector::Kind;
  std::optional<int64_t> found;
  for (const CheckpointInfo& info : all) {
    const bool match =
        which.kind == Kind::kLatest ||
        (which.kind == Kind::kId && info.id == which.number) ||
        (which.kind == Kind::kStep && info.step == which.number) ||
        (which.kind == Kind::kTag && info.tag == which.tag);
    if (match)
      found = info.id;  // the latest match wins (several checkpoints may share
                        // a step)
  }
  if (!found) {
    return Status::NotFound("no checkpoint with " + which.ToString() +
                            " in store '" + path_ + "'");
  }
  return *found;
}

Status StoreImpl::GetRecord(int64_t checkpoint_id,
                            rocksdb::PinnableSlice* record) {
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), meta_, MetaKey(checkpoint_id), record);
  if (s.IsNotFound()) {
    return Status::NotFound("no checkpoint with id " +
                            std::to_string(checkpoint_id) + " in store '" +
                            path_ + "'");
  }
  return FromRocks(s, "reading checkpoint " + std::to_string(checkpoint_id));
}

Result<CheckpointMetadata> StoreImpl::GetMetadata(int64_t checkpoint_id) {
  std::shared_lock lock(mu_);
  rocksdb::PinnableSlice record;
  RETURN_IF_ERROR(GetRecord(checkpoint_id, &record));
  auto meta = DecodeCheckpoint(std::string_view(record.data(), record.size()));
  if (!meta.ok())
    return meta.status().WithContext("checkpoint id " +
                                     std::to_string(checkpoint_id));
  if (meta->info.id != checkpoint_id) {
    return Status::Corruption("checkpoint record at id " +
                              std::to_string(checkpoint_id) + " claims id " +
                              std::to_string(meta->info.id));
  }
  return meta;
}

Result<int64_t> StoreImpl::NextCheckpointId() {
  RETURN_IF_ERROR(RequireWritable("saving"));
  std::shared_lock lock(mu_);
  int64_t next = 1;
  std::string counter;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), meta_, kNextIdKey, &counter);
  if (s.ok() && counter.size() == 8)
    next = static_cast<int64_t>(GetBigEndian64(counter.data()));
  else if (!s.IsNotFound())
    RETURN_IF_ERROR(FromRocks(s, "reading the next checkpoint id"));
  for (int64_t id : LiveChunkIds()) next = std::max(next, id + 1);
  RETURN_IF_ERROR(ForEachRecord([&](int64_t committed, std::string_view) {
    next = std::max(next, committed + 1);
    return true;
  }));
  return next;
}

Status StoreImpl::CheckTagFree(const std::string& tag) {
  ASSIGN_OR_RETURN(auto all, List());
  for (const CheckpointInfo& info : all) {
    if (info.tag == tag) {
      return Status::InvalidArgument(
          "tag '" + tag + "' already names checkpoint id " +
          std::to_string(info.id) + " in store '" + path_ + "'");
    }
  }
  return Status::OK();
}

Status StoreImpl::Commit(const CheckpointMetadata& meta,
                         const std::vector<std::string>& staged) {
  RETURN_IF_ERROR(RequireWritable("saving"));
  std::shared_lock lock(mu_);
  const int64_t id = meta.info.id;
  ForgetIndex(id);  // an id whose earlier commit failed is used again
  if (!staged.empty()) {
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;
    ingest.snapshot_consistency = false;
    Status s = FromRocks(
        db_->IngestExternalFile(chunks_, staged, ingest),
        "ingesting staged chunks of checkpoint " + std::to_string(id));
    if (!s.ok()) {
      DropChunks(id).WithContext("cleanup").ok();
      return s;
    }
  }
  std::string next;
  PutBigEndian64(&next, static_cast<uint64_t>(id + 1));
  rocksdb::WriteBatch batch;
  batch.Put(meta_, MetaKey(id), EncodeCheckpoint(meta));
  batch.Put(meta_, kNextIdKey, next);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  Status s = FromRocks(db_->Write(wo, &batch),
                       "committing checkpoint " + std::to_string(id));
  if (!s.ok()) (void)DropChunks(id);
  return s;
}

Status StoreImpl::Delete(int64_t checkpoint_id) {
  RETURN_IF_ERROR(RequireWritable("deleting"));
  std::shared_lock lock(mu_);
  rocksdb::PinnableSlice record;
  RETURN_IF_ERROR(GetRecord(checkpoint_id, &record));
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  RETURN_IF_ERROR(
      FromRocks(db_->Delete(wo, meta_, MetaKey(checkpoint_id)),
                "deleting checkpoint " + std::to_string(checkpoint_id)));
  // From here the checkpoint is gone; a crash before the chunks are dropped
  // leaves orphans that the next read-write open removes.
  return DropChunks(checkpoint_id);
}

std::string StoreImpl::VersionStamp() const {
  // What a writer changes when it commits or deletes: the WAL (metadata
  // records), the MANIFEST (ingested and deleted files) and CURRENT.
  std::string stamp;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != "CURRENT" && name.rfind("MANIFEST-", 0) != 0 &&
        entry.path().extension() != ".log") {
      continue;
    }
    std::error_code size_ec, time_ec;
    const auto size = entry.file_size(size_ec);
    const auto time = entry.last_write_time(time_ec).time_since_epoch().count();
    stamp +=
        name + ":" + std::to_string(size) + ":" + std::to_string(time) + ";";
  }
  return stamp;
}

Status StoreImpl::Refresh() {
  if (!options_.read_only) return Status::OK();
  std::unique_lock lock(mu_);
  if (db_ && VersionStamp() == stamp_) return Status::OK();
  CloseDb();
  return OpenDbRetrying();
}
Result<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                           const StoreOptions& options) {
  auto store = std::make_unique<StoreImpl>(path, options);
  RETURN_IF_ERROR(store->OpenDbRetrying());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace ckptdb::storage
