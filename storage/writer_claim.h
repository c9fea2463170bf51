#pragma once

// The stores this process holds read-write, by directory. Private to
// storage/.

#include <memory>
#include <string>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb::storage {

// Held by a read-write store handle for its whole life: while it is, another
// read-write open of the same directory in this process is refused, however
// its path is spelled (relative, with "." or "..", doubled or trailing
// slashes, through a symlink or a bind mount of the store or of a directory
// above it). RocksDB's own check compares path strings, and its LOCK file's
// lock is an fcntl lock, which belongs to the process: a second handle would
// take it again, pick the same checkpoint ids as the first (two commits of one
// id, the second over the first), and its close would drop the lock that
// keeps other processes out while the first handle still writes.
//
// A directory is known by keys that do not change when the open creates it:
// the device and inode of its parent (of the deepest existing directory above
// it, with the rest of the path) with its name, and, once it exists, its own
// device and inode. Claims of another process (a forked child inherits its
// parent's) are not in the way.
//
// Across processes, the claim holds an exclusive lock on the directory
// itself (LockDirectory), from before the open looks at what the directory
// holds until the handle is destroyed: RocksDB's LOCK file is taken only once
// the directory holds a database, and an open that found another process's
// creation under way took it for an interrupted one, removed its files (LOCK
// included) and created the store again beside it; both then committed
// checkpoint 1.
class WriterClaim {
 public:
  // FailedPrecondition naming the path the holder opened when a handle of
  // this process holds the store at `path`.
  static Result<std::unique_ptr<WriterClaim>> Take(const std::string& path);
  // After the open, which may have created the directory: claims its own
  // device and inode too; FailedPrecondition when another handle of this
  // process claimed them meanwhile (another spelling opened at the same time).
  Status ClaimOpenedDirectory();
  // Whether the directory at the path is still the one claimed by
  // ClaimOpenedDirectory (true before it): false once it was moved, removed
  // or replaced.
  bool StillAtItsPath() const;
  // Locks the directory at the path (which must exist) against read-write
  // opens of other processes, once; FailedPrecondition when another process
  // holds it. The lock is an flock of the directory, which a forked child
  // would share: children drop theirs at the fork (they cannot use the
  // handle), so that they never keep the store locked for their parent.
  Status LockDirectory();
  // Whether a read-write handle, of any process, holds the store at
  // `resolved` (its directory's lock, as the kernel lists it in /proc/locks;
  // looking takes no lock, so it never gets in a writer's way). False where
  // that cannot be known.
  static bool WriterHolds(const std::string& resolved);
  ~WriterClaim();
  WriterClaim(const WriterClaim&) = delete;
  WriterClaim& operator=(const WriterClaim&) = delete;

 private:
  WriterClaim() = default;
  std::string path_;               // as the caller spelled it
  std::string resolved_;           // absolute, symlinks and "." / ".." resolved
  std::vector<std::string> keys_;  // held in the registry
  std::string directory_;  // the opened directory's own key (DirectoryKey)
  int lock_fd_ = -1;       // the locked directory (LockDirectory)
};

}  // namespace ckptdb::storage
