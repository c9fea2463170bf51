#pragma once

// The one file system a store's files go through: RocksDB's (as its Env) and
// ckptdb's own (staged files, the commit journal, markers, directory syncs,
// direct chunk reads). Private to storage/.

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ckptdb/file_system_hooks.h"
#include "ckptdb/status.h"

namespace ckptdb::storage {

// Wraps the default file system to
// - ask the store's FileSystemHooks (Options::file_system_hooks) before
//   every operation, and tell them of the bytes each deletion frees;
// - hold back deletions once a write, sync, rename or link has failed. After a
//   failed MANIFEST sync RocksDB removes files that the MANIFEST on disk may
//   already name (the table file a failed ingestion linked in), which makes the
//   store unopenable. The store reopens its database after any failure, and
//   that recovery, which reads the files as they are, removes what is unused;
// - keep every change inside the store directory `root`: a path below it
//   whose directories include a symbolic link, or that names a symbolic link
//   or a special file (FIFO, socket, device), is neither written, renamed,
//   linked nor removed (Corruption naming it). ckptdb and RocksDB write only
//   regular files and directories there, so such an entry is not theirs;
// - open for reading only regular files: a FIFO in place of a store file
//   would block the open forever (Corruption naming it).
// Thread-safe.
class StoreFileSystem : public rocksdb::FileSystemWrapper {
 public:
  // `hooks`: asked before every operation (nullptr: none). `sync` false skips
  // the fsyncs of ckptdb's own operations. `root`: the store directory (none:
  // no path is checked for links).
  explicit StoreFileSystem(std::shared_ptr<FileSystemHooks> hooks,
                           bool sync = true, std::string root = "");

  static const char* kClassName() { return "CkptdbStoreFileSystem"; }
  const char* Name() const override { return kClassName(); }

  // A write, sync, rename or link failed since this file system was made.
  bool write_failed() const { return write_failed_.load(); }

  // ckptdb's own operations. Errors are IOError naming the operation and path.
  // Writes `contents` to `path` (replacing it) and syncs it.
  Status WriteFileSynced(const std::string& path, const std::string& contents);
  // NotFound when absent.
  Result<std::string> ReadWholeFile(const std::string& path);
  Status SyncDir(const std::string& dir);
  // Gives file `file` the second name `link` (best effort, for a removal
  // later): a failure (refused, or the name taken) is returned but not taken
  // for a failed write, since nothing the store relies on changed.
  Status LinkForRemoval(const std::string& file, const std::string& link);
  // Removes a file; absent (never there, or removed meanwhile) is not an
  // error.
  Status Remove(const std::string& path);
  // The names in directory `dir` (without "." and ".."); none when `dir` does
  // not exist.
  Result<std::vector<std::string>> ListDir(const std::string& dir);
  // The size of file `path`, or nullopt when it is not there. A name from a
  // listing may be gone by the time it is looked at (RocksDB removes obsolete
  // files in the background, a delete removes value files): that is the
  // expected result of the delete, not an error.
  Result<std::optional<uint64_t>> SizeIfPresent(const std::string& path);
  Status CreateDirIfMissing(const std::string& dir);
  // Asks whether a read of `path` (a direct chunk read) may run: the hooks'
  // verdict, as an IOError.
  Status CheckRead(const std::string& path);
  // Asks whether `path` may be opened for reading (a value file, read
  // directly): the hooks' verdict, as an IOError; Corruption naming it
  // when it is not a regular file.
  Status CheckOpenForRead(const std::string& path);

  // ---- Queries and direct opens of ckptdb's own --------------------------
  // Each asks the injector first (kStat, or kOpen for OpenForDirectRead) and
  // reports a failure as an IOError naming the operation and path: an error is
  // never mistaken for an absent file. A name from a listing that is gone by
  // the time it is looked at is an expected result, not an error.

  // Whether something (a file or a directory) is at `path`.
  Result<bool> Exists(const std::string& path);
  // Whether `path` is a directory (a symbolic link is followed); false when
  // nothing is there.
  Result<bool> IsDirectory(const std::string& path);
  using rocksdb::FileSystemWrapper::IsDirectory;
  // The size and last modification time (nanoseconds) of file `path`, or
  // nullopt when it is not there.
  struct FileStamp {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    // The file itself, whatever its name (two names of one file, hard links,
    // have the same).
    std::pair<uint64_t, uint64_t> device_and_inode;
  };
  Result<std::optional<FileStamp>> StampIfPresent(const std::string& path);
  // Opens the regular file at `path` for direct reads (pread) and returns its
  // descriptor, which the caller closes. Non-blocking, so that a FIFO in its
  // place cannot hang the open. `purpose` (" to read ...") follows the path
  // in errors: NotFound when nothing is there, Corruption naming the entry
  // when it (or a directory of its path) is not what ckptdb wrote there,
  // IOError otherwise (the injector's verdict or the open's errno).
  Result<int> OpenForDirectRead(const std::string& path,
                                const std::string& purpose = "");
  // ---- end of queries and direct opens ---------------------------------

  // Reads of `paths` are kept in memory (up to `max_bytes`) and later reads
  // of the same range answered from there, until UnpinReads. A RocksDB 7.8
  // ingestion aborts the process (an assertion) when reading a file's last
  // key fails after its first key was read; the store reads both itself
  // first, with reads pinned, so that the ingestion's reads cannot fail.
  void PinReadsOf(const std::set<std::string>& paths, uint64_t max_bytes);
  void UnpinReads();
  // Called by the wrappers: a pinned read, or false; a read to pin.
  bool ReadPinned(const std::string& path, uint64_t offset, size_t n,
                  rocksdb::Slice* result, char* scratch);
  void MaybePin(const std::string& path, uint64_t offset, size_t n,
                const rocksdb::Slice& data);

  // Called by the wrappers: the hooks' verdict on one operation.
  rocksdb::IOStatus Check(FileOp op, const std::string& path,
                          uint64_t bytes = 0);
  // The same; a failure counts as a failed write when `mutating`.
  rocksdb::IOStatus Check(FileOp op, const std::string& path, uint64_t bytes,
                          bool mutating);
  // `s`, the outcome of a call of kind `op` on `path`, remembered when it is a
  // failed write, sync, rename or link (of any file but the info log).
  rocksdb::IOStatus Done(FileOp op, const std::string& path,
                         rocksdb::IOStatus s);

  rocksdb::IOStatus NewSequentialFile(
      const std::string& f, const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSSequentialFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& f, const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewWritableFile(const std::string& f,
                                    const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& f, const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& f, const std::string& old,
      const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& f,
                                    const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& io_opts,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus GetChildren(const std::string& dir,
                                const rocksdb::IOOptions& io_opts,
                                std::vector<std::string>* r,
                                rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& f,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus Truncate(const std::string& fname, size_t size,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDir(const std::string& d,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDirIfMissing(const std::string& d,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteDir(const std::string& d,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus GetFileSize(const std::string& f,
                                const rocksdb::IOOptions& options, uint64_t* s,
                                rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& s, const std::string& t,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& s, const std::string& t,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;

 private:
  rocksdb::IOStatus Deleting(const std::string& path);
  // What a change to `path` may act on (EntryAt): Corruption naming `path`
  // unless each directory between root_ and it is a directory (not a link),
  // and it is absent or of kind `leaf`.
  enum class Leaf { kFile, kDirectory };
  rocksdb::IOStatus CheckConfined(const std::string& path, Leaf leaf,
                                  const char* what) const;

  const std::shared_ptr<FileSystemHooks> hooks_;
  const bool sync_;
  const std::string root_;
  std::mutex pin_mu_;
  std::set<std::string> pin_paths_;
  uint64_t pin_budget_ = 0;
  std::map<std::tuple<std::string, uint64_t, size_t>, std::string> pinned_;
  std::atomic<bool> write_failed_{false};
};

// `path` made absolute, with what exists of it resolved (symlinks, "." and
// ".."), and without a trailing slash; lexically when it cannot be resolved.
// A handle works on its store through this path, fixed at open: a later
// chdir, or a symlink on the way retargeted, does not move it to another
// directory.
std::string ResolvedPath(const std::string& path);

// The directory that holds the last part of `path`, trailing slashes aside:
// "." for a bare name ("ckpt", "ckpt/"), "/" for "/".
std::string ParentDirectory(const std::string& path);

// What is at `path` when it is not a regular file: "a directory", "a symbolic
// link", "a FIFO", "a socket" or "a device"; nullopt for a regular file or
// nothing. `follow`: a symbolic link at `path` is followed (its target is
// described).
std::optional<std::string> NotARegularFile(const std::string& path,
                                           bool follow);
// The same for a directory: nullopt for a directory (not a link) or nothing.
std::optional<std::string> NotADirectory(const std::string& path);

// RocksDB's status (or IOStatus) as ours, `context` first in its message.
Status FromRocks(const rocksdb::Status& s, const std::string& context);
// Whether `s` says a table file the database lists is not there: damage (the
// records and chunk locations it held have copies that reads fall back on),
// which FromRocks makes Corruption, not a failed read.
bool IsMissingTableFile(const rocksdb::Status& s);

}  // namespace ckptdb::storage
