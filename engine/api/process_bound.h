#pragma once

// A DB handle belongs to the process that opened it. fork() copies the
// handle's memory into the child but none of its threads: locks those threads
// held stay held in the child, the threads it would wait for never finish,
// and files it would change are the parent's, changed by the parent
// meanwhile. So in a child every call on an inherited handle fails with
// FailedPrecondition naming the fork and touches nothing, and the child can
// still exit (see ExitForkedChildrenAtOnce).

#include <sys/types.h>

#include <memory>
#include <string>

#include "ckptdb/db.h"

namespace ckptdb::engine {

// The process that made it, and whether the caller runs in another one.
class OwningProcess {
 public:
  OwningProcess();
  bool forked() const;
  // FailedPrecondition naming the fork and `what` (the handle) in a process
  // other than the owner.
  Status Check(const std::string& what) const;

 private:
  pid_t pid_;
};

// `db` behind a check of the calling process on every call. In a forked
// child, destroying the wrapper leaves the inherited handle undestroyed (its
// destructor would wait for the parent's threads).
std::unique_ptr<DB> BindToProcess(std::unique_ptr<DB> db, std::string path);

// Once per process: a child forked after this call that exits through exit()
// (a Python child returning from its script, sys.exit) flushes stdio and ends
// at once, skipping the static destructors inherited from the parent.
// RocksDB's (its thread pools, its timer) wait for the parent's background
// threads, which do not exist in the child, so the child would never end.
void ExitForkedChildrenAtOnce();

}  // namespace ckptdb::engine
