#include "dump_output.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

namespace ckptdb::tools {
namespace {

namespace fs = std::filesystem;

Status Errno(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

// The path the symbolic links at `output` lead to (itself when it is none),
// also when the last one leads nowhere yet.
Result<std::string> LinkTarget(const std::string& output) {
  fs::path p(output);
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) return Errno("reading the link", p.string());
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return Status::InvalidArgument("--output: '" + output +
                                 "' is a chain of more than 40 links");
}

// How much of the output's name a new file beside it carries: enough to
// tell whose it is, short enough that "." + it + ".XXXXXX" fits wherever the
// output's own name does (255 bytes on Linux's file systems).
constexpr size_t kNameBytesKept = 64;

// A new file in directory `dir` named after `name`, from mkstemp.
Result<std::string> NewFileIn(const std::string& dir, const std::string& name) {
  std::string pattern = (dir.empty() ? std::string(".") : dir) + "/." +
                        name.substr(0, kNameBytesKept) + ".XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const int fd = ::mkstemp(buffer.data());
  if (fd < 0) return Errno("creating a file beside", dir + "/" + name);
  ::close(fd);
  return std::string(buffer.data());
}

volatile std::sig_atomic_t interrupted = 0;

extern "C" void OnInterrupt(int signal) { interrupted = signal; }

// Whether `path` (links followed) is the file this process's standard
// output writes to.
bool IsStandardOutput(const std::string& path) {
  struct stat named, out;
  return ::stat(path.c_str(), &named) == 0 &&
         ::fstat(STDOUT_FILENO, &out) == 0 && named.st_dev == out.st_dev &&
         named.st_ino == out.st_ino;
}

Status Interruption(const std::string& what) {
  return Status::IOError(what + ": interrupted by signal " +
                         std::to_string(interrupted));
}

// The signals CatchInterrupts notes, blocked while a file's bytes are
// replaced in place (a short copy), so that they never leave it partial.
class InterruptsHeld {
 public:
  InterruptsHeld() {
    sigset_t held;
    sigemptyset(&held);
    for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGPIPE})
      sigaddset(&held, signal);
    ::pthread_sigmask(SIG_BLOCK, &held, &before_);
  }
  ~InterruptsHeld() { ::pthread_sigmask(SIG_SETMASK, &before_, nullptr); }

 private:
  sigset_t before_;
};

// Writes all of `from` into `out`: from its start when `replace` (a regular
// file gets the room first, so that a full disk fails before a byte of it
// changes, and is cut to the new size last), else where `out` stands (the
// standard output: after what was written there, or appended).
Status CopyAll(int in, const std::string& from, int out, const std::string& to,
               bool replace) {
  struct stat st_in, st_out;
  if (::fstat(in, &st_in) != 0) return Errno("reading", from);
  const bool regular =
      replace && ::fstat(out, &st_out) == 0 && S_ISREG(st_out.st_mode);
  std::optional<InterruptsHeld> held;
  if (regular) held.emplace();
  if (regular) {
    const int e = ::posix_fallocate(out, 0, st_in.st_size);
    if (e != 0 && e != EOPNOTSUPP && e != EINVAL) {
      errno = e;
      return Errno("making room in", to);
    }
    if (::lseek(out, 0, SEEK_SET) < 0) return Errno("writing", to);
  }
  std::vector<char> buffer(1 << 20);
  for (;;) {
    // A signal noted meanwhile (on another thread) waits for an in-place
    // copy to finish.
    if (interrupted && !regular) return Interruption("writing " + to);
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("reading", from);
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buffer.data() + done, n - done);
      if (w < 0 && errno == EINTR && (regular || !interrupted)) continue;
      if (w < 0 && interrupted && !regular)
        return Interruption("writing " + to);
      if (w < 0) return Errno("writing", to);
      done += w;
    }
  }
  if (regular && ::ftruncate(out, st_in.st_size) != 0)
    return Errno("writing", to);
  return Status::OK();
}

// Copies file `from` into `to` (opened without truncation), or into the
// standard output (at its offset) when `to_stdout`.
Status CopyInto(const std::string& from, const std::string& to,
                bool to_stdout) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Errno("reading", from);
  std::fflush(stdout);
  int out = STDOUT_FILENO;
  if (!to_stdout) {
    // A FIFO without a reader blocks here until one opens it, or a signal.
    while ((out = ::open(to.c_str(), O_WRONLY | O_CLOEXEC)) < 0 &&
           errno == EINTR && !interrupted) {
    }
  }
  if (out < 0) {
    const Status s =
        interrupted ? Interruption("opening " + to) : Errno("opening", to);
    ::close(in);
    return s;
  }
  Status s = CopyAll(in, from, out, to, /*replace=*/!to_stdout);
  ::close(in);
  if (!to_stdout && ::close(out) != 0 && s.ok()) s = Errno("writing", to);
  return s;
}

// A new file for the export: beside `final_path` when a file can be made
// there, else in the temporary directory.
Result<std::string> NewFileNear(const std::string& final_path) {
  const fs::path p(final_path);
  Result<std::string> beside =
      NewFileIn(p.parent_path().string(), p.filename().string());
  if (beside.ok()) return beside;
  std::error_code ec;
  return NewFileIn(fs::temp_directory_path(ec).string(), "ckpt-db-dump");
}

}  // namespace

void CatchInterrupts() {
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocked open or write returns
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGHUP, &action, nullptr);
  // A reader that went away (`| head`): the write fails, and the export's
  // files are removed before it ends by the signal.
  ::sigaction(SIGPIPE, &action, nullptr);
}

int Interrupted() { return interrupted; }

Result<ExportOutput> ExportOutput::For(const std::string& output,
                                       const std::string& store) {
  if (output.empty()) {
    return Status::InvalidArgument(
        "--output is empty: name the file to write (- for standard output)");
  }
  std::error_code ec;
  if (output == "-") {
    CKPTDB_ASSIGN_OR_RETURN(
        std::string temporary,
        NewFileIn(fs::temp_directory_path(ec).string(), "ckpt-db-dump"));
    return ExportOutput(output, output, std::move(temporary), Mode::kCopy,
                        /*to_stdout=*/true);
  }
  // The tool never writes the store it reads: not into its directory (a
  // file there is the database's own), whatever links lead there.
  const fs::path canonical_store = fs::weakly_canonical(store, ec);
  const fs::path canonical_output = fs::weakly_canonical(output, ec);
  if (!ec && !IsStandardOutput(output)) {
    const auto [end, unused] =
        std::mismatch(canonical_store.begin(), canonical_store.end(),
                      canonical_output.begin(), canonical_output.end());
    if (end == canonical_store.end()) {
      return Status::InvalidArgument(
          "--output: '" + output + "' is in the store '" + store +
          "' being exported, which ckpt-db-dump never writes; name a file "
          "outside it");
    }
  }
  const fs::file_status status = fs::status(output, ec);  // links followed
  if (fs::is_directory(status)) {
    return Status::InvalidArgument("--output: '" + output +
                                   "' is a directory; name the file to write");
  }
  const bool to_stdout = IsStandardOutput(output);
  if (to_stdout || (fs::exists(status) && !fs::is_regular_file(status))) {
    CKPTDB_ASSIGN_OR_RETURN(
        std::string temporary,
        NewFileIn(fs::temp_directory_path(ec).string(), "ckpt-db-dump"));
    return ExportOutput(output, output, std::move(temporary), Mode::kCopy,
                        to_stdout);
  }
  CKPTDB_ASSIGN_OR_RETURN(const std::string final_path, LinkTarget(output));
  // Refused now rather than at the rename, after the export was written.
  const fs::path named(final_path);
  const std::string dir =
      named.has_parent_path() ? named.parent_path().string() : std::string(".");
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 &&
      named.filename().string().size() > static_cast<size_t>(name_max)) {
    return Status::InvalidArgument(
        "--output: the file name of '" + final_path + "' is " +
        std::to_string(named.filename().string().size()) +
        " bytes, more than the " + std::to_string(name_max) +
        " its directory takes");
  }
  // A file with other names (hard links) keeps them, and one with extended
  // attributes (ACLs among them) keeps those: its bytes are replaced in
  // place.
  std::error_code links_unknown;
  const uintmax_t links = fs::hard_link_count(final_path, links_unknown);
  const bool in_place = fs::is_regular_file(status) &&
                        ((!links_unknown && links > 1) ||
                         ::listxattr(final_path.c_str(), nullptr, 0) > 0);
  const fs::path p(final_path);
  Result<std::string> beside =
      NewFileIn(p.parent_path().string(), p.filename().string());
  if (beside.ok() && !in_place) {
    return ExportOutput(output, final_path, std::move(beside).value(),
                        Mode::kRename, false);
  }
  if (!fs::is_regular_file(status)) return beside.status();
  if (beside.ok()) {
    return ExportOutput(output, final_path, std::move(beside).value(),
                        Mode::kCopy, false);
  }
  CKPTDB_ASSIGN_OR_RETURN(std::string temporary, NewFileNear(final_path));
  return ExportOutput(output, final_path, std::move(temporary), Mode::kCopy,
                      false);
}

ExportOutput::ExportOutput(ExportOutput&& other) noexcept
    : output_(std::move(other.output_)),
      final_(std::move(other.final_)),
      written_(std::move(other.written_)),
      mode_(other.mode_),
      to_stdout_(other.to_stdout_),
      renamed_(other.renamed_) {
  other.written_.clear();
}

ExportOutput::~ExportOutput() {
  if (!written_.empty() && !renamed_) ::unlink(written_.c_str());
}

Status ExportOutput::Finish() {
  if (interrupted) return Interruption("exporting to " + output_);
  if (mode_ == Mode::kCopy) return CopyInto(written_, final_, to_stdout_);
  // The replaced file's permissions, owner and group, or a new file's
  // permissions (mkstemp's are 0600). Where the owner cannot be kept (only
  // root may give a file away), the bytes are replaced in place instead.
  struct stat st;
  if (::stat(final_.c_str(), &st) == 0) {
    struct stat mine;
    const bool owned = ::stat(written_.c_str(), &mine) == 0 &&
                       mine.st_uid == st.st_uid && mine.st_gid == st.st_gid;
    if (!owned && ::chown(written_.c_str(), st.st_uid, st.st_gid) != 0)
      return CopyInto(written_, final_, false);
    (void)::chmod(written_.c_str(), st.st_mode & 07777);
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    (void)::chmod(written_.c_str(), 0666 & ~mask);
  }
  if (::rename(written_.c_str(), final_.c_str()) == 0) {
    renamed_ = true;
    return Status::OK();
  }
  // A sticky directory lets only a file's owner replace it by name.
  if ((errno == EPERM || errno == EACCES) && ::stat(final_.c_str(), &st) == 0 &&
      S_ISREG(st.st_mode)) {
    return CopyInto(written_, final_, false);
  }
  return Errno("renaming " + written_ + " to", final_);
}

}  // namespace ckptdb::tools
