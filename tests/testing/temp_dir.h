#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ckptdb::testing {

// A fresh directory under `base` (default $TMPDIR, else /tmp), removed with
// its contents on destruction.
class TempDir {
 public:
  explicit TempDir(std::string base = "") {
    if (base.empty())
      base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    // mkdtemp replaces the trailing six X's of the template.
    std::string pattern = base + "/ckptdb-test-XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Calls `visit(path, status)` for every entry under `dir` (recursively, not
// following symbolic links). A store is live while tests walk it: RocksDB
// removes obsolete table files in the background and deletes remove value
// directories, so an entry that is gone by the time it is looked at is not
// visited, and a directory that is gone is empty. Never throws.
template <typename Visit>
void WalkUnder(const std::filesystem::path& dir, Visit visit) {
  namespace fs = std::filesystem;
  std::vector<fs::path> pending{dir};
  while (!pending.empty()) {
    const fs::path here = pending.back();
    pending.pop_back();
    std::error_code ec;
    fs::directory_iterator it(here, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const fs::path path = it->path();
      std::error_code stat_ec;
      const fs::file_status status = fs::symlink_status(path, stat_ec);
      if (stat_ec) continue;
      if (fs::is_directory(status)) pending.push_back(path);
      visit(path, status);
    }
  }
}

// A regular file found under a directory, with its size when it was looked at.
struct FoundFile {
  std::filesystem::path path;
  std::uintmax_t size = 0;
};

// Every regular file under `dir`, as WalkUnder finds them, in path order.
inline std::vector<FoundFile> FilesUnder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<FoundFile> out;
  WalkUnder(dir, [&](const fs::path& path, const fs::file_status& status) {
    if (!fs::is_regular_file(status)) return;
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(path, ec);
    if (!ec) out.push_back({path, size});
  });
  std::sort(out.begin(), out.end(), [](const FoundFile& a, const FoundFile& b) {
    return a.path < b.path;
  });
  return out;
}

// The regular files under `dir` whose extension is one of `extensions` (all
// when empty), as FilesUnder finds them.
inline std::vector<FoundFile> FilesUnder(
    const std::filesystem::path& dir,
    std::initializer_list<const char*> extensions) {
  std::vector<FoundFile> out;
  for (FoundFile& f : FilesUnder(dir)) {
    bool wanted = extensions.size() == 0;
    for (const char* ext : extensions) wanted |= f.path.extension() == ext;
    if (wanted) out.push_back(std::move(f));
  }
  return out;
}

// The total size of the files FilesUnder(dir, extensions) finds.
inline std::uintmax_t BytesUnder(
    const std::filesystem::path& dir,
    std::initializer_list<const char*> extensions = {}) {
  std::uintmax_t total = 0;
  for (const FoundFile& f : FilesUnder(dir, extensions)) total += f.size;
  return total;
}

// The content of `path`, or nullopt when it cannot be read (it is gone).
inline std::optional<std::string> ReadIfPresent(
    const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string content((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) return std::nullopt;
  return content;
}

// Flips bits `mask` of the byte `at` bytes into the first copy of `probe` in
// every table and value file under the store `dir` that holds it (only the
// first file when `first_file_only`); true when a file was damaged.
inline bool DamageStoredBytes(const std::filesystem::path& dir,
                              const std::string& probe, size_t at,
                              char mask = 0x40, bool first_file_only = false) {
  bool damaged = false;
  for (const FoundFile& file : FilesUnder(dir, {".sst", ".val"})) {
    std::fstream f(file.path, std::ios::in | std::ios::out | std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(f)), {});
    const size_t pos = content.find(probe);
    if (pos == std::string::npos) continue;
    f.seekp(static_cast<std::streamoff>(pos + at));
    f.put(static_cast<char>(content[pos + at] ^ mask));
    damaged = true;
    if (first_file_only) break;
  }
  return damaged;
}

// Every file and directory under `dir` with its size, modification time and
// content: equal snapshots mean the directory was not modified. A file that
// vanishes while it is read is described as gone.
inline std::map<std::string, std::string> SnapshotDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  WalkUnder(dir, [&](const fs::path& path, const fs::file_status& status) {
    std::ostringstream desc;
    if (fs::is_regular_file(status)) {
      std::error_code ec;
      const auto size = fs::file_size(path, ec);
      const auto time = fs::last_write_time(path, ec);
      const std::optional<std::string> content = ReadIfPresent(path);
      if (ec || !content) {
        desc << "gone";
      } else {
        desc << size << " " << time.time_since_epoch().count() << " "
             << std::hash<std::string>()(*content);
      }
    } else {
      desc << "dir";
    }
    out[path.string()] = desc.str();
  });
  return out;
}

}  // namespace ckptdb::testing
