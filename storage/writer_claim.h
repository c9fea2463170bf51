#pragma once

// The stores this process holds read-write, by directory. Private to
// storage/.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "ckptdb/status.h"

namespace ckptdb::storage {

// Held by a read-write store handle for its whole life: while it is, another
// read-write open of the same directory in this process is refused, however
// its path is spelled (relative, with "." or "..", doubled or trailing
// slashes, through a symlink to the store or to a directory above it).
// RocksDB's own check compares path strings, and its LOCK file's lock is an
// fcntl lock, which belongs to the process: a second handle would take it
// again, pick the same checkpoint ids as the first (two commits of one id,
// the second over the first), and its close would drop the lock that keeps
// other processes out while the first handle still writes.
class WriterClaim {
 public:
  // FailedPrecondition naming the path the holder opened when a handle of
  // this process holds the store at `path`.
  static Result<std::unique_ptr<WriterClaim>> Take(const std::string& path);
  // After an open that created the directory: claims its identity too.
  void ClaimCreatedDirectory();
  ~WriterClaim();
  WriterClaim(const WriterClaim&) = delete;
  WriterClaim& operator=(const WriterClaim&) = delete;

 private:
  WriterClaim() = default;
  // The directory as an absolute path with symlinks, ".", ".." and extra
  // slashes resolved; and, when it exists, its device and inode (which a
  // bind mount shares too).
  std::string resolved_;
  std::optional<std::pair<dev_t, ino_t>> identity_;
};

}  // namespace ckptdb::storage
