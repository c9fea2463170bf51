// Opening a store: the directory, RocksDB, the store marker, and recovery
// against the commit journal.
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_checksum.h>
#include <rocksdb/transaction_log.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "storage/commit_journal.h"
#include "storage/file_checksums.h"
#include "storage/fork_aware_env.h"
#include "storage/info_log.h"
#include "storage/keys.h"
#include "storage/recovery.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;
namespace {

// Present in a store directory while it is being created.
constexpr char kCreatingFile[] = "CKPTDB_CREATING";
constexpr char kReserveFile[] = "CKPTDB_RESERVE";
// Room for an open's new MANIFEST and OPTIONS files, the journal and a
// delete's edits, with a wide margin.
constexpr size_t kReserveBytes = size_t{4} << 20;

// A small block cache whose allocator pools the buffers chunk reads land in.
std::shared_ptr<rocksdb::Cache> ChunkReadCache(
    std::shared_ptr<BufferPool> pool) {
  rocksdb::LRUCacheOptions cache;
  cache.capacity = size_t{8} << 20;
  cache.memory_allocator = std::move(pool);
  return rocksdb::NewLRUCache(cache);
}

// Files RocksDB writes while creating a database, before CURRENT names it: a
// creation interrupted then left only these (and the CREATING marker).
bool IsCreationFile(const std::string& name) {
  for (const char* prefix :
       {"LOCK", "LOG", "IDENTITY", "MANIFEST-", "OPTIONS", kCreatingFile}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return name.size() > 6 &&
         (name.ends_with(".dbtmp") || name.ends_with(".log"));
}

std::string Join(const std::set<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
  return out;
}

// What the names in a store's directory say about it.
struct DirectorySurvey {
  bool creating = false;   // the CREATING marker of a creation under way
  bool current = false;    // RocksDB's CURRENT
  bool data = false;       // files only a store that held data has
  bool foreign = false;    // a name no store or creation writes
  size_t table_files = 0;  // RocksDB's table files (*.sst)
};

DirectorySurvey Survey(const std::vector<std::string>& names) {
  DirectorySurvey s;
  for (const std::string& name : names) {
    s.creating |= name == kCreatingFile;
    s.current |= name == "CURRENT";
    s.table_files += name.ends_with(".sst");
    s.data |= s.table_files > 0 || name == kReserveFile || name == "values" ||
              name == "copies" || name.rfind("CKPTDB_JOURNAL", 0) == 0;
    s.foreign |= !IsCreationFile(name) && name != "CURRENT";
  }
  return s;
}

}  // namespace

bool IsNoSpace(const Status& s) {
  return s.IsIOError() && (s.message().find("No space") != std::string::npos ||
                           s.message().find("no space") != std::string::npos);
}

namespace {

// The names (hard links) of the regular file `path`, its bytes without
// blocks on the disk (holes), or nothing when it is absent or not one.
struct RegularFile {
  uint64_t names = 0;
  bool sparse = false;
};
std::optional<RegularFile> RegularFileAt(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return std::nullopt;
  return RegularFile{static_cast<uint64_t>(st.st_nlink),
                     static_cast<uint64_t>(st.st_blocks) * 512 <
                         static_cast<uint64_t>(st.st_size)};
}

// Why the reserve file at `path` keeps no room of the store's own on the
// disk: other names (its blocks are not freed when the store removes its
// name, and a write of it would change the other files), or holes.
std::optional<std::string> ReserveWithoutRoom(const std::string& path) {
  const std::optional<RegularFile> file = RegularFileAt(path);
  if (file && file->names > 1) {
    return "has " + std::to_string(file->names) +
           " names (hard links), so its room is not the store's own";
  }
  if (file && file->sparse)
    return "is sparse (some of its bytes have no blocks on the disk), so it "
           "keeps less room than its size";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> StoreImpl::ReserveDamage(StoreFileSystem& fs,
                                                    const std::string& path) {
  if (std::optional<std::string> why = ReserveWithoutRoom(path)) return why;
  // A short one is no damage: a write on a full disk leaves one.
  Result<std::string> bytes = fs.ReadWholeFile(path);
  if (bytes.ok() &&
      std::any_of(bytes->begin(), bytes->end(), [](char c) { return c != 0; }))
    return "holds other bytes than zeros";
  return std::nullopt;
}

void StoreImpl::EnsureReserve(bool repair) {
  std::shared_lock lock(mu_);
  (void)EnsureReserveLocked(repair);
}

std::optional<std::string> StoreImpl::ForeignReserve() const {
  const std::string path = path_ + "/" + kReserveFile;
  const std::optional<std::string> kind = NotARegularFile(path, false);
  if (!kind) return std::nullopt;
  return path + " is " + *kind +
         ", where the store keeps its reserve file "
         "(saves are refused until it is removed)";
}

Status StoreImpl::EnsureReserveLocked(bool repair) {
  if (options_.read_only || !db_) return Status::OK();
  const std::string path = path_ + "/" + kReserveFile;
  // Not ckptdb's (its file system neither writes nor removes it), and no
  // room at all: a save would fill the disk.
  if (std::optional<std::string> foreign = ForeignReserve())
    return Status::Corruption(*foreign + "; remove it");
  // Its own file system: a failure here (a disk still full) must not hold
  // back the database's deletions.
  StoreFileSystem fs(options_.file_system_hooks, /*sync=*/true, path_);
  // Best effort: a reserve that cannot be looked for is not written.
  const Result<std::optional<uint64_t>> size = fs.SizeIfPresent(path);
  if (!size.ok()) return Status::OK();
  // A short one is what a write on a full disk left. One with other names
  // is replaced, never written through (the other files would change).
  const std::optional<RegularFile> file = RegularFileAt(path);
  const bool linked = file && file->names > 1;
  const bool write = !size->has_value() || **size < kReserveBytes || linked ||
                     (repair && ReserveDamage(fs, path).has_value());
  if (!write) return Status::OK();
  if (linked) CKPTDB_RETURN_IF_ERROR(fs.Remove(path));
  Status written = fs.WriteFileSynced(path, std::string(kReserveBytes, '\0'));
  if (!written.ok()) {
    // Through another file system: one whose write failed refuses deletions.
    StoreFileSystem remover(options_.file_system_hooks, /*sync=*/true, path_);
    (void)remover.Remove(path);
  }
  return written;
}

Status StoreImpl::ReserveForSave(bool repair) {
  const Status written = EnsureReserveLocked(repair);
  if (written.ok()) return Status::OK();
  const std::string reserve = "its reserve (" +
                              std::to_string(kReserveBytes >> 20) + " MiB, " +
                              kReserveFile +
                              "), which keeps a delete and an open working on "
                              "a full disk; the save wrote nothing: ";
  if (IsNoSpace(written)) {
    return Status::IOError("store '" + path_ + "' has no room for " + reserve +
                           "delete a checkpoint or free space on the disk (" +
                           written.message() + ")");
  }
  return Status(written.code(), "store '" + path_ + "' cannot keep " + reserve +
                                    written.message());
}

Status StoreImpl::KeepIdentity() {
  const std::string path = path_ + "/IDENTITY";
  std::string recorded;
  const rocksdb::Status got =
      db_->Get(rocksdb::ReadOptions(), meta_, kIdentityKey, &recorded);
  if (got.IsNotFound()) {
    rocksdb::WriteBatch batch;
    PutIdentity(&batch);
    if (batch.Count() == 0) return Status::OK();
    return WriteMeta(&batch, "recording the database's IDENTITY file");
  }
  // Nothing depends on the file: a record that cannot be read is left to
  // the checks of the metadata, which name its damage.
  if (!got.ok()) return Status::OK();
  Result<std::string> file = fs_->ReadWholeFile(path);
  if (file.ok() && *file == recorded) return Status::OK();
  return fs_->WriteFileSynced(path, recorded)
      .WithContext("writing the database's IDENTITY file again");
}

void StoreImpl::ReportMarkerFiles(StoreReport* report) {
  const std::string reserve = path_ + "/" + kReserveFile;
  if (std::optional<std::string> foreign = ForeignReserve()) {
    report->foreign_entries.push_back(*foreign);
  } else if (std::optional<std::string> damage = ReserveDamage(*fs_, reserve)) {
    report->repairable_metadata.push_back(
        "the reserve file " + reserve + " " + *damage +
        "; no checkpoint uses it, and a read-write open writes it again");
  }
  std::string recorded;
  const rocksdb::Status got =
      db_->Get(rocksdb::ReadOptions(), meta_, kIdentityKey, &recorded);
  if (got.IsNotFound()) return;  // recorded by the next read-write open
  if (!got.ok()) {
    report->repairable_metadata.push_back(
        "the database's record of its IDENTITY file cannot be read (" +
        got.ToString() + "); a read-write open rewrites the metadata");
    return;
  }
  const std::string identity = path_ + "/IDENTITY";
  Result<std::string> file = fs_->ReadWholeFile(identity);
  if (file.ok() && *file == recorded) return;
  report->repairable_metadata.push_back(
      "the database's IDENTITY file " + identity +
      (file.ok() ? " differs from the identity the database recorded"
                 : " cannot be read (" + file.status().ToString() + ")") +
      "; no checkpoint uses it, and a read-write open writes it again");
}

bool StoreImpl::ReleaseReserve() {
  const std::string path = path_ + "/" + kReserveFile;
  // A fresh file system: the failed one holds deletions back.
  StoreFileSystem fs(options_.file_system_hooks, /*sync=*/true, path_);
  const Result<bool> present = fs.Exists(path);
  if (!present.ok() || !*present || !fs.Remove(path).ok()) return false;
  const Result<bool> left = fs.Exists(path);
  return left.ok() && !*left;
}

Status StoreImpl::OpenDbRetrying() {
  if (!options_.read_only) {
    Status s = OpenDb();
    // On a full disk the reserve makes room for the open's own writes.
    if (IsNoSpace(s) && ReleaseReserve()) s = OpenDb();
    if (s.ok()) EnsureReserve(/*repair=*/true);
    return s;
  }
  CKPTDB_ASSIGN_OR_RETURN(std::string before, VersionStamp());
  Status s = OpenDb();
  // Up to ~10 s of a writer's activity; past it, the last open stands (a
  // failure, or a view that the next Refresh replaces). A failure while no
  // writer changed anything is the store's state, not a race: it stands.
  constexpr int kTriesForQuiet = 3;
  for (int attempt = 0; attempt < 110; ++attempt) {
    Result<std::string> now_or = VersionStamp();
    if (!now_or.ok()) {
      if (db_) CloseDb();
      return now_or.status();
    }
    const std::string& now = *now_or;
    const bool changed_meanwhile = s.ok() && now != stamp_;
    const bool raced = (s.IsIOError() || s.IsCorruption()) && now != before;
    if (!changed_meanwhile && !raced) break;
    if (changed_meanwhile && attempt >= kTriesForQuiet) break;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(1 << attempt, 100)));
    if (db_) CloseDb();
    CKPTDB_ASSIGN_OR_RETURN(before, VersionStamp());
    s = OpenDb();
  }
  return s;
}

Result<bool> StoreImpl::PrepareDirectory() {
  CKPTDB_ASSIGN_OR_RETURN(bool exists, fs_->Exists(path_));
  // A read-write open locks the directory before it looks at what it holds
  // (WriterClaim): a new store's directory is made first, to be locked.
  if (claim_ && !exists && options_.create_if_missing) {
    CKPTDB_RETURN_IF_ERROR(fs_->CreateDirIfMissing(path_));
    exists = true;
  }
  bool is_dir = false;
  if (exists) {
    CKPTDB_ASSIGN_OR_RETURN(is_dir, fs_->IsDirectory(path_));
  }
  if (exists && !is_dir) {
    return Status::InvalidArgument(
        "'" + path_ + "' is not a directory, so not a ckptdb store");
  }
  if (claim_ && exists) CKPTDB_RETURN_IF_ERROR(claim_->LockDirectory());
  std::vector<std::string> names;
  if (exists) {
    CKPTDB_ASSIGN_OR_RETURN(names, fs_->ListDir(path_));
  }
  const auto [creating, current, data, foreign, table_files] = Survey(names);
  table_files_ = table_files;
  // A database counts unless a creation was interrupted before it held
  // anything: the creation writes the store marker into a table file before
  // it removes the CREATING marker. A stray CREATING file changes nothing.
  if (current && !(creating && !data)) return true;
  if (data) {
    return Status::Corruption("store '" + path_ +
                              "' holds checkpoint files but its database is "
                              "missing (no CURRENT file)");
  }
  if (foreign || (!names.empty() && !creating)) {
    return Status::InvalidArgument("'" + path_ +
                                   "' is not a ckptdb store (a non-empty "
                                   "directory without one)");
  }
  if (options_.read_only && creating) {
    return Status::NotFound("the creation of the store at '" + path_ +
                            "' was interrupted; open it read-write to redo it");
  }
  if (options_.read_only || !options_.create_if_missing) {
    return Status::NotFound("no ckptdb store at '" + path_ + "'");
  }
  // Only what an interrupted creation writes is here: start it again.
  CKPTDB_RETURN_IF_ERROR(StartCreation(names));
  return false;
}

Status StoreImpl::StartCreation(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (name != kCreatingFile)
      CKPTDB_RETURN_IF_ERROR(fs_->Remove(path_ + "/" + name));
  }
  // The directory is there: PrepareDirectory made it, to lock it.
  const std::string marker = (fs::path(path_) / kCreatingFile).string();
  CKPTDB_RETURN_IF_ERROR(fs_->WriteFileSynced(marker, ""));
  CKPTDB_RETURN_IF_ERROR(fs_->SyncDir(ParentDirectory(path_)));
  return fs_->SyncDir(path_);
}

Status StoreImpl::CheckColumnFamilies(const rocksdb::DBOptions& db_options) {
  std::vector<std::string> families;
  Status listed =
      FromRocks(rocksdb::DB::ListColumnFamilies(db_options, path_, &families),
                "reading '" + path_ + "'");
  auto has = [&](const char* name) {
    return std::find(families.begin(), families.end(), name) != families.end();
  };
  const bool ours = listed.ok() && has(kChunksCf) && has(kMetaCf);
  // An I/O error reading a file that is there says nothing of its contents.
  if (listed.IsIOError() &&
      listed.message().find("No such file") == std::string::npos)
    return listed;
  // A store whose journal exists was ckptdb's: a database that cannot be
  // read, or lacks its column families, lost its MANIFEST or CURRENT.
  bool journaled = false;
  if (!ours) {
    CKPTDB_ASSIGN_OR_RETURN(journaled, HasJournal());
  }
  if (journaled) {
    return Status::Corruption(
        "store '" + path_ +
        "': its database description (CURRENT, MANIFEST) is damaged or "
        "missing, so its checkpoints cannot be found: " +
        (listed.ok() ? std::string("no ckptdb column families")
                     : listed.message()));
  }
  if (listed.IsIOError()) return listed;
  if (!listed.ok()) {
    return Status::Corruption("store '" + path_ +
                              "' cannot be read: " + listed.message());
  }
  if (!ours) {
    return Status::InvalidArgument(
        "'" + path_ + "' is a RocksDB database but not a ckptdb store");
  }
  return Status::OK();
}

namespace {

// The write-ahead log holds nothing, at rest or while a writer writes
// (WriteMeta logs nothing), so bytes in one are damage. A read-write open's
// recovery refuses them (paranoid checks, then a rebuild); a read-only open,
// which runs without those checks, refuses them here.
Status CheckWriteAheadLogsEmpty(StoreFileSystem& fs, const std::string& dir) {
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDir(dir));
  for (const std::string& name : names) {
    if (!name.ends_with(".log")) continue;
    const std::string path = dir + "/" + name;
    CKPTDB_ASSIGN_OR_RETURN(std::optional<uint64_t> size,
                            fs.SizeIfPresent(path));  // none: rotated meanwhile
    if (size.value_or(0) > 0) {
      return Status::Corruption("store '" + dir + "': its write-ahead log " +
                                path + " holds " + std::to_string(*size) +
                                " bytes, where ckptdb writes none");
    }
  }
  return Status::OK();
}

}  // namespace

std::optional<Status> StoreImpl::WriterHoldsLock(const rocksdb::Status& s) {
  // RocksDB's messages for a lock another process (or handle) holds.
  const std::string why = s.ToString();
  if (!s.IsIOError() || why.find("lock") == std::string::npos ||
      (why.find("Resource temporarily unavailable") == std::string::npos &&
       why.find("hold by current process") == std::string::npos))
    return std::nullopt;
  const bool here = why.find("hold by current process") != std::string::npos;
  // RocksDB's table of the locks this process holds is inherited by a
  // forked child, with the paths its parent held when it forked.
  const char* holder =
      !here ? "another process"
      : InForkedChild()
          ? "the process this one was forked from, as it was at the fork "
            "(a forked child cannot take a lock its parent held then, "
            "even once the parent has closed the store)"
          : "another handle in this process (close it first)";
  return Status::FailedPrecondition(
      "store '" + path_ + "' is open for writing by " + holder + ": " + why);
}

Status StoreImpl::OpenRocks(bool has_db, bool read_only, bool lenient) {
  rocksdb::DBOptions db_options;
  db_options.env = env_.get();
  db_options.create_if_missing = !has_db;
  db_options.create_missing_column_families = !has_db;
  // Each checkpoint adds a few files per writer rank; keep descriptors bounded
  // (the table cache reopens evicted files on demand).
  db_options.max_open_files = 256;
  db_options.max_file_opening_threads = FileOpeningThreads(table_files_);
  db_options.max_manifest_file_size = 64 << 20;
  // Chunks are read in key order, which is file order: let the kernel read
  // ahead (RocksDB would otherwise advise random access on every table).
  db_options.advise_random_on_open = false;
  // Metadata is flushed into table files at once and nothing else is logged
  // (WriteMeta), so the write-ahead log is empty at rest: any damage to one is
  // an error at open, never a silently shorter history.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kAbsoluteConsistency;
  // A read-write open is strict: a table file that does not open fails it,
  // and it rebuilds the database (PrepareOrRebuild). A read-only open (a
  // listing, ckpt-db-dump, an evaluator beside a job), which cannot rebuild,
  // opens without them: their damage then fails only the calls that read
  // them (records fall back on their copies, a chunk table fails the loads
  // of its checkpoints), rather than every checkpoint's.
  db_options.paranoid_checks = !options_.read_only && !lenient;
  // After a failed write the store reopens the database itself; RocksDB's
  // own retries would only delay that (by a second each).
  db_options.max_bgerror_resume_count = 0;
  // A new MANIFEST is small: its default 4 MiB preallocation would double
  // the room an open needs on a nearly full disk.
  db_options.manifest_preallocation_size = 256 << 10;
  // Every table file's whole-file checksum in the MANIFEST (VerifyMetaTables
  // and Check compare the files with it): block checksums leave a table
  // footer's padding uncovered, where a flipped byte costs nothing but
  // `verify` must still see it.
  // (Not a view's: it checks the blocks of each table file before ingesting
  // it, and would read each whole once more for a checksum it keeps only
  // while it is open.)
  if (view_dir_.empty())
    db_options.file_checksum_gen_factory = NewWholeFileChecksumFactory();
  // A view's database (store_view.cc) writes nothing into the store.
  db_options.info_log = read_only || !view_dir_.empty()
                            ? NewNullInfoLog()
                            : NewInfoLog(fs_, path_);
  if (has_db) CKPTDB_RETURN_IF_ERROR(CheckColumnFamilies(db_options));
  if (has_db && options_.read_only)
    CKPTDB_RETURN_IF_ERROR(CheckWriteAheadLogsEmpty(*fs_, path_));
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kChunksCf, ChunkCfOptions(ChunkReadCache(pool_))},
      {kMetaCf, MetaCfOptions(meta_cache_)},
  };
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      read_only ? rocksdb::DB::OpenForReadOnly(db_options, DbDir(), descriptors,
                                               &handles_, &raw)
                : rocksdb::DB::Open(db_options, DbDir(), descriptors, &handles_,
                                    &raw);
  if (!s.ok()) {
    if (std::optional<Status> held = WriterHoldsLock(s)) return *held;
    return FromRocks(s, "opening store '" + path_ + "'");
  }
  db_.reset(raw);
  chunks_ = handles_[1];
  meta_ = handles_[2];
  files_ = std::make_unique<ChunkFileReader>(*db_, chunks_, fs_, pool_, path_);
  return Status::OK();
}

Result<bool> StoreImpl::HasJournal() {
  for (const std::string& copy : JournalPaths(path_)) {
    CKPTDB_ASSIGN_OR_RETURN(const bool present, fs_->Exists(copy));
    if (present) return true;
  }
  return false;
}

Status StoreImpl::CheckStoreMarker(bool has_db) {
  // The marker is written right after creation. A store without it is accepted
  // only while its metadata is empty: a creation interrupted before the marker.
  std::string marker;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), meta_, kStoreMarkerKey, &marker);
  // A store with a commit journal is ckptdb's even when damage to its
  // metadata took the marker: the copies of its records stand in, and a
  // read-write open rewrites the marker with them (RepairCopies).
  CKPTDB_ASSIGN_OR_RETURN(const bool journaled, HasJournal());
  if (!s.ok() && journaled) {
    // (RepairCopies finds the missing or damaged marker.)
  } else if (s.IsNotFound()) {
    CKPTDB_ASSIGN_OR_RETURN(auto records, RecordIds());
    if (!records.empty()) {
      return Status::InvalidArgument("'" + path_ +
                                     "' is not a ckptdb store (no store "
                                     "marker)");
    }
    if (!options_.read_only) {
      rocksdb::WriteBatch batch;
      batch.Put(meta_, kStoreMarkerKey, kStoreMarker);
      PutIdentity(&batch);
      CKPTDB_RETURN_IF_ERROR(WriteMeta(&batch, "creating store"));
    }
  } else if (!s.ok()) {
    return FromRocks(s, "reading the store marker of '" + path_ + "'");
  } else if (marker != kStoreMarker) {
    return Status::InvalidArgument("'" + path_ +
                                   "' is not a ckptdb store (unknown store "
                                   "marker)");
  }
  // The store is complete: from here on, a crash leaves a valid store. A
  // CREATING file beside a complete store is stray and changes nothing.
  const std::string creating = (fs::path(path_) / kCreatingFile).string();
  bool stray_marker = false;
  if (!options_.read_only && has_db) {
    CKPTDB_ASSIGN_OR_RETURN(stray_marker, fs_->Exists(creating));
  }
  if (!options_.read_only && (!has_db || stray_marker)) {
    CKPTDB_RETURN_IF_ERROR(fs_->Remove(creating));
    CKPTDB_RETURN_IF_ERROR(fs_->SyncDir(path_));
  }
  return Status::OK();
}

Status StoreImpl::OpenDb() {
  // Taken before opening, so that a commit racing with the open is seen by the
  // next Refresh.
  std::string stamp;
  if (options_.read_only) {
    CKPTDB_ASSIGN_OR_RETURN(stamp, VersionStamp());
  }
  fs_ = std::make_shared<StoreFileSystem>(options_.file_system_hooks,
                                          options_.sync, path_);
  env_ = ForkAwareEnv(rocksdb::NewCompositeEnv(fs_));
  // A read-only handle cannot rebuild a database whose description is
  // damaged, nor finish a rebuild cut short, but it can read through a
  // rebuild of its own.
  Status s = options_.read_only ? InterruptedRebuild() : Status::OK();
  if (s.ok()) s = OpenStoreDb();
  if (!s.ok() && options_.read_only) s = OpenView(s);
  if (!s.ok()) return s;
  stamp_ = stamp;
  // Every open sizes the metadata cache, as every commit and delete does: a
  // read-only handle would otherwise keep the blocks of record files deleted
  // since it last read them, up to the cache's 64 MiB.
  (void)FitMetaCache(0);
  return Status::OK();
}

Status StoreImpl::OpenStoreDb() {
  CKPTDB_ASSIGN_OR_RETURN(const bool has_db, PrepareOrRebuild());
  if (!options_.read_only && has_db)
    CKPTDB_RETURN_IF_ERROR(PreCheckOrRebuild(has_db));
  Status s = OpenRocks(has_db, options_.read_only);
  // Sized before the open's own reads (RecoverCommits reads every record),
  // and again after them (a recovery or a rewrite of the records changes
  // the live files).
  if (s.ok()) (void)FitMetaCache(0);
  if (s.ok()) s = CheckStoreMarker(has_db);
  if (s.ok()) s = RecoverCommits();
  if (!s.ok()) CloseDb();
  return s;
}

Status StoreImpl::PreCheckReadOnly(bool has_db) {
  Status s = OpenRocks(has_db, /*read_only=*/true);
  if (s.ok()) {
    auto journal = ReadJournal(*fs_, path_);
    s = journal.status();
    if (s.ok()) {
      catalogue_.Adopt(std::move(*journal));
      auto records = RecordIds();
      s = records.ok() ? CheckJournal(*records) : records.status();
      if (s.ok()) s = CheckRocksHoldsJournal();
    }
  }
  if (s.ok()) s = VerifyMetaTables();
  CloseDb();
  return s;
}

Result<std::set<int64_t>> StoreImpl::RecordIds() {
  uint64_t changes = 0;
  if (std::optional<std::set<int64_t>> known = memo_.RecordIds(&changes))
    return std::move(known).value();
  std::set<int64_t> ids;
  CKPTDB_RETURN_IF_ERROR(ForEachRecord([&](int64_t id, std::string_view) {
    ids.insert(id);
    return true;
  }));
  memo_.RememberRecordIds(ids, changes);
  return ids;
}

Status StoreImpl::CheckJournal(const std::set<int64_t>& records) {
  const std::optional<CommitJournal> journal = catalogue_.journal();
  if (!journal) return Status::OK();
  std::set<int64_t> lost;
  for (int64_t id : journal->committed) {
    if (!records.contains(id)) lost.insert(id);
  }
  if (lost.empty() || AdoptDeletionsAfterStaleJournal(records, lost))
    return Status::OK();
  std::string files;
  Result<std::vector<std::string>> names = fs_->ListDir(path_);
  if (names.ok()) std::sort(names->begin(), names->end());
  for (const std::string& name :
       names.ok() ? *names : std::vector<std::string>()) {
    if (name == "CURRENT" || name.rfind("MANIFEST-", 0) == 0 ||
        name.ends_with(".log"))
      files += (files.empty() ? "" : ", ") + name;
  }
  return Status::Corruption(
      "store '" + path_ + "': checkpoint id(s) " + Join(lost) +
      " committed (commit journal " + JournalPaths(path_)[0] +
      ") but their records are missing from the database: its files (" + files +
      ") are damaged or were replaced, or the journal copies are older ones "
      "put back (their high-water mark is " +
      std::to_string(journal->high_water) +
      "; the database has no record above it to prove that). Nothing was "
      "changed.");
}

Status StoreImpl::SaveJournal(CommitJournal journal) {
  return catalogue_.Save(*fs_, std::move(journal));
}

Status StoreImpl::RecoverCommits() {
  CKPTDB_ASSIGN_OR_RETURN(JournalState state, ReadJournal(*fs_, path_));
  const bool copies_damaged = !state.damaged.empty();
  catalogue_.Adopt(std::move(state));
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> records, RecordIds());
  CKPTDB_RETURN_IF_ERROR(CheckJournal(records));
  if (options_.read_only) return Status::OK();
  CKPTDB_RETURN_IF_ERROR(RepairCopies());
  CKPTDB_RETURN_IF_ERROR(KeepIdentity());
  CKPTDB_RETURN_IF_ERROR(Ingester().RepairBoundlessFiles(/*reingest=*/true));
  // Visible records only: those whose deletion began share nothing.
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> referenced, ReferencedIds());
  // The journal as CheckJournal left it (without the deletions a stale
  // journal missed).
  const Recovery recovery =
      PlanRecovery(catalogue_.journal(), records, LiveChunkIds(), referenced);
  for (int64_t id : recovery.records_to_delete)
    CKPTDB_RETURN_IF_ERROR(DeleteRecord(id));
  for (int64_t id : recovery.chunks_to_drop)
    CKPTDB_RETURN_IF_ERROR(DropChunks(id));
  if (recovery.journal_changed || copies_damaged) {
    CKPTDB_RETURN_IF_ERROR(SaveJournal(recovery.journal));
    catalogue_.ClearDamagedCopies();
  }
  KeepOptionsFiles();
  return RemoveLeftovers();
}

Status StoreImpl::EnsureOpen() {
  if (db_) return Status::OK();
  // A read-only handle (closed by Release, or by a failed open) opens as a
  // Refresh does, retrying while a writer is active. A read-write handle
  // reopens only the directory it opened (never a new store in its place).
  if (!options_.read_only) CKPTDB_RETURN_IF_ERROR(AtItsPath("reopening"));
  return (options_.read_only ? OpenDbRetrying() : OpenDb())
      .WithContext("reopening store '" + path_ + "'");
}

namespace {

constexpr std::string_view kOpenItWhereItIs =
    "Close the handle and open the store where it is now";

}  // namespace

std::string StoreImpl::NotAtItsPath() const {
  return "the directory of store '" + path_ +
         "' that this handle opened is no longer there (moved, removed or "
         "replaced while open)";
}

Status StoreImpl::AtItsPath(const char* what) const {
  if (!claim_ || claim_->StillAtItsPath()) return Status::OK();
  return Status::FailedPrecondition(std::string(what) + ": " + NotAtItsPath() +
                                    "; nothing was written. " +
                                    std::string(kOpenItWhereItIs));
}

Status StoreImpl::ReadAtItsPath(Status read) const {
  if (read.ok() || !(read.IsCorruption() || read.IsNotFound()) || !claim_ ||
      claim_->StillAtItsPath())
    return read;
  return Status::FailedPrecondition(
      "reading: " + NotAtItsPath() +
      ", so its chunks are not found through the path (" + read.message() +
      "). " + std::string(kOpenItWhereItIs));
}

}  // namespace ckptdb::storage
