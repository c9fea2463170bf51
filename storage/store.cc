#include "storage/store.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/table.h>
#include <rocksdb/transaction_log.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <utility>

#include "core/text.h"
#include "storage/buffer_pool.h"
#include "storage/chunk_files.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/record_copies.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;

void StoreImpl::CloseDb() {
  remover_.Wait();
  files_.reset();
  {
    std::lock_guard lock(held_mu_);
    held_values_checked_.clear();
  }
  memo_.ForgetAll();
  {
    std::lock_guard lock(live_ids_mu_);
    live_ids_.reset();  // numbered by the database being closed
  }
  if (db_) {
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
    handles_.clear();
    chunks_ = meta_ = nullptr;
    db_->Close().PermitUncheckedError();
    db_.reset();
  }
  RemoveView();
}

Result<rocksdb::TablePropertiesCollection> StoreImpl::ChunkTablesOf(
    int64_t checkpoint_id, const std::string& what) {
  const std::string begin = CheckpointKeyPrefix(checkpoint_id);
  const std::string end = CheckpointKeyEnd(checkpoint_id);
  const rocksdb::Range range(begin, end);
  rocksdb::TablePropertiesCollection tables;
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      db_->GetPropertiesOfTablesInRange(chunks_, &range, 1, &tables),
      "reading " + what + " of checkpoint " + std::to_string(checkpoint_id)));
  return tables;
}

Result<std::vector<ValueFileExtent>> StoreImpl::NamedValueFiles(
    int64_t checkpoint_id) {
  CKPTDB_ASSIGN_OR_RETURN(rocksdb::TablePropertiesCollection tables,
                          ChunkTablesOf(checkpoint_id, "the table properties"));
  std::vector<ValueFileExtent> named;
  for (const auto& [table, props] : tables) {
    if (auto values = ValueFileOf(*props)) named.push_back(std::move(*values));
  }
  return named;
}

std::set<int64_t> StoreImpl::LiveChunkIds() {
  // RocksDB numbers each version of the `chunks` family's files (every
  // ingestion and file deletion makes a new one): a walk of the live files,
  // which formats every file's name, is made once per version, where a save
  // asked several times and a store of many checkpoints has many files.
  uint64_t version = 0;
  const bool numbered = db_->GetIntProperty(
      chunks_, rocksdb::DB::Properties::kCurrentSuperVersionNumber, &version);
  std::lock_guard lock(live_ids_mu_);
  if (numbered && live_ids_ && live_ids_->first == version)
    return live_ids_->second;
  std::set<int64_t> ids = storage::LiveChunkIds(*db_);
  if (numbered) live_ids_.emplace(version, ids);
  return ids;
}

ChunkIngester StoreImpl::Ingester() {
  return ChunkIngester(*db_, chunks_, *fs_, env_.get(), path_);
}

Status StoreImpl::RemoveLeftovers() {
  // Value files of checkpoints without chunks: no key can reach them.
  RemoveUnusedValueDirs(LiveChunkIds());
  const std::string staging = StagingDir(path_);
  if (!fs_->FileExists(staging, rocksdb::IOOptions(), nullptr).IsNotFound()) {
    CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> staged,
                            fs_->ListDir(staging));
    for (const std::string& name : staged)
      CKPTDB_RETURN_IF_ERROR(fs_->Remove(staging + "/" + name));
    CKPTDB_RETURN_IF_ERROR(
        FromRocks(fs_->DeleteDir(staging, rocksdb::IOOptions(), nullptr),
                  "removing " + staging));
  }
  // Every read-write open starts a new write-ahead log. RocksDB 7.x keeps the
  // earlier ones until a flush, which a store that is opened without being
  // written never runs, so empty logs pile up and each open recovers them all
  // (fixed upstream in RocksDB 8.3). An empty log older than the current one
  // holds no write; removing it is what that fix does. (RocksDB's own listing
  // skips empty logs, so the directory is read.)
  std::unique_ptr<rocksdb::LogFile> current;
  if (!db_->GetCurrentWalFile(&current).ok()) return Status::OK();
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                          fs_->ListDir(path_));
  for (const std::string& name : names) {
    const fs::path file(name);
    const std::string stem = file.stem().string();
    if (file.extension() != ".log" || stem.empty() || stem.size() > 18 ||
        stem.find_first_not_of("0123456789") != std::string::npos ||
        std::stoull(stem) >= current->LogNumber())
      continue;
    const std::string log = path_ + "/" + name;
    bool is_dir = false;
    if (!fs_->IsDirectory(log, rocksdb::IOOptions(), &is_dir, nullptr).ok() ||
        is_dir)
      continue;
    CKPTDB_ASSIGN_OR_RETURN(const std::optional<uint64_t> size,
                            fs_->SizeIfPresent(log));
    if (size == 0u) CKPTDB_RETURN_IF_ERROR(fs_->Remove(log));
  }
  return Status::OK();
}

Status StoreImpl::WriteMeta(rocksdb::WriteBatch* batch,
                            const std::string& what) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  CKPTDB_RETURN_IF_ERROR(FromRocks(db_->Write(wo, batch), what));
  rocksdb::FlushOptions flush;
  flush.wait = true;
  return FromRocks(db_->Flush(flush, meta_), what + " (flushing the record)");
}

Status StoreImpl::CompactMetaIfDeep() {
  // From RocksDB's count (its metadata of the family's files would list every
  // file by name, each commit).
  // (A text property: RocksDB has no number form of it.)
  std::string level0;
  if (!db_->GetProperty(meta_,
                        rocksdb::DB::Properties::kNumFilesAtLevelPrefix + "0",
                        &level0) ||
      std::strtoull(level0.c_str(), nullptr, 10) < kMetaCompactionTrigger)
    return Status::OK();
  return FromRocks(
      db_->CompactRange(rocksdb::CompactRangeOptions(), meta_, nullptr,
                        nullptr),
      "compacting the metadata table files of store '" + path_ + "'");
}

Result<std::string> StoreImpl::Identity() {
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  // The identity the database recorded (KeepIdentity), which a damaged
  // IDENTITY file does not change; RocksDB's own for a store whose first
  // read-write open since the record existed has not come yet.
  std::string identity;
  if (db_->Get(rocksdb::ReadOptions(), meta_, kIdentityKey, &identity).ok())
    return identity;
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(db_->GetDbIdentity(identity),
                "reading the identity of store '" + path_ + "'"));
  return identity;
}

Result<std::vector<CheckpointInfo>> StoreImpl::List() {
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  return VisibleInfos();
}

std::optional<CheckpointInfo> StoreImpl::ReadInfo(int64_t checkpoint_id) {
  rocksdb::PinnableSlice record;
  if (!db_->Get(rocksdb::ReadOptions(), meta_, MetaKey(checkpoint_id), &record)
           .ok())
    return std::nullopt;
  Result<CheckpointInfo> info =
      DecodeCheckpointInfo(std::string_view(record.data(), record.size()));
  if (!info.ok() || info->id != checkpoint_id) return std::nullopt;
  memo_.RememberInfo(*info);
  return std::move(info).value();
}

Result<std::vector<CheckpointInfo>> StoreImpl::VisibleInfos() {
  uint64_t changes = 0;
  if (std::optional<std::set<int64_t>> ids = memo_.RecordIds(&changes)) {
    std::vector<CheckpointInfo> out;
    out.reserve(ids->size());
    for (int64_t id : *ids) {
      if (!catalogue_.Visible(id)) continue;
      std::optional<CheckpointInfo> info = memo_.Info(id);
      if (!info) info = ReadInfo(id);
      if (!info) return WalkVisibleInfos();  // damage, which the walk reports
      out.push_back(std::move(*info));
    }
    return out;
  }
  return WalkVisibleInfos();
}

Result<std::vector<CheckpointInfo>> StoreImpl::WalkVisibleInfos() {
  uint64_t changes = 0;
  memo_.RecordIds(&changes);
  std::set<int64_t> ids;
  std::vector<CheckpointInfo> out;
  CKPTDB_RETURN_IF_ERROR(ForEachRecord([&](int64_t id,
                                           std::string_view record) {
    ids.insert(id);
    if (!catalogue_.Visible(id)) return true;
    if (std::optional<CheckpointInfo> known = memo_.Info(id)) {
      out.push_back(std::move(*known));
      return true;
    }
    auto info = DecodeCheckpointInfo(record);
    if (info.ok() && info->id == id) memo_.RememberInfo(*info);
    if (!info.ok()) {
      // From the copy; when both are damaged the listing still names the
      // checkpoint, and the calls that need its record fail.
      rocksdb::PinnableSlice copy;
      if (MainRecordFromCopy(id, &copy).ok())
        info = DecodeCheckpointInfo(std::string_view(copy.data(), copy.size()));
    }
    if (!info.ok()) {
      CheckpointInfo damaged;
      damaged.id = id;
      damaged.damage = "the record of checkpoint id " + std::to_string(id) +
                       " in store '" + path_ +
                       "' is damaged: " + info.status().message();
      out.push_back(std::move(damaged));
      return true;
    }
    out.push_back(*info);
    return true;
  }));
  memo_.RememberRecordIds(std::move(ids), changes);
  // Records only their copies hold come after the others.
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) {
              return a.id < b.id;
            });
  return out;
}

Result<int64_t> StoreImpl::Resolve(const CheckpointSelector& which) {
  CKPTDB_ASSIGN_OR_RETURN(auto all, List());
  return catalogue_.Resolve(all, which);
}

Result<int64_t> StoreImpl::NextCheckpointId() {
  CKPTDB_RETURN_IF_ERROR(RequireWritable("saving"));
  // The space of the files a retention policy deleted comes back before this
  // save writes any (every rank's writes start after the root's id), and with
  // it the reserve, if a full disk's delete used it.
  remover_.Wait();
  const bool repair_reserve = reserve_released_.exchange(false);
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  // Before the save stages files, which a reopen would remove.
  CKPTDB_RETURN_IF_ERROR(ReopenAfterFailedWrites(lock));
  // After the reopen, which may have used the reserve: a save never writes
  // into the room that keeps a delete and an open working on a full disk.
  CKPTDB_RETURN_IF_ERROR(ReserveForSave(repair_reserve));
  const std::set<int64_t> live = LiveChunkIds();
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> records, RecordIds());
  const int64_t next = catalogue_.NextId(live, records);
  // The value files of a failed save (kept in case it committed after all)
  // and of interrupted deletes: nothing writes value files now, and none that
  // no table file reaches can become reachable.
  RemoveUnusedValueDirs(live);
  if (remover_.TakeFailure()) RemoveDeletedTableLinks();
  return next;
}

Status StoreImpl::CheckTagFree(const std::string& tag) {
  CKPTDB_ASSIGN_OR_RETURN(auto all, List());
  return catalogue_.CheckTagFree(all, tag);
}

Status StoreImpl::CheckOpen() const {
  if (db_) return Status::OK();
  return Status::IOError("store '" + path_ +
                         "' is not open: reopening it after a failed write "
                         "failed; the next call tries again");
}

Status StoreImpl::EnsureOpenShared(std::shared_lock<std::shared_mutex>& lock) {
  // Open until the handle is open under the shared lock: a Release on another
  // thread may close it between the exclusive open and the lock taken back.
  while (!db_) {
    lock.unlock();
    Status s;
    {
      std::unique_lock exclusive(mu_);
      s = EnsureOpen();
    }
    lock.lock();
    CKPTDB_RETURN_IF_ERROR(s);
  }
  return Status::OK();
}

Status StoreImpl::ReopenBeforeCommitPoint(
    Status error, std::shared_lock<std::shared_mutex>& lock,
    const std::string& what) {
  const Status reopened = ReopenNow(lock);
  if (reopened.ok()) return error;
  return Status(error.code(),
                error.message() + "; " + what +
                    " is not committed (it failed before its records were "
                    "written; the next read-write open removes its chunks), "
                    "but reopening the store failed too (" +
                    reopened.ToString() + ")");
}

Status StoreImpl::Commit(const CheckpointMetadata& meta,
                         const std::vector<std::string>& staged) {
  CKPTDB_RETURN_IF_ERROR(RequireWritable("saving"));
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  const int64_t id = meta.info.id;
  const std::string what = "checkpoint " + std::to_string(id);
  auto committed = [&] { return catalogue_.Committed(id); };
  ForgetIndex(id);  // an id whose earlier commit failed is used again
  memo_.ForgetInfo(id);
  CKPTDB_RETURN_IF_ERROR(CheckReferencesHeld(meta.info));
  CommitSteps steps;
  if (!staged.empty()) {
    ChunkIngester ingester = Ingester();
    Status s = ingester.Ingest(staged, what);
    if (s.ok()) s = ingester.CheckIngested(meta);
    if (!s.ok()) return ReopenBeforeCommitPoint(s, lock, what);
  }
  steps.Lap(&steps.ingest);
  // The main record and the tensor records, in one batch: one commit. Only
  // keys of this checkpoint, so that its table file overlaps no other's: a
  // delete's compaction then rewrites the deleted checkpoint's files alone,
  // and the others' blocks stay in the cache (the next id is the journal's
  // high-water mark, which step 5 raises).
  const auto records = EncodeCheckpointRecords(meta);
  // Their second copy and that of where the chunks lie are gathered and
  // compressed while RocksDB writes and flushes the records.
  const bool located = !staged.empty();
  std::future<Result<EncodedCopies>> copies =
      std::async(std::launch::async, [this, id, located, &records] {
        return EncodeCopies(id, located, records);
      });
  size_t record_bytes = 0;
  for (const auto& [key, value] : records)
    record_bytes += key.size() + value.size();
  // Room for every record at once (a batch that grows copies what it holds).
  rocksdb::WriteBatch batch(64 + record_bytes + 16 * records.size());
  for (const auto& [key, value] : records) batch.Put(meta_, key, value);
  Status s = WriteMeta(&batch, "committing " + what);
  // (A commit that fails from here on reopens, which forgets the ids.)
  if (s.ok()) memo_.Added(id);
  // Room for them in the metadata cache before they are read back from their
  // table file (which puts them there).
  const size_t meta_cache_bytes = s.ok() ? FitMetaCache(record_bytes) : 0;
  if (s.ok()) s = ReadBack(id, records);
  steps.Lap(&steps.records);
  // Both copies, before the journal names the checkpoint.
  Result<EncodedCopies> encoded = copies.get();
  if (s.ok()) s = encoded.status();
  steps.Lap(&steps.copies_wait);
  if (s.ok()) s = WriteCopies(id, *encoded);
  steps.Lap(&steps.copies_write);
  if (s.ok()) {
    CommitJournal journal = *catalogue_.journal();
    journal.committed.insert(id);
    journal.high_water = std::max(journal.high_water, id);
    s = SaveJournal(std::move(journal));
  }
  if (!s.ok()) return Reopen(s, lock, what + "'s commit", committed);
  steps.Lap(&steps.journal);
  LogCommitSteps(id, steps, meta_cache_bytes);
  // The commit stands whatever the compaction does: a failed one leaves a
  // background error, which the next write's reopen clears (and the reopen's
  // check finds any damaged metadata table first).
  Status compacted = CompactMetaIfDeep();
  (void)compacted;
  return Status::OK();
}

size_t StoreImpl::FitMetaCache(size_t record_bytes) {
  std::lock_guard lock(meta_cache_mu_);
  largest_records_ = std::max(largest_records_, record_bytes);
  // RocksDB's sum of the family's live table files (its metadata of them
  // would list every file by name).
  uint64_t live = 0;
  (void)db_->GetIntProperty(meta_, rocksdb::DB::Properties::kLiveSstFilesSize,
                            &live);
  meta_cache_->SetCapacity(MetaCacheBytesFor(live, largest_records_));
  return ReportedMetaCacheCapacity();
}

size_t StoreImpl::ReportedMetaCacheCapacity() {
  // What the family's table reader uses, as RocksDB reports it.
  uint64_t capacity = 0;  // stays 0 when RocksDB does not report one
  (void)db_->GetIntProperty(meta_, rocksdb::DB::Properties::kBlockCacheCapacity,
                            &capacity);
  return static_cast<size_t>(capacity);
}

size_t StoreImpl::MetaCacheCapacity() {
  std::shared_lock lock(mu_);
  return db_ ? ReportedMetaCacheCapacity() : 0;
}

Result<StoreImpl::EncodedCopies> StoreImpl::EncodeCopies(
    int64_t checkpoint_id, bool located, const CopyEntries& records) {
  EncodedCopies out;
  if (located) {
    CKPTDB_ASSIGN_OR_RETURN(out.locators, EncodeLocatorCopy(checkpoint_id));
  }
  out.records = copy_encoder_.Encode(CopyKind::kRecords, records);
  return out;
}

Status StoreImpl::WriteCopies(int64_t checkpoint_id,
                              const EncodedCopies& copies) {
  if (copies.locators) {
    CKPTDB_RETURN_IF_ERROR(WriteEncodedCopy(*fs_, path_, CopyKind::kLocators,
                                            checkpoint_id, *copies.locators));
  }
  return WriteEncodedCopy(*fs_, path_, CopyKind::kRecords, checkpoint_id,
                          copies.records);
}

void StoreImpl::LogCommitSteps(int64_t checkpoint_id, const CommitSteps& steps,
                               size_t meta_cache_bytes) {
  auto ms = [](std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, db_->GetDBOptions().info_log,
               "[ckptdb] checkpoint %lld committed in %.3f ms: ingest %.3f, "
               "records %.3f, copies %.3f (waited %.3f, wrote %.3f), "
               "journal %.3f; metadata cache %.1f MiB",
               static_cast<long long>(checkpoint_id), ms(steps.Total()),
               ms(steps.ingest), ms(steps.records),
               ms(steps.copies_wait + steps.copies_write),
               ms(steps.copies_wait), ms(steps.copies_write), ms(steps.journal),
               static_cast<double>(meta_cache_bytes) / (1 << 20));
}

Status StoreImpl::ReopenNow(std::shared_lock<std::shared_mutex>& lock) {
  lock.unlock();
  Status reopened;
  {
    std::unique_lock exclusive(mu_);
    CloseDb();
    reopened = AtItsPath("reopening");
    if (reopened.ok()) reopened = OpenDb();
    if (IsNoSpace(reopened) && ReleaseReserve()) reopened = OpenDb();
  }
  lock.lock();
  return reopened;
}

Status StoreImpl::ReopenAfterFailedWrites(
    std::shared_lock<std::shared_mutex>& lock) {
  // A failed background job, or a write that failed outside a commit (a
  // staged file of a save that then failed), which leaves the file system
  // refusing deletions until a re-open: without one, every later delete
  // would keep its files.
  std::string why;
  uint64_t errors = 0;
  if (db_->GetIntProperty("rocksdb.background-errors", &errors) && errors > 0) {
    why = "a background job of store '" + path_ + "' failed";
  } else if (fs_->write_failed()) {
    why = "an earlier write to store '" + path_ + "' failed";
  } else {
    return Status::OK();
  }
  const Status reopened = ReopenNow(lock);
  if (reopened.ok()) return Status::OK();
  return Status(reopened.code(),
                why + ", and reopening the store before this call failed (" +
                    reopened.ToString() + "); this call wrote nothing");
}

Status StoreImpl::CheckReferencesHeld(const CheckpointInfo& info) {
  if (info.references.empty()) return Status::OK();
  const std::set<int64_t> live = LiveChunkIds();
  for (int64_t held : info.references) {
    if (held >= info.id || !live.contains(held)) {
      return Status::FailedPrecondition(
          "checkpoint " + std::to_string(info.id) +
          " refers to chunks of checkpoint " + std::to_string(held) +
          ", which store '" + path_ + "' no longer holds");
    }
    CKPTDB_RETURN_IF_ERROR(CheckHeldValueFiles(info.id, held));
  }
  return Status::OK();
}

Status StoreImpl::CheckShareable(int64_t checkpoint_id) {
  CKPTDB_RETURN_IF_ERROR(RequireWritable("saving"));
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  rocksdb::PinnableSlice record;
  CKPTDB_RETURN_IF_ERROR(GetRecord(checkpoint_id, &record));
  CKPTDB_ASSIGN_OR_RETURN(
      CheckpointInfo info,
      DecodeCheckpointInfo(std::string_view(record.data(), record.size())));
  std::set<int64_t> held(info.references.begin(), info.references.end());
  held.insert(checkpoint_id);
  const std::set<int64_t> live = LiveChunkIds();
  for (int64_t id : held) {
    CKPTDB_ASSIGN_OR_RETURN(std::string loss, ValueFileLoss(id));
    if (loss.empty()) {
      CKPTDB_ASSIGN_OR_RETURN(loss, ChunkTableLoss(id, checkpoint_id, live));
    }
    if (loss.empty()) continue;
    const std::string message = "the chunks of checkpoint " +
                                std::to_string(checkpoint_id) + " in store '" +
                                path_ + "' cannot be shared: the " + loss +
                                " (checkpoint " + std::to_string(id) + "'s)";
    rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL,
                 db_->GetDBOptions().info_log, "%s", message.c_str());
    return Status::Corruption(message);
  }
  return Status::OK();
}

Result<std::string> StoreImpl::ChunkTableLoss(int64_t held,
                                              int64_t checkpoint_id,
                                              const std::set<int64_t>& live) {
  if (live.contains(held)) return std::string();
  // A checkpoint whose chunks all live in earlier ones has no table file of
  // its own, and no copy of its chunk locations.
  if (held == checkpoint_id) {
    CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> located,
                            CopyIds(CopyKind::kLocators));
    if (!located.contains(held)) return std::string();
  }
  return "chunk table files are not in the database (a rebuild sets aside "
         "those it cannot ingest, under " +
         DamagedDir(path_) + ")";
}

Result<std::string> StoreImpl::ValueFileLoss(int64_t held) {
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<ValueFileExtent> files,
                          NamedValueFiles(held));
  return ValueDirs().FirstLoss(files);
}

Status StoreImpl::CheckHeldValueFiles(int64_t id, int64_t held) {
  {
    std::lock_guard lock(held_mu_);
    if (held_values_checked_.contains(held)) return Status::OK();
  }
  CKPTDB_ASSIGN_OR_RETURN(const std::string loss, ValueFileLoss(held));
  if (!loss.empty()) {
    return Status::Corruption("checkpoint " + std::to_string(id) +
                              " would share chunks of checkpoint " +
                              std::to_string(held) + ", whose " + loss +
                              ": not committed. `ckpt-db-dump verify " + path_ +
                              "` lists the checkpoints that use it; a save "
                              "with incremental saves off "
                              "writes every chunk again");
  }
  std::lock_guard lock(held_mu_);
  held_values_checked_.insert(held);
  return Status::OK();
}

namespace {

// Whether `report` names no problem at all.
bool NothingFound(const StoreReport& r) {
  return r.unaccounted_chunk_ids.empty() && r.unused_value_ids.empty() &&
         r.stray_value_files.empty() && r.damaged_journal_copies.empty() &&
         r.repairable_metadata.empty() && r.lost_metadata.empty() &&
         r.damaged_chunk_tables.empty() && r.foreign_entries.empty();
}

// The entries of `kept` that `again` has too, in `kept`'s order.
template <typename T>
void KeepCommon(std::vector<T>* kept, const std::vector<T>& again) {
  std::erase_if(*kept, [&](const T& x) {
    return std::find(again.begin(), again.end(), x) == again.end();
  });
}

// What both reports found: a later look at the store confirms a finding.
void KeepConfirmed(StoreReport* report, const StoreReport& again) {
  KeepCommon(&report->unaccounted_chunk_ids, again.unaccounted_chunk_ids);
  KeepCommon(&report->unused_value_ids, again.unused_value_ids);
  KeepCommon(&report->stray_value_files, again.stray_value_files);
  KeepCommon(&report->damaged_journal_copies, again.damaged_journal_copies);
  KeepCommon(&report->repairable_metadata, again.repairable_metadata);
  KeepCommon(&report->lost_metadata, again.lost_metadata);
  KeepCommon(&report->damaged_chunk_tables, again.damaged_chunk_tables);
  KeepCommon(&report->foreign_entries, again.foreign_entries);
  report->high_water = again.high_water;
  report->writer_active = report->writer_active || again.writer_active;
}

}  // namespace

Result<StoreReport> StoreImpl::Check() {
  remover_.Wait();  // what it removes is not a leftover
  Result<StoreReport> report = CheckView();
  if (!options_.read_only) return report;
  // A read-only view opened while a writer committed or deleted, or one the
  // writer changed since, may hold half of that work (chunks of an id whose
  // records are not written yet or no longer there, a record copy written or
  // removed after the view, a table file removed since): such a finding is
  // not damage, nor a failure of the check itself. A finding stands only when
  // fresh views find it again, each opened without waiting for the writer (a
  // writer that commits back-to-back is never quiet); a check whose view is
  // still the store's present state needs no other look.
  constexpr int kLooks = 8;
  for (int look = 1; look < kLooks; ++look) {
    if (report.ok() && NothingFound(*report)) break;
    CKPTDB_ASSIGN_OR_RETURN(const bool current, RefreshView());
    if (current) break;
    Result<StoreReport> again = CheckView();
    if (report.ok() && again.ok()) {
      KeepConfirmed(&*report, *again);
    } else {
      report = std::move(again);
    }
  }
  return report;
}

Result<StoreReport> StoreImpl::CheckView() {
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  // The journal as read with this handle's view of the database: a writer
  // may have moved on since.
  StoreReport report;
  report.damaged_journal_copies = catalogue_.damaged_copies();
  // Without a journal (a store written before them) nothing is provably a
  // leftover.
  const std::optional<CommitJournal> journal = catalogue_.journal();
  report.high_water =
      journal ? journal->high_water : std::numeric_limits<int64_t>::max();
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> records, RecordIds());
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> referenced, ReferencedIds());
  const std::set<int64_t> live = LiveChunkIds();
  if (!journal && !records.empty()) {
    const auto copies = JournalPaths(path_);
    report.damaged_journal_copies.push_back(
        copies[0] + " and " + copies[1] +
        ": both missing, so nothing guards the checkpoints against a "
        "database that loses records (a store written before journals has "
        "none)");
  }
  CKPTDB_ASSIGN_OR_RETURN(report.unused_value_ids, UnusedValueDirs(live));
  report.foreign_entries = ForeignEntries();
  std::erase_if(report.unused_value_ids, [&](int64_t id) {
    return NotADirectory(ValueDirOf(path_, id)).has_value();
  });
  for (int64_t id : live) {
    if (NotADirectory(ValueDirOf(path_, id))) continue;  // foreign_entries
    std::vector<std::string> names;
    CKPTDB_RETURN_IF_ERROR(ValueDirs().List(id, &names));
    if (names.empty()) continue;
    CKPTDB_ASSIGN_OR_RETURN(const std::vector<ValueFileExtent> named,
                            NamedValueFiles(id));
    CKPTDB_RETURN_IF_ERROR(
        ValueDirs().AddStray(id, named, &report.stray_value_files));
  }
  for (int64_t id : live) {
    // A deletion under way is not a problem, nor the chunks of a deleted
    // checkpoint that later ones share.
    if (!records.contains(id) && !referenced.contains(id) &&
        catalogue_.Visible(id))
      report.unaccounted_chunk_ids.push_back(id);
  }
  CKPTDB_ASSIGN_OR_RETURN(const CopyFindings copies, CompareCopies());
  ReportCopies(copies, &report);
  ReportOptionsFiles(&report);
  ReportMarkerFiles(&report);
  ReportView(&report);
  ReportTablesOutsideBlocks(&report);
  report.writer_active = claim_ != nullptr || WriterClaim::WriterHolds(path_);
  return report;
}

std::vector<std::string> StoreImpl::ForeignEntries() {
  std::vector<std::string> dirs = {StagingDir(path_), ValuesDir(path_),
                                   CopiesDir(path_)};
  Result<std::vector<std::string>> names = fs_->ListDir(ValuesDir(path_));
  std::vector<std::string> foreign;
  if (names.ok()) {
    std::sort(names->begin(), names->end());
    for (const std::string& name : *names) {
      int64_t id = 0;
      if (ParseValueDirName(name, &id)) {
        dirs.push_back(ValueDirOf(path_, id));
      } else {
        foreign.push_back(ValuesDir(path_) + "/" + name +
                          " is not a checkpoint's directory");
      }
    }
  }
  for (const std::string& dir : dirs) {
    if (std::optional<std::string> kind = NotADirectory(dir))
      foreign.push_back(dir + " is " + *kind +
                        ", where the store keeps a directory");
  }
  return foreign;
}

Result<std::string> StoreImpl::VersionStamp() const {
  // What a writer changes when it commits or deletes: the WAL, the MANIFEST
  // (flushed records, ingested and deleted files), CURRENT and the journal.
  // A file removed between the listing and its stat is left out: the stamp
  // differs from the one taken before the removal either way.
  // Taken before the store's file system exists (OpenDbRetrying): through a
  // file system of its own.
  StoreFileSystem fs(options_.file_system_hooks, options_.sync, path_);
  // No directory (yet), or not one: nothing a writer changes.
  CKPTDB_ASSIGN_OR_RETURN(const bool is_dir, fs.IsDirectory(path_));
  if (!is_dir) return std::string();
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDir(path_));
  std::sort(names.begin(), names.end());
  std::string stamp;
  for (const std::string& name : names) {
    if (name != "CURRENT" && name.rfind("MANIFEST-", 0) != 0 &&
        name.rfind("CKPTDB_JOURNAL", 0) != 0 && !name.ends_with(".log")) {
      continue;
    }
    CKPTDB_ASSIGN_OR_RETURN(const auto file,
                            fs.StampIfPresent(path_ + "/" + name));
    if (!file) continue;
    stamp += name + ":" + std::to_string(file->size) + ":" +
             std::to_string(file->mtime_ns) + ";";
  }
  return stamp;
}

Status StoreImpl::Refresh() {
  if (!options_.read_only) return Status::OK();
  return RefreshView().status();
}

Result<bool> StoreImpl::RefreshView() {
  std::unique_lock lock(mu_);
  CKPTDB_ASSIGN_OR_RETURN(const std::string stamp, VersionStamp());
  if (db_ && stamp == stamp_) return true;
  CloseDb();
  CKPTDB_RETURN_IF_ERROR(OpenDbRetrying());
  return false;
}

void StoreImpl::Release() {
  if (!options_.read_only) return;
  std::unique_lock lock(mu_);
  CloseDb();
  // After a failed write the file system holds deletions back until the
  // store opens again (a new one): open now, as a Refresh would, so that the
  // staged writes that follow clean up after themselves. A failed open
  // leaves the handle closed; the next call tries again.
  if (fs_ && fs_->write_failed()) (void)OpenDbRetrying();
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                           const StoreOptions& options) {
  if (path.empty()) {
    return Status::InvalidArgument(
        "path is empty: name the directory of the store to open");
  }
  // The system's calls end a path at its first NUL: the store would be made
  // at the part before it.
  if (const size_t nul = path.find('\0'); nul != std::string::npos) {
    return Status::InvalidArgument(
        "path '" + PrintableText(path) + "' holds a NUL byte (at byte " +
        std::to_string(nul) + "), which no file name can; nothing was made");
  }
  // Fixed now: a relative path would follow the process's working directory,
  // and a symlink on the way its retargeting, to another directory, where
  // the handle's later files (and RocksDB's) would land apart from the rest.
  auto store = std::make_unique<StoreImpl>(ResolvedPath(path), options, path);
  CKPTDB_RETURN_IF_ERROR(store->Open());
  return std::unique_ptr<Store>(std::move(store));
}

Status StoreImpl::Open() {
  if (options_.read_only) return OpenDbRetrying();
  // One read-write open at a time in the process: a second spelling of a
  // store that the first open is creating (its directory, or one above it,
  // not there yet) is then claimed after the first holds the directory's own
  // identity, and refused before it reaches RocksDB, whose failed open would
  // close the LOCK file and so drop the first handle's lock.
  static std::mutex* const opening = new std::mutex;
  std::lock_guard lock(*opening);
  CKPTDB_ASSIGN_OR_RETURN(claim_, WriterClaim::Take(spelled_));
  CKPTDB_RETURN_IF_ERROR(OpenDbRetrying());
  // (A failure closes the database as the handle is destroyed.)
  return claim_->ClaimOpenedDirectory();
}

}  // namespace ckptdb::storage
