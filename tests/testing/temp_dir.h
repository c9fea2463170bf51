#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

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

// Every file under `dir` with its size, modification time and content: equal
// snapshots mean the directory was not modified.
inline std::map<std::string, std::string> SnapshotDir(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    std::ostringstream desc;
    if (entry.is_regular_file()) {
      std::ifstream in(entry.path(), std::ios::binary);
      desc << entry.file_size() << " "
           << entry.last_write_time().time_since_epoch().count() << " "
           << std::hash<std::string>()(
                  std::string(std::istreambuf_iterator<char>(in), {}));
    } else {
      desc << "dir";
    }
    out[entry.path().string()] = desc.str();
  }
  return out;
}

}  // namespace ckptdb::testing
