#include "dump_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
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

// A new file in directory `dir` named after `name` (its first 64 bytes, so
// that a name near the longest a directory takes has room), from mkstemp.
Result<std::string> NewFileIn(const std::string& dir, const std::string& name) {
  std::string pattern = (dir.empty() ? std::string(".") : dir) + "/." +
                        name.substr(0, 64) + ".XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const int fd = ::mkstemp(buffer.data());
  if (fd < 0) return Errno("creating a file beside", dir + "/" + name);
  ::close(fd);
  return std::string(buffer.data());
}

// Whether `path` (links followed) is the file this process's standard
// output writes to.
bool IsStandardOutput(const std::string& path) {
  struct stat named, out;
  return ::stat(path.c_str(), &named) == 0 &&
         ::fstat(STDOUT_FILENO, &out) == 0 && named.st_dev == out.st_dev &&
         named.st_ino == out.st_ino;
}

// Copies file `from` into `to`, or into the standard output (at its offset)
// when `to_stdout`.
Status CopyInto(const std::string& from, const std::string& to,
                bool to_stdout) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Errno("reading", from);
  std::fflush(stdout);
  const int out = to_stdout
                      ? STDOUT_FILENO
                      : ::open(to.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (out < 0) {
    const Status s = Errno("opening", to);
    ::close(in);
    return s;
  }
  std::vector<char> buffer(1 << 20);
  Status s;
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = Errno("reading", from);
      break;
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buffer.data() + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        s = Errno("writing", to);
        break;
      }
      done += w;
    }
    if (!s.ok()) break;
  }
  ::close(in);
  if (!to_stdout && ::close(out) != 0 && s.ok()) s = Errno("writing", to);
  return s;
}

}  // namespace

Result<ExportOutput> ExportOutput::For(const std::string& output) {
  std::error_code ec;
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
    return ExportOutput(output, "", std::move(temporary), /*stream=*/true,
                        to_stdout);
  }
  CKPTDB_ASSIGN_OR_RETURN(const std::string final_path, LinkTarget(output));
  const fs::path p(final_path);
  Result<std::string> beside =
      NewFileIn(p.parent_path().string(), p.filename().string());
  if (!beside.ok() && fs::is_regular_file(status)) {
    // A file that may be written in a directory that may not (no new file
    // beside it): its bytes are replaced once the export is whole.
    CKPTDB_ASSIGN_OR_RETURN(
        std::string temporary,
        NewFileIn(fs::temp_directory_path(ec).string(), "ckpt-db-dump"));
    return ExportOutput(output, "", std::move(temporary), /*stream=*/true,
                        /*to_stdout=*/false);
  }
  CKPTDB_RETURN_IF_ERROR(beside.status());
  return ExportOutput(output, final_path, std::move(beside).value(),
                      /*stream=*/false, /*to_stdout=*/false);
}

ExportOutput::ExportOutput(ExportOutput&& other) noexcept
    : output_(std::move(other.output_)),
      final_(std::move(other.final_)),
      written_(std::move(other.written_)),
      stream_(other.stream_),
      to_stdout_(other.to_stdout_),
      finished_(other.finished_) {
  other.written_.clear();
}

ExportOutput::~ExportOutput() {
  if (!written_.empty() && (stream_ || !finished_)) ::unlink(written_.c_str());
}

Status ExportOutput::Finish() {
  if (stream_) {
    CKPTDB_RETURN_IF_ERROR(CopyInto(written_, output_, to_stdout_));
  } else {
    // The permissions of the file replaced, or of a new one (mkstemp's are
    // 0600).
    struct stat st;
    mode_t mode = 0;
    if (::stat(final_.c_str(), &st) == 0) {
      mode = st.st_mode & 07777;
    } else {
      const mode_t mask = ::umask(0);
      ::umask(mask);
      mode = 0666 & ~mask;
    }
    (void)::chmod(written_.c_str(), mode);
    if (::rename(written_.c_str(), final_.c_str()) != 0)
      return Errno("renaming " + written_ + " to", final_);
  }
  finished_ = true;
  return Status::OK();
}

}  // namespace ckptdb::tools
