// A read-only handle's view of a store whose database description (CURRENT,
// MANIFEST, write-ahead log) RocksDB cannot read. A read-write open rebuilds
// that description from the chunk table files and the copies of the records
// (store_rebuild.cc); a read-only open cannot write the store, so it builds
// the same database in a private temporary directory instead: the chunk table
// files are ingested through symbolic links to them (nothing of the store is
// copied or written), the records are written from their copies. The handle
// then lists and reads every checkpoint as a read-write open would after its
// rebuild, and `CheckStore` reports the damage. The directory is removed when
// the handle closes (or reopens); one whose process ended without closing is
// removed by the next view made beside it.
#include <fcntl.h>
#include <rocksdb/file_system.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "storage/column_families.h"
#include "storage/fork_aware_env.h"
#include "storage/keys.h"
#include "storage/record_copies.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;

constexpr char kViewPrefix[] = "ckptdb-view-";
// Where a view links a table file of the store before ingesting it.
constexpr char kLinkPrefix[] = "link-";
// A view directory without a database lock yet is being made; past this age,
// its maker is gone.
constexpr auto kUnlockedViewAge = std::chrono::minutes(10);

bool IsSymlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// The store's file system, except that a view's links to the store's table
// files are never opened for writing: RocksDB reopens an ingested file to sync
// it, which through the link would open the store's file for writing (and
// fail on a store the process may only read). NotSupported is how a file
// system tells RocksDB it has nothing to sync.
class ViewFileSystem : public rocksdb::FileSystemWrapper {
 public:
  ViewFileSystem(std::shared_ptr<rocksdb::FileSystem> store, std::string dir)
      : FileSystemWrapper(std::move(store)), dir_(std::move(dir) + "/") {}
  const char* Name() const override { return "CkptdbViewFileSystem"; }
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& f, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override {
    if (f.rfind(dir_, 0) == 0 && IsSymlink(f))
      return rocksdb::IOStatus::NotSupported(
          "a view's link to a table file of the store is never written");
    return target()->ReopenWritableFile(f, options, result, dbg);
  }

 private:
  const std::string dir_;
};

// Whether the view directory `dir` is in use: its database's lock is held
// (RocksDB holds a record lock on LOCK while the database is open, which an
// open-file-description lock conflicts with, in this process too), or it has
// no lock yet and is young enough to be in the making.
bool ViewInUse(const fs::path& dir) {
  const std::string lock = (dir / "LOCK").string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    std::error_code ec;
    const auto written = fs::last_write_time(dir, ec);
    return ec || fs::file_time_type::clock::now() - written < kUnlockedViewAge;
  }
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  const bool held = ::fcntl(fd, F_OFD_SETLK, &probe) != 0;
  ::close(fd);
  return held;
}

// The prefix of the names of the views this process makes.
std::string OwnPrefix() {
  return kViewPrefix + std::to_string(::getpid()) + "-";
}

// Removes the view directories under `tmp` whose handles are gone (a process
// killed while it read through one). Best effort. This process's own are
// never looked at: closing a descriptor of a LOCK file would release the
// lock the process's database holds on it.
void RemoveAbandonedViews(const fs::path& tmp) {
  std::error_code ec;
  const std::string own = OwnPrefix();
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kViewPrefix, 0) != 0 || name.rfind(own, 0) == 0) continue;
    if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    if (ViewInUse(entry.path())) continue;
    fs::remove_all(entry.path(), ec);  // removes links, never their targets
  }
}

// Whether `dir` is `store` or lies under it (both canonical).
bool Within(const fs::path& dir, const fs::path& store) {
  const auto [end, unused] =
      std::mismatch(store.begin(), store.end(), dir.begin(), dir.end());
  return end == store.end();
}

// A new private directory for a view of `store`: under $TMPDIR, else /tmp
// (and under /tmp when $TMPDIR is not a directory, or lies in the store,
// which a read-only open never writes).
Result<std::string> MakeViewDir(const std::string& store) {
  std::error_code ec;
  const fs::path canonical_store = fs::weakly_canonical(store, ec);
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tried;
  for (const std::string& candidate :
       {std::string(tmpdir ? tmpdir : ""), std::string("/tmp")}) {
    if (candidate.empty()) continue;
    const fs::path dir = fs::weakly_canonical(candidate, ec);
    std::string refused;
    if (ec || !fs::is_directory(dir, ec)) {
      refused = "not a directory";
    } else if (Within(dir, canonical_store)) {
      refused = "in the store, which a read-only open never writes";
    } else {
      RemoveAbandonedViews(dir);
      // mkdtemp replaces the trailing six characters with a unique name.
      std::string view = (dir / (OwnPrefix() + "XXXXXX")).string();
      if (::mkdtemp(view.data()) != nullptr) return view;
      refused = std::strerror(errno);
    }
    tried += (tried.empty() ? "" : ", ") + candidate + " (" + refused + ")";
  }
  return Status::IOError(
      "no directory for a read-only view of store '" + store + "': tried " +
      tried + "; set TMPDIR to a writable directory outside the store");
}

}  // namespace

const std::string& StoreImpl::DbDir() const {
  return view_dir_.empty() ? path_ : view_dir_;
}

Status StoreImpl::OpenView(const Status& why) {
  if (!why.IsCorruption() || !CanRebuildInPlace()) return WithRebuildHint(why);
  Result<std::string> dir = MakeViewDir(path_);
  Status s = dir.status();
  if (s.ok()) {
    view_dir_ = *dir;
    view_owner_ = ::getpid();
    env_ = ForkAwareEnv(rocksdb::NewCompositeEnv(
        std::make_shared<ViewFileSystem>(fs_, view_dir_)));
    s = OpenRocks(/*has_db=*/false, /*read_only=*/false);
  }
  if (s.ok()) s = LinkChunkTablesIntoView();
  const std::string what = "writing the records of store '" + path_ +
                           "' from their copies into " + view_dir_;
  if (s.ok()) {
    Result<JournalState> state = ReadJournal(*fs_, path_);
    s = state.status();
    if (s.ok() && !state->journal)
      s = Status::Corruption("the commit journal of store '" + path_ +
                             "' is gone");
    if (s.ok()) s = RestoreRecordsFromCopies(*state->journal, what);
  }
  if (s.ok()) s = CheckStoreMarker(/*has_db=*/true);
  if (s.ok()) s = RecoverCommits();
  if (s.ok()) {
    view_damage_ = why.message();
    return Status::OK();
  }
  CloseDb();
  const Status hinted = WithRebuildHint(why);
  return Status(hinted.code(), hinted.message() +
                                   " (reading it through a private rebuild "
                                   "failed too: " +
                                   s.ToString() + ")");
}

Status StoreImpl::InterruptedRebuild() {
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> staged,
                          StagedRebuildTables(*fs_, path_));
  if (staged.empty()) return Status::OK();
  return Status::Corruption(
      "a rebuild of the database of store '" + path_ +
      "' is under way or was cut short (a full disk, a killed process): " +
      std::to_string(staged.size()) +
      " chunk table file(s) are still staged under " + StagingDir(path_) +
      ", and the next read-write open finishes it");
}

Result<std::vector<std::string>> StoreImpl::ChunkTablesForView() {
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_->ListDir(path_));
  std::sort(names.begin(), names.end());
  // A rebuild cut short left chunk table files staged, and may have ingested
  // some of them under a second name in the directory: each is taken once,
  // by its staged name.
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> staged,
                          StagedRebuildTables(*fs_, path_));
  CKPTDB_ASSIGN_OR_RETURN(const auto staged_files, FileIdsOf(*fs_, staged));
  std::vector<std::string> tables;
  for (const std::string& name : names) {
    if (!name.ends_with(".sst")) continue;
    const std::string table = path_ + "/" + name;
    CKPTDB_ASSIGN_OR_RETURN(auto stamp, fs_->StampIfPresent(table));
    if (stamp && staged_files.contains(stamp->device_and_inode)) continue;
    tables.push_back(table);
  }
  tables.insert(tables.end(), staged.begin(), staged.end());
  return tables;
}

Status StoreImpl::LinkChunkTablesIntoView() {
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> tables,
                          ChunkTablesForView());
  rocksdb::IngestExternalFileOptions ingest;
  // The link moves into the database; its target, the store's file, is
  // neither copied nor written (a global sequence number, should one be
  // given, stays in the view's MANIFEST).
  ingest.move_files = true;
  ingest.failed_move_fall_back_to_copy = false;
  ingest.write_global_seqno = false;
  for (const std::string& table : tables) {
    const std::string name = table.substr(table.rfind('/') + 1);
    if (NotARegularFile(table, /*follow=*/false)) continue;
    CKPTDB_ASSIGN_OR_RETURN(const std::optional<uint64_t> size,
                            fs_->SizeIfPresent(table));
    if (size == 0u) {
      // Left by a write cut short (a rebuild's, or a flush's, on a full
      // disk): no chunk was ever in it.
      view_empty_tables_.push_back(table);
      continue;
    }
    const std::optional<std::string> family =
        TableFileFamily(env_.get(), table);
    if (!family) {
      view_unread_tables_.push_back(table + " (its properties cannot be read)");
      continue;
    }
    if (!IsChunkTableFamily(*family)) continue;  // records come from copies
    const std::string link = view_dir_ + "/" + kLinkPrefix + name;
    if (::symlink(table.c_str(), link.c_str()) != 0) {
      const int err = errno;
      return Status::IOError("linking " + link + " to " + table + ": " +
                             std::strerror(err));
    }
    // As a rebuild does (IngestRebuildTables): a table whose blocks fail is
    // not taken, nor one that overlaps what the view holds.
    Status taken = BlocksIntact(table, kChunksCf);
    if (!taken.ok() && !taken.IsCorruption()) return taken;
    if (taken.ok()) {
      taken = FromRocks(db_->IngestExternalFile(chunks_, {link}, ingest),
                        "ingesting " + table + " into a view");
    }
    if (taken.ok()) continue;
    ::unlink(link.c_str());
    if (IsNoSpace(taken)) return taken;
    view_unread_tables_.push_back(table + " (" + taken.ToString() + ")");
  }
  return Status::OK();
}

void StoreImpl::RemoveView() {
  if (view_dir_.empty()) return;
  // A forked child leaves its parent's view alone.
  if (::getpid() == view_owner_) {
    std::error_code ec;
    fs::remove_all(view_dir_, ec);  // removes links, never their targets
  }
  view_dir_.clear();
  view_damage_.clear();
  view_unread_tables_.clear();
  view_empty_tables_.clear();
}

void StoreImpl::ReportView(StoreReport* report) const {
  if (view_dir_.empty()) return;
  report->repairable_metadata.push_back(
      "the database description of store '" + path_ +
      "' (CURRENT, MANIFEST, write-ahead log) cannot be read: " + view_damage_ +
      "; this read-only handle reads through a private rebuild from the table "
      "files and the copies of the records (in a temporary directory, removed "
      "when it closes), and a read-write open rebuilds the store's, keeping "
      "the damaged files under " +
      DamagedDir(path_));
  for (const std::string& table : view_unread_tables_) {
    report->repairable_metadata.push_back(
        "the chunk table file " + table +
        " is not read through the private rebuild: the loads of its chunks "
        "fail until a read-write open, which writes it again from the copies "
        "of its chunk locations");
  }
  for (const std::string& table : view_empty_tables_) {
    report->repairable_metadata.push_back(
        "the table file " + table +
        " is empty (left by a write cut short): it holds no chunks, so no "
        "load misses it, and a read-write open sets it aside");
  }
}

}  // namespace ckptdb::storage
