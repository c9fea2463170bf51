#pragma once

// Where RocksDB runs a store's background jobs (flushes, compactions).
// Private to storage/.

#include <rocksdb/env.h>

#include <memory>

namespace ckptdb::storage {

// `base` (a store's Env), with its background jobs on RocksDB's own thread
// pools in the process that loaded ckptdb, and on pools of a forked child's
// own in the child. A child inherits RocksDB's pools without their threads: a
// job scheduled there never runs, so the child's first flush (every commit,
// the creation of a store) waited forever. A child's pools are made at its
// first job and never destroyed (a grandchild makes its own in turn).
std::shared_ptr<rocksdb::Env> ForkAwareEnv(std::unique_ptr<rocksdb::Env> base);

// Whether this process was forked from the one that loaded ckptdb.
bool InForkedChild();

}  // namespace ckptdb::storage
