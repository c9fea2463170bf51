#include "storage/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <utility>

namespace ckptdb::storage {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// Tries of a read before its error is returned.
constexpr int kReadAttempts = 3;

bool Mutates(FileOp op) { return (kMutatingFileOps & FileOpMask(op)) != 0; }

// RocksDB's info log: its failures lose diagnostics, never data.
bool IsInfoLog(const std::string& path) {
  const size_t slash = path.rfind('/');
  return path.compare(slash == std::string::npos ? 0 : slash + 1, 3, "LOG") ==
         0;
}

// Every call that reaches the disk asks the file system first.
class WritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  WritableFile(std::unique_ptr<rocksdb::FSWritableFile> file,
               StoreFileSystem* fs, std::string path)
      : FSWritableFileOwnerWrapper(std::move(file)),
        fs_(fs),
        path_(std::move(path)) {}

  IOStatus Append(const Slice& data, const IOOptions& o,
                  IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kWrite, path_, data.size());
    return fs_->Done(FileOp::kWrite, path_,
                     s.ok() ? target()->Append(data, o, dbg) : s);
  }
  IOStatus Append(const Slice& data, const IOOptions& o,
                  const rocksdb::DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kWrite, path_, data.size());
    return fs_->Done(FileOp::kWrite, path_,
                     s.ok() ? target()->Append(data, o, info, dbg) : s);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kWrite, path_, data.size());
    return fs_->Done(
        FileOp::kWrite, path_,
        s.ok() ? target()->PositionedAppend(data, offset, o, dbg) : s);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& o,
                            const rocksdb::DataVerificationInfo& info,
                            IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kWrite, path_, data.size());
    return fs_->Done(
        FileOp::kWrite, path_,
        s.ok() ? target()->PositionedAppend(data, offset, o, info, dbg) : s);
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o,
                    IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kWrite, path_);
    return fs_->Done(FileOp::kWrite, path_,
                     s.ok() ? target()->Truncate(size, o, dbg) : s);
  }
  IOStatus Close(const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kClose, path_);
    // The descriptor is released even when the close "fails".
    IOStatus closed = target()->Close(o, dbg);
    return fs_->Done(FileOp::kClose, path_, s.ok() ? closed : s);
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kSync, path_);
    return fs_->Done(FileOp::kSync, path_, s.ok() ? target()->Sync(o, dbg) : s);
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kSync, path_);
    return fs_->Done(FileOp::kSync, path_,
                     s.ok() ? target()->Fsync(o, dbg) : s);
  }
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& o,
                     IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kSync, path_);
    return fs_->Done(FileOp::kSync, path_,
                     s.ok() ? target()->RangeSync(offset, nbytes, o, dbg) : s);
  }

 private:
  StoreFileSystem* fs_;
  std::string path_;
};

class RandomAccessFile : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  RandomAccessFile(std::unique_ptr<rocksdb::FSRandomAccessFile> file,
                   StoreFileSystem* fs, std::string path)
      : FSRandomAccessFileOwnerWrapper(std::move(file)),
        fs_(fs),
        path_(std::move(path)) {}

  // A failed read is tried again a few times: an error that passes (a
  // transient one) then costs nothing, and a RocksDB ingestion, which aborts
  // the process when a read fails at the wrong moment, never sees it.
  IOStatus Read(uint64_t offset, size_t n, const IOOptions& o, Slice* result,
                char* scratch, IODebugContext* dbg) const override {
    if (fs_->ReadPinned(path_, offset, n, result, scratch))
      return IOStatus::OK();
    IOStatus s;
    for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
      s = fs_->Check(FileOp::kRead, path_);
      if (s.ok()) s = target()->Read(offset, n, o, result, scratch, dbg);
      if (s.ok()) break;
    }
    if (s.ok()) fs_->MaybePin(path_, offset, n, *result);
    return s;
  }
  IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs,
                     const IOOptions& o, IODebugContext* dbg) override {
    // Each request is a read; a failed one fails alone, as on a disk.
    for (size_t i = 0; i < num_reqs; ++i) {
      reqs[i].status = Read(reqs[i].offset, reqs[i].len, o, &reqs[i].result,
                            reqs[i].scratch, dbg);
    }
    return IOStatus::OK();
  }

 private:
  StoreFileSystem* fs_;
  std::string path_;
};

class SequentialFile : public rocksdb::FSSequentialFileOwnerWrapper {
 public:
  SequentialFile(std::unique_ptr<rocksdb::FSSequentialFile> file,
                 StoreFileSystem* fs, std::string path)
      : FSSequentialFileOwnerWrapper(std::move(file)),
        fs_(fs),
        path_(std::move(path)) {}

  IOStatus Read(size_t n, const IOOptions& o, Slice* result, char* scratch,
                IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kRead, path_);
    return fs_->Done(FileOp::kRead, path_,
                     s.ok() ? target()->Read(n, o, result, scratch, dbg) : s);
  }
  IOStatus PositionedRead(uint64_t offset, size_t n, const IOOptions& o,
                          Slice* result, char* scratch,
                          IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kRead, path_);
    return fs_->Done(
        FileOp::kRead, path_,
        s.ok() ? target()->PositionedRead(offset, n, o, result, scratch, dbg)
               : s);
  }

 private:
  StoreFileSystem* fs_;
  std::string path_;
};

class Directory : public rocksdb::FSDirectoryWrapper {
 public:
  Directory(std::unique_ptr<rocksdb::FSDirectory> dir, StoreFileSystem* fs,
            std::string path)
      : FSDirectoryWrapper(std::move(dir)), fs_(fs), path_(std::move(path)) {}

  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = fs_->Check(FileOp::kSyncDir, path_);
    return fs_->Done(FileOp::kSyncDir, path_,
                     s.ok() ? FSDirectoryWrapper::Fsync(o, dbg) : s);
  }
  IOStatus FsyncWithDirOptions(
      const IOOptions& o, IODebugContext* dbg,
      const rocksdb::DirFsyncOptions& dir_options) override {
    IOStatus s = fs_->Check(FileOp::kSyncDir, path_);
    return fs_->Done(
        FileOp::kSyncDir, path_,
        s.ok() ? FSDirectoryWrapper::FsyncWithDirOptions(o, dbg, dir_options)
               : s);
  }

 private:
  StoreFileSystem* fs_;
  std::string path_;
};

// Opens with `open` once the hooks allow it, and wraps what it returns.
// A failed open for reading says nothing of what is on disk: only opens for
// writing (and of directories, to sync them) count as failed writes.
template <typename Wrapped, typename File, typename Open>
IOStatus OpenChecked(StoreFileSystem* fs, const std::string& path,
                     std::unique_ptr<File>* out, Open&& open) {
  constexpr bool kForWrite = !std::is_same_v<Wrapped, SequentialFile> &&
                             !std::is_same_v<Wrapped, RandomAccessFile>;
  IOStatus s = fs->Check(FileOp::kOpen, path, 0, kForWrite);
  if (!s.ok()) return s;
  std::unique_ptr<File> file;
  s = open(&file);
  if (s.ok()) *out = std::make_unique<Wrapped>(std::move(file), fs, path);
  return kForWrite ? fs->Done(FileOp::kOpen, path, s) : s;
}

// The kind of a directory entry of mode `mode`, as a phrase.
std::string KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "a special file";
}

std::optional<mode_t> ModeOf(const std::string& path, bool follow) {
  struct stat st;
  const int r = follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (r != 0) return std::nullopt;
  return st.st_mode;
}

// How CheckReadable's refusals end: FromRocks makes them Corruption.
constexpr char kNotRegular[] =
    ", not a regular file: it is not what ckptdb wrote there";
constexpr char kNotADirectory[] =
    ", not a directory: it is not what ckptdb made there";

// A read of anything but a regular file (a FIFO would block the open
// forever): an IOError naming it (RocksDB asserts that a failed read of some
// of its files is one), which FromRocks turns into Corruption.
IOStatus CheckReadable(const std::string& path) {
  const std::optional<std::string> kind = NotARegularFile(path, true);
  if (kind) {
    return IOStatus::IOError("store file " + path + " is " + *kind +
                             kNotRegular);
  }
  // A path through something that is not a directory names that entry.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 || errno != ENOTDIR) return IOStatus::OK();
  for (std::filesystem::path dir = std::filesystem::path(path).parent_path();
       dir.has_relative_path(); dir = dir.parent_path()) {
    const std::optional<mode_t> mode = ModeOf(dir.string(), true);
    if (mode && !S_ISDIR(*mode)) {
      return IOStatus::IOError("store file " + path + " lies under " +
                               dir.string() + ", which is " + KindOf(*mode) +
                               kNotADirectory);
    }
  }
  return IOStatus::OK();
}

}  // namespace

std::string ResolvedPath(const std::string& path) {
  namespace sfs = std::filesystem;
  std::error_code ec;
  sfs::path p = sfs::absolute(path, ec);
  if (ec) p = sfs::path(path);
  sfs::path resolved = sfs::weakly_canonical(p, ec);
  if (ec) resolved = p.lexically_normal();
  // weakly_canonical stops at a link whose target does not exist yet (a
  // store's first open through `/ckpt -> /scratch/job/ckpt`): the store is
  // made where the link points, as the shell's `mkdir -p` of the link's
  // target would. A link loop stays as it is (its open fails naming it).
  for (int hops = 0; hops < 40 && sfs::is_symlink(resolved, ec); ++hops) {
    const sfs::path target = sfs::read_symlink(resolved, ec);
    if (ec) break;
    const sfs::path next = sfs::weakly_canonical(
        target.is_absolute() ? target : resolved.parent_path() / target, ec);
    if (ec) break;
    resolved = next;
  }
  std::string out = resolved.string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string ParentDirectory(const std::string& path) {
  std::filesystem::path p(path);
  while (p.has_relative_path() && !p.has_filename()) p = p.parent_path();
  const std::filesystem::path parent = p.parent_path();
  return parent.empty() ? "." : parent.string();
}

std::optional<std::string> NotARegularFile(const std::string& path,
                                           bool follow) {
  const std::optional<mode_t> mode = ModeOf(path, follow);
  if (!mode || S_ISREG(*mode)) return std::nullopt;
  return KindOf(*mode);
}

std::optional<std::string> NotADirectory(const std::string& path) {
  const std::optional<mode_t> mode = ModeOf(path, false);
  if (!mode || S_ISDIR(*mode)) return std::nullopt;
  return KindOf(*mode);
}

bool IsMissingTableFile(const rocksdb::Status& s) {
  if (!s.IsIOError() && !s.IsPathNotFound()) return false;
  const std::string why = s.ToString();
  return why.find("No such file or directory") != std::string::npos &&
         (why.find(".sst") != std::string::npos ||
          why.find(".ldb") != std::string::npos);
}

Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::OK();
  const std::string msg = context + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(msg);
  if (s.IsCorruption()) return Status::Corruption(msg);
  if (IsMissingTableFile(s))
    return Status::Corruption(msg + " (a table file the database lists)");
  // A store file that is not a regular file (CheckReadable) is damage.
  if (s.IsIOError() && (msg.find(kNotRegular) != std::string::npos ||
                        msg.find(kNotADirectory) != std::string::npos))
    return Status::Corruption(msg);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(msg);
  if (s.IsIOError()) return Status::IOError(msg);
  return Status::Internal(msg);
}

StoreFileSystem::StoreFileSystem(std::shared_ptr<FileSystemHooks> hooks,
                                 bool sync, std::string root)
    : FileSystemWrapper(rocksdb::FileSystem::Default()),
      hooks_(std::move(hooks)),
      sync_(sync),
      root_(std::move(root)) {}

IOStatus StoreFileSystem::CheckConfined(const std::string& path, Leaf leaf,
                                        const char* what) const {
  if (root_.empty() || path.size() <= root_.size() ||
      path.compare(0, root_.size(), root_) != 0 || path[root_.size()] != '/')
    return IOStatus::OK();
  std::vector<std::string> parts;
  for (const auto& part :
       std::filesystem::path(path.substr(root_.size() + 1))) {
    const std::string name = part.string();
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      return IOStatus::Corruption(std::string("not ") + what + " " + path +
                                  ": the path leaves store " + root_);
    }
    parts.push_back(name);
  }
  std::string at = root_;
  for (size_t i = 0; i < parts.size(); ++i) {
    at += "/" + parts[i];
    const bool last = i + 1 == parts.size();
    const std::optional<std::string> kind =
        last && leaf == Leaf::kFile ? NotARegularFile(at, /*follow=*/false)
                                    : NotADirectory(at);
    if (!kind) continue;
    return IOStatus::Corruption(
        std::string("not ") + what + " " + path + ": " + at + " is " + *kind +
        ", which ckptdb never makes in a store, so it is not ckptdb's and is "
        "left alone (move it out of the store to go on)");
  }
  return IOStatus::OK();
}

IOStatus StoreFileSystem::Done(FileOp op, const std::string& path, IOStatus s) {
  if (!s.ok() && Mutates(op) && !IsInfoLog(path)) write_failed_ = true;
  return s;
}

IOStatus StoreFileSystem::Check(FileOp op, const std::string& path,
                                uint64_t bytes) {
  return Check(op, path, bytes, Mutates(op));
}

IOStatus StoreFileSystem::Check(FileOp op, const std::string& path,
                                uint64_t bytes, bool mutating) {
  const int error = hooks_ ? hooks_->BeforeOperation(op, path, bytes) : 0;
  if (error == 0) return IOStatus::OK();
  if (mutating && !IsInfoLog(path)) write_failed_ = true;
  const std::string what = std::string("While ") + FileOpName(op) + " " + path +
                           " (refused by Options::file_system_hooks)";
  if (error == ENOSPC) return IOStatus::NoSpace(what, std::strerror(error));
  return IOStatus::IOError(what, std::strerror(error));
}

// ckptdb's own operations --------------------------------------------------

Status StoreFileSystem::WriteFileSynced(const std::string& path,
                                        const std::string& contents) {
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOOptions io;
  IOStatus s = NewWritableFile(path, rocksdb::FileOptions(), &file, nullptr);
  if (s.ok()) s = file->Append(contents, io, nullptr);
  if (s.ok() && sync_) s = file->Fsync(io, nullptr);
  IOStatus closed = file ? file->Close(io, nullptr) : IOStatus::OK();
  if (s.ok()) s = closed;
  if (!s.ok()) write_failed_ = true;
  return FromRocks(s, "writing " + path);
}

Result<std::string> StoreFileSystem::ReadWholeFile(const std::string& path) {
  std::unique_ptr<rocksdb::FSSequentialFile> file;
  IOStatus s = NewSequentialFile(path, rocksdb::FileOptions(), &file, nullptr);
  if (s.IsPathNotFound() || s.IsNotFound())
    return Status::NotFound("no file " + path);
  CKPTDB_RETURN_IF_ERROR(FromRocks(s, "reading " + path));
  std::string out;
  std::string scratch(64 << 10, '\0');
  for (;;) {
    Slice got;
    CKPTDB_RETURN_IF_ERROR(FromRocks(
        file->Read(scratch.size(), IOOptions(), &got, scratch.data(), nullptr),
        "reading " + path));
    if (got.empty()) break;
    out.append(got.data(), got.size());
  }
  return out;
}

Status StoreFileSystem::SyncDir(const std::string& dir) {
  if (!sync_) return Status::OK();
  std::unique_ptr<rocksdb::FSDirectory> handle;
  IOStatus s = NewDirectory(dir, IOOptions(), &handle, nullptr);
  if (s.ok()) s = handle->Fsync(IOOptions(), nullptr);
  if (!s.ok()) write_failed_ = true;
  return FromRocks(s, "syncing directory " + dir);
}

Status StoreFileSystem::Remove(const std::string& path) {
  if (FileExists(path, IOOptions(), nullptr).IsNotFound()) return Status::OK();
  const IOStatus s = DeleteFile(path, IOOptions(), nullptr);
  if (s.IsNotFound() || s.IsPathNotFound()) return Status::OK();
  return FromRocks(s, "removing " + path);
}

Result<std::vector<std::string>> StoreFileSystem::ListDir(
    const std::string& dir) {
  std::vector<std::string> names;
  const IOStatus s = GetChildren(dir, IOOptions(), &names, nullptr);
  if (s.IsNotFound() || s.IsPathNotFound()) return std::vector<std::string>();
  CKPTDB_RETURN_IF_ERROR(FromRocks(s, "listing " + dir));
  std::erase_if(names,
                [](const std::string& n) { return n == "." || n == ".."; });
  return names;
}

Result<std::optional<uint64_t>> StoreFileSystem::SizeIfPresent(
    const std::string& path) {
  uint64_t size = 0;
  const IOStatus s = GetFileSize(path, IOOptions(), &size, nullptr);
  if (s.IsNotFound() || s.IsPathNotFound()) return std::optional<uint64_t>();
  CKPTDB_RETURN_IF_ERROR(FromRocks(s, "reading the size of " + path));
  return std::optional<uint64_t>(size);
}

Status StoreFileSystem::CreateDirIfMissing(const std::string& dir) {
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  if (!parent.empty() && parent != dir &&
      FileExists(parent, IOOptions(), nullptr).IsNotFound()) {
    CKPTDB_RETURN_IF_ERROR(CreateDirIfMissing(parent));
  }
  const Status s = FromRocks(CreateDirIfMissing(dir, IOOptions(), nullptr),
                             "creating directory " + dir);
  std::error_code ec;
  if (s.ok() || !std::filesystem::is_symlink(dir, ec)) return s;
  // A link that leads to no directory and cannot be followed to make one.
  const std::filesystem::path target = std::filesystem::read_symlink(dir, ec);
  return Status(s.code(), s.message() + ": " + dir + " is a symbolic link to " +
                              target.string() +
                              ", which leads nowhere that can be made (a loop "
                              "of links, or a link through another link to "
                              "nothing): make the directory it should name");
}

void StoreFileSystem::PinReadsOf(const std::set<std::string>& paths,
                                 uint64_t max_bytes) {
  std::lock_guard lock(pin_mu_);
  pin_paths_ = paths;
  pin_budget_ = max_bytes;
  pinned_.clear();
}

void StoreFileSystem::UnpinReads() {
  std::lock_guard lock(pin_mu_);
  pin_paths_.clear();
  pinned_.clear();
}

bool StoreFileSystem::ReadPinned(const std::string& path, uint64_t offset,
                                 size_t n, Slice* result, char* scratch) {
  std::lock_guard lock(pin_mu_);
  if (pinned_.empty()) return false;
  auto found = pinned_.find({path, offset, n});
  if (found == pinned_.end()) return false;
  std::memcpy(scratch, found->second.data(), found->second.size());
  *result = Slice(scratch, found->second.size());
  return true;
}

void StoreFileSystem::MaybePin(const std::string& path, uint64_t offset,
                               size_t n, const Slice& data) {
  std::lock_guard lock(pin_mu_);
  if (!pin_paths_.contains(path) || data.size() > pin_budget_) return;
  pin_budget_ -= data.size();
  pinned_.emplace(std::make_tuple(path, offset, n), data.ToString());
}

Status StoreFileSystem::CheckRead(const std::string& path) {
  return FromRocks(Check(FileOp::kRead, path), "reading " + path);
}

Status StoreFileSystem::CheckOpenForRead(const std::string& path) {
  IOStatus s = Check(FileOp::kOpen, path, 0, /*mutating=*/false);
  if (s.ok()) s = CheckReadable(path);
  return FromRocks(s, "opening " + path);
}

// Queries and direct opens of ckptdb's own ---------------------------------

Result<bool> StoreFileSystem::Exists(const std::string& path) {
  const std::string what = "checking whether " + path + " exists";
  CKPTDB_RETURN_IF_ERROR(FromRocks(Check(FileOp::kStat, path), what));
  const IOStatus s = target()->FileExists(path, IOOptions(), nullptr);
  if (s.IsNotFound() || s.IsPathNotFound()) return false;
  CKPTDB_RETURN_IF_ERROR(FromRocks(s, what));
  return true;
}

Result<bool> StoreFileSystem::IsDirectory(const std::string& path) {
  const std::string what = "checking whether " + path + " is a directory";
  CKPTDB_RETURN_IF_ERROR(FromRocks(Check(FileOp::kStat, path), what));
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  if (errno == ENOENT || errno == ENOTDIR) return false;
  return Status::IOError(what + ": " + std::strerror(errno));
}

Result<std::optional<StoreFileSystem::FileStamp>>
StoreFileSystem::StampIfPresent(const std::string& path) {
  const std::string what = "reading the size and time of " + path;
  CKPTDB_RETURN_IF_ERROR(FromRocks(Check(FileOp::kStat, path), what));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::optional<FileStamp>();
    return Status::IOError(what + ": " + std::strerror(errno));
  }
  return std::optional<FileStamp>(FileStamp{
      static_cast<uint64_t>(st.st_size),
      int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
      {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}});
}

Result<int> StoreFileSystem::OpenForDirectRead(const std::string& path,
                                               const std::string& purpose) {
  CKPTDB_RETURN_IF_ERROR(CheckOpenForRead(path));
  const std::string what = "opening " + path + purpose;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return Status::NotFound(what + ": " + std::strerror(err));
    if (err == ENOTDIR) {
      return Status::Corruption(what +
                                ": a directory of its path is not a directory");
    }
    return Status::IOError(what + ": " + std::strerror(err));
  }
  // Replaced since CheckOpenForRead looked (a FIFO opens without blocking).
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError(what + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Corruption("store file " + path + " is " +
                              KindOf(st.st_mode) + kNotRegular);
  }
  return fd;
}

// RocksDB's operations -----------------------------------------------------

IOStatus StoreFileSystem::NewSequentialFile(
    const std::string& f, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSSequentialFile>* r, IODebugContext* dbg) {
  return OpenChecked<SequentialFile>(this, f, r, [&](auto* file) {
    IOStatus s = CheckReadable(f);
    return s.ok() ? target()->NewSequentialFile(f, opts, file, dbg) : s;
  });
}

IOStatus StoreFileSystem::NewRandomAccessFile(
    const std::string& f, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSRandomAccessFile>* r, IODebugContext* dbg) {
  return OpenChecked<RandomAccessFile>(this, f, r, [&](auto* file) {
    IOStatus s = CheckReadable(f);
    return s.ok() ? target()->NewRandomAccessFile(f, opts, file, dbg) : s;
  });
}

IOStatus StoreFileSystem::NewWritableFile(
    const std::string& f, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* r, IODebugContext* dbg) {
  return OpenChecked<WritableFile>(this, f, r, [&](auto* file) {
    IOStatus s = CheckConfined(f, Leaf::kFile, "writing");
    return s.ok() ? target()->NewWritableFile(f, opts, file, dbg) : s;
  });
}

IOStatus StoreFileSystem::ReopenWritableFile(
    const std::string& f, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* r, IODebugContext* dbg) {
  return OpenChecked<WritableFile>(this, f, r, [&](auto* file) {
    IOStatus s = CheckConfined(f, Leaf::kFile, "writing");
    return s.ok() ? target()->ReopenWritableFile(f, opts, file, dbg) : s;
  });
}

IOStatus StoreFileSystem::ReuseWritableFile(
    const std::string& f, const std::string& old,
    const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* r, IODebugContext* dbg) {
  return OpenChecked<WritableFile>(this, f, r, [&](auto* file) {
    IOStatus s = CheckConfined(f, Leaf::kFile, "writing");
    return s.ok() ? target()->ReuseWritableFile(f, old, opts, file, dbg) : s;
  });
}

IOStatus StoreFileSystem::NewRandomRWFile(
    const std::string& f, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSRandomRWFile>* r, IODebugContext* dbg) {
  IOStatus s = Check(FileOp::kOpen, f);
  if (s.ok()) s = CheckConfined(f, Leaf::kFile, "writing");
  return s.ok() ? target()->NewRandomRWFile(f, opts, r, dbg) : s;
}

IOStatus StoreFileSystem::NewDirectory(const std::string& name,
                                       const IOOptions& io_opts,
                                       std::unique_ptr<rocksdb::FSDirectory>* r,
                                       IODebugContext* dbg) {
  return OpenChecked<Directory>(this, name, r, [&](auto* dir) {
    return target()->NewDirectory(name, io_opts, dir, dbg);
  });
}

IOStatus StoreFileSystem::GetChildren(const std::string& dir,
                                      const IOOptions& io_opts,
                                      std::vector<std::string>* r,
                                      IODebugContext* dbg) {
  IOStatus s = Check(FileOp::kStat, dir);
  return s.ok() ? target()->GetChildren(dir, io_opts, r, dbg) : s;
}

IOStatus StoreFileSystem::Deleting(const std::string& path) {
  IOStatus s = Check(FileOp::kDelete, path);
  if (!s.ok()) return s;
  if (hooks_) {
    // Bytes come back with a file's last name only: an ingested staged file,
    // or a table a delete linked under staging/, frees nothing when its first
    // name goes.
    struct stat st;
    const bool last = ::stat(path.c_str(), &st) == 0 && st.st_nlink <= 1;
    hooks_->Freeing(path, last ? static_cast<uint64_t>(st.st_size) : 0);
  }
  return IOStatus::OK();
}

IOStatus StoreFileSystem::DeleteFile(const std::string& f,
                                     const IOOptions& options,
                                     IODebugContext* dbg) {
  // See the class comment: after a failed write the files on disk, not
  // RocksDB's view of them, decide what is unused.
  if (write_failed_) return IOStatus::OK();
  IOStatus s = CheckConfined(f, Leaf::kFile, "removing");
  if (s.ok()) s = Deleting(f);
  return s.ok() ? target()->DeleteFile(f, options, dbg) : s;
}

IOStatus StoreFileSystem::Truncate(const std::string& fname, size_t size,
                                   const IOOptions& options,
                                   IODebugContext* dbg) {
  IOStatus s = Check(FileOp::kWrite, fname);
  if (s.ok()) s = CheckConfined(fname, Leaf::kFile, "truncating");
  if (!s.ok()) return s;
  s = target()->Truncate(fname, size, options, dbg);
  if (!s.ok()) write_failed_ = true;
  return s;
}

IOStatus StoreFileSystem::CreateDir(const std::string& d,
                                    const IOOptions& options,
                                    IODebugContext* dbg) {
  IOStatus s = Check(FileOp::kCreateDir, d);
  if (s.ok()) s = CheckConfined(d, Leaf::kDirectory, "creating directory");
  return Done(FileOp::kCreateDir, d,
              s.ok() ? target()->CreateDir(d, options, dbg) : s);
}

IOStatus StoreFileSystem::CreateDirIfMissing(const std::string& d,
                                             const IOOptions& options,
                                             IODebugContext* dbg) {
  IOStatus s = Check(FileOp::kCreateDir, d);
  if (s.ok()) s = CheckConfined(d, Leaf::kDirectory, "creating directory");
  return Done(FileOp::kCreateDir, d,
              s.ok() ? target()->CreateDirIfMissing(d, options, dbg) : s);
}

IOStatus StoreFileSystem::DeleteDir(const std::string& d,
                                    const IOOptions& options,
                                    IODebugContext* dbg) {
  if (write_failed_) return IOStatus::OK();
  IOStatus s = CheckConfined(d, Leaf::kDirectory, "removing directory");
  if (s.ok()) s = Check(FileOp::kDelete, d);
  return s.ok() ? target()->DeleteDir(d, options, dbg) : s;
}

IOStatus StoreFileSystem::GetFileSize(const std::string& f,
                                      const IOOptions& options, uint64_t* s,
                                      IODebugContext* dbg) {
  IOStatus st = Check(FileOp::kStat, f);
  return st.ok() ? target()->GetFileSize(f, options, s, dbg) : st;
}

IOStatus StoreFileSystem::RenameFile(const std::string& s, const std::string& t,
                                     const IOOptions& options,
                                     IODebugContext* dbg) {
  IOStatus st = Check(FileOp::kRename, t);
  if (st.ok()) st = CheckConfined(s, Leaf::kFile, "renaming");
  if (st.ok()) st = CheckConfined(t, Leaf::kFile, "renaming onto");
  return Done(FileOp::kRename, t,
              st.ok() ? target()->RenameFile(s, t, options, dbg) : st);
}

Status StoreFileSystem::LinkForRemoval(const std::string& file,
                                       const std::string& link) {
  IOStatus s = Check(FileOp::kLink, link, 0, /*mutating=*/false);
  if (s.ok()) s = CheckConfined(file, Leaf::kFile, "linking");
  if (s.ok()) s = CheckConfined(link, Leaf::kFile, "linking onto");
  if (s.ok()) s = target()->LinkFile(file, link, IOOptions(), nullptr);
  return FromRocks(s, "linking " + file + " as " + link);
}

IOStatus StoreFileSystem::LinkFile(const std::string& s, const std::string& t,
                                   const IOOptions& options,
                                   IODebugContext* dbg) {
  IOStatus st = Check(FileOp::kLink, t);
  if (st.ok()) st = CheckConfined(s, Leaf::kFile, "linking");
  if (st.ok()) st = CheckConfined(t, Leaf::kFile, "linking onto");
  return Done(FileOp::kLink, t,
              st.ok() ? target()->LinkFile(s, t, options, dbg) : st);
}

}  // namespace ckptdb::storage
