// The rebuild of a database whose description (CURRENT, MANIFEST, write-ahead
// log) RocksDB cannot read, from the chunk table files and the second copies
// of the records (record_copies.h). The files it replaces are kept under
// damaged/<n>/.
#include <rocksdb/db.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/checksum.h"
#include "storage/column_families.h"
#include "storage/ingester.h"
#include "storage/keys.h"
#include "storage/record_copies.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace {

// Staged names of the chunk table files a rebuild ingests again.
constexpr char kRebuildPrefix[] = "rebuild-";

bool IsDescriptionFile(const std::string& name) {
  return name == "CURRENT" || name.rfind("MANIFEST-", 0) == 0 ||
         name.rfind("OPTIONS-", 0) == 0 || name.ends_with(".log") ||
         name.ends_with(".dbtmp");
}

// Where a rebuild moves the file `name` of the store's directory: a chunk
// table file to staging, to be ingested again; the description files and the
// metadata's table files (replaced by the copies) to `aside`, as is a table
// file whose properties cannot be read; "" for a file it leaves.
std::string RebuildPlace(rocksdb::Env* env, const std::string& store_path,
                         const std::string& name, const std::string& aside) {
  if (IsDescriptionFile(name)) return aside + "/" + name;
  if (!name.ends_with(".sst")) return "";
  const std::optional<std::string> family =
      TableFileFamily(env, store_path + "/" + name);
  if (!family || !IsChunkTableFamily(*family)) return aside + "/" + name;
  return StagingDir(store_path) + "/" + kRebuildPrefix + name;
}

// Nothing moves unless everything can: an entry that is not a regular file
// where the database keeps one, or where a new one writes one, is left alone,
// and the rebuild fails before it changes the store.
Status CheckRebuildable(StoreFileSystem& fs, const std::string& store_path,
                        const std::string& what) {
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                          fs.ListDir(store_path));
  for (const std::string& name : names) {
    const bool database_file = IsDescriptionFile(name) || name == "IDENTITY" ||
                               name == "LOCK" || name.starts_with("LOG") ||
                               name.ends_with(".sst");
    if (!database_file) continue;
    const std::string path = store_path + "/" + name;
    if (std::optional<std::string> kind =
            NotARegularFile(path, /*follow=*/false)) {
      return Status::Corruption(
          what + ": " + path + " is " + *kind +
          ", which ckptdb never makes in a store, so it is not ckptdb's and "
          "is left alone (move it out of the store to go on); nothing was "
          "changed");
    }
  }
  return Status::OK();
}

// Moves every file of the store's directory to its RebuildPlace, durably. A
// rebuild cut short left its chunk table files staged, and those it ingested
// in the directory too, under a second name: that name goes (ingesting the
// file twice would set the second aside as overlapping), and a staged name is
// never replaced.
Status MoveAsideForRebuild(StoreFileSystem& fs, rocksdb::Env* env,
                           const std::string& store_path,
                           const std::string& aside, const std::string& what) {
  const std::string staging = StagingDir(store_path);
  CKPTDB_RETURN_IF_ERROR(fs.CreateDirIfMissing(staging));
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> tables,
                          StagedRebuildTables(fs, store_path));
  CKPTDB_ASSIGN_OR_RETURN(const auto staged, FileIdsOf(fs, tables));
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                          fs.ListDir(store_path));
  for (const std::string& name : names) {
    std::string to = RebuildPlace(env, store_path, name, aside);
    if (to.empty()) continue;
    const std::string from = store_path + "/" + name;
    if (to.rfind(staging + "/", 0) == 0) {
      CKPTDB_ASSIGN_OR_RETURN(auto stamp, fs.StampIfPresent(from));
      if (stamp && staged.contains(stamp->device_and_inode)) {
        CKPTDB_RETURN_IF_ERROR(FromRocks(
            fs.DeleteFile(from, rocksdb::IOOptions(), nullptr),
            what + ": removing " + from + ", a second name of a staged file"));
        continue;
      }
      for (int k = 2; true; ++k) {
        CKPTDB_ASSIGN_OR_RETURN(const bool taken, fs.Exists(to));
        if (!taken) break;
        to = staging + "/" + kRebuildPrefix + std::to_string(k) + "-" + name;
      }
    }
    CKPTDB_RETURN_IF_ERROR(
        FromRocks(fs.RenameFile(from, to, rocksdb::IOOptions(), nullptr),
                  what + ": moving " + from));
  }
  CKPTDB_RETURN_IF_ERROR(fs.SyncDir(aside));
  CKPTDB_RETURN_IF_ERROR(fs.SyncDir(StagingDir(store_path)));
  return fs.SyncDir(store_path);
}

}  // namespace

Result<std::vector<std::string>> StagedRebuildTables(StoreFileSystem& fs,
                                                     const std::string& store) {
  const std::string staging = StagingDir(store);
  CKPTDB_ASSIGN_OR_RETURN(const bool staged, fs.Exists(staging));
  if (!staged) return std::vector<std::string>();
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDir(staging));
  std::sort(names.begin(), names.end());
  std::vector<std::string> tables;
  for (const std::string& name : names) {
    if (name.rfind(kRebuildPrefix, 0) == 0)
      tables.push_back(staging + "/" + name);
  }
  return tables;
}

Result<std::set<std::pair<uint64_t, uint64_t>>> FileIdsOf(
    StoreFileSystem& fs, const std::vector<std::string>& paths) {
  std::set<std::pair<uint64_t, uint64_t>> ids;
  for (const std::string& path : paths) {
    CKPTDB_ASSIGN_OR_RETURN(auto stamp, fs.StampIfPresent(path));
    if (stamp) ids.insert(stamp->device_and_inode);
  }
  return ids;
}

Status StoreImpl::IngestRebuildTables(const std::string& aside) {
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> tables,
                          StagedRebuildTables(*fs_, path_));
  for (const std::string& table : tables) {
    const std::string name = table.substr(table.rfind('/') + 1);
    // A table whose blocks fail is set aside, not ingested: RocksDB would
    // take it (without its key range, when its first block is damaged), and
    // the checksum the ingestion records would then be that of the damaged
    // bytes. The open writes it again from the copy of its chunk locations
    // (RestoreChunkTables), reading its chunks where it is set aside.
    Status ingested = BlocksIntact(table, kChunksCf);
    // An error reading it is not the table's fault either (see below).
    if (!ingested.ok() && !ingested.IsCorruption()) return ingested;
    if (ingested.ok()) ingested = Ingester().IngestUnscanned(table);
    if (ingested.ok()) continue;
    // A full disk is not the table's fault: the rebuild fails, the tables
    // not ingested yet stay staged, and the next read-write open finishes it
    // (MoveAsideForRebuild).
    if (IsNoSpace(ingested)) return ingested;
    // Unreadable, or overlapping what the database holds: kept aside, its
    // chunks missing (reads report them).
    CKPTDB_RETURN_IF_ERROR(fs_->CreateDirIfMissing(DamagedDir(path_)));
    CKPTDB_RETURN_IF_ERROR(fs_->CreateDirIfMissing(aside));
    CKPTDB_RETURN_IF_ERROR(FromRocks(
        fs_->RenameFile(table,
                        aside + "/" + name.substr(strlen(kRebuildPrefix)),
                        rocksdb::IOOptions(), nullptr),
        "setting aside " + table + ", which cannot be ingested"));
    CKPTDB_RETURN_IF_ERROR(fs_->SyncDir(aside));
  }
  return Status::OK();
}

Result<bool> StoreImpl::PrepareOrRebuild() {
  Result<bool> prepared = PrepareDirectory();
  if (!prepared.status().IsCorruption() || options_.read_only || !CanRebuild())
    return prepared;
  Status rebuilt = RebuildFromCopies();
  if (db_) CloseDb();
  if (!rebuilt.ok()) {
    return Status(prepared.status().code(),
                  prepared.status().message() +
                      "; rebuilding its database from the store's copies of "
                      "its records failed too: " +
                      rebuilt.ToString());
  }
  return true;
}

Status StoreImpl::CheckRocksHoldsJournal() {
  const std::optional<CommitJournal> journal = catalogue_.journal();
  if (!journal) return Status::OK();
  std::set<int64_t> held;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->SeekToFirst(); it->Valid();) {
    int64_t id = 0;
    std::string_view tensor_key;
    const std::string_view key(it->key().data(), it->key().size());
    if (DecodeMetaKey(key, &id)) {
      held.insert(id);
    } else if (!DecodeTensorRecordKey(key, &id, &tensor_key) &&
               !DecodeSmallTensorsKey(key, &id)) {
      break;
    }
    it->Seek(MetaRangeEnd(id));
  }
  // Damaged table files are the repair's (RepairCopies), not a rebuild's.
  if (!it->status().ok()) return Status::OK();
  std::string lost;
  for (int64_t id : journal->committed) {
    if (!held.contains(id))
      lost += (lost.empty() ? "" : ", ") + std::to_string(id);
  }
  if (lost.empty()) return Status::OK();
  return Status::Corruption("store '" + path_ + "': checkpoint id(s) " + lost +
                            " committed (commit journal) but their records "
                            "are missing from the database: its description "
                            "(CURRENT, MANIFEST) is damaged or was replaced");
}

bool StoreImpl::CanRebuild() {
  const std::optional<std::vector<int64_t>> uncopied = CommittedWithoutCopies();
  return uncopied && uncopied->empty();
}

void StoreImpl::CopyReadableRecords(bool has_db,
                                    const std::vector<int64_t>& ids) {
  if (ids.empty() ||
      !OpenRocks(has_db, /*read_only=*/true, /*lenient=*/true).ok())
    return;
  for (int64_t id : ids) {
    Result<CopyEntries> records = ReadRocksRecords(id);
    if (records.ok())
      (void)WriteCopy(*fs_, path_, CopyKind::kRecords, id, *records);
  }
  CloseDb();
}

std::optional<std::vector<int64_t>> StoreImpl::CommittedWithoutCopies() {
  Result<JournalState> state = ReadJournal(*fs_, path_);
  if (!state.ok() || !state->journal) return std::nullopt;
  std::vector<int64_t> ids;
  for (int64_t id : state->journal->committed) {
    if (!ReadCopy(*fs_, path_, CopyKind::kRecords, id).ok()) ids.push_back(id);
  }
  return ids;
}

Status StoreImpl::PreCheckOrRebuild(bool has_db) {
  Status s = PreCheckReadOnly(has_db);
  if (s.ok() || !s.IsCorruption()) return s;
  std::optional<std::vector<int64_t>> uncopied = CommittedWithoutCopies();
  if (uncopied && !uncopied->empty()) {
    // A checkpoint whose copy is gone but whose records the database still
    // reads whole (the damage is elsewhere) gets its copy first.
    CopyReadableRecords(has_db, *uncopied);
    uncopied = CommittedWithoutCopies();
  }
  if (!uncopied) return s;  // no journal: nothing to rebuild from
  if (!uncopied->empty()) {
    std::string ids;
    for (int64_t id : *uncopied)
      ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    return Status(s.code(),
                  s.message() +
                      "; the database is not rebuilt from the "
                      "store's copies of its records, which "
                      "checkpoint id(s) " +
                      ids +
                      " lack: a read-only open lists what it can read (a "
                      "checkpoint whose records are damaged in both copies "
                      "as damaged) and reads the other checkpoints; to go on "
                      "saving, load them from a read-only handle and save "
                      "them into a new store");
  }
  Status rebuilt = RebuildFromCopies();
  if (db_) CloseDb();
  if (!rebuilt.ok()) {
    return Status(s.code(), s.message() +
                                "; rebuilding its database from the store's "
                                "copies of its records failed too: " +
                                rebuilt.ToString());
  }
  return PreCheckReadOnly(has_db);
}

bool StoreImpl::CanRebuildInPlace() {
  return CanRebuild() && CheckRebuildable(*fs_, path_, "").ok();
}

Status StoreImpl::WithRebuildHint(Status s) {
  if (!s.IsCorruption() || !CanRebuildInPlace()) return s;
  return Status(s.code(),
                s.message() +
                    "; every committed checkpoint has an intact copy of its "
                    "records: a read-write open rebuilds the database from "
                    "them and the table files, keeping the damaged files "
                    "under " +
                    DamagedDir(path_));
}

Status StoreImpl::RebuildFromCopies() {
  const std::string what = "rebuilding the database of '" + path_ +
                           "' from its table files and metadata copies";
  CKPTDB_ASSIGN_OR_RETURN(const JournalState state, ReadJournal(*fs_, path_));
  // RocksDB's lock, so that no writer opens the store meanwhile.
  CKPTDB_RETURN_IF_ERROR(CheckRebuildable(*fs_, path_, what));
  rocksdb::FileLock* lock = nullptr;
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(env_->LockFile(path_ + "/LOCK", &lock), what));
  Result<std::string> aside = NewDamagedDir(*fs_, path_);
  Status moved = aside.status();
  if (moved.ok())
    moved = MoveAsideForRebuild(*fs_, env_.get(), path_, *aside, what);
  env_->UnlockFile(lock).PermitUncheckedError();
  CKPTDB_RETURN_IF_ERROR(moved);
  CKPTDB_RETURN_IF_ERROR(OpenRocks(/*has_db=*/false, /*read_only=*/false));
  CKPTDB_RETURN_IF_ERROR(IngestRebuildTables(*aside));
  CKPTDB_RETURN_IF_ERROR(RestoreRecordsFromCopies(*state.journal, what));
  CloseDb();
  return Status::OK();
}

Status StoreImpl::RestoreRecordsFromCopies(const CommitJournal& journal,
                                           const std::string& what) {
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> copied,
                          CopyIds(CopyKind::kRecords));
  int64_t next = journal.high_water + 1;
  rocksdb::WriteBatch batch;
  for (int64_t id : copied) {
    if (!journal.committed.contains(id) && id <= journal.high_water) continue;
    Result<CopyEntries> records = ReadCopy(*fs_, path_, CopyKind::kRecords, id);
    if (!records.ok()) continue;  // CanRebuild: none the journal names
    for (const auto& [key, value] : *records) batch.Put(meta_, key, value);
    next = std::max(next, id + 1);
  }
  PutStoreHeader(&batch, next);
  return WriteMeta(&batch, what);
}

void StoreImpl::PutStoreHeader(rocksdb::WriteBatch* batch, int64_t next_id) {
  std::string next;
  PutBigEndian64(&next, static_cast<uint64_t>(next_id));
  batch->Put(meta_, kNextIdKey, next);
  batch->Put(meta_, kStoreMarkerKey, kStoreMarker);
  PutIdentity(batch);
}

void StoreImpl::PutIdentity(rocksdb::WriteBatch* batch) {
  Result<std::string> identity = fs_->ReadWholeFile(path_ + "/IDENTITY");
  if (identity.ok() && !identity->empty())
    batch->Put(meta_, kIdentityKey, *identity);
}

}  // namespace ckptdb::storage
