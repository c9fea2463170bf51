#pragma once

#include <rocksdb/env.h>

#include <memory>
#include <string>

#include "storage/file_system.h"

namespace ckptdb::storage {

// RocksDB's info log for a read-write store: `LOG` in the store directory
// (the previous one kept as `LOG.old` once it passes 4 MiB). RocksDB's own
// file logger aborts the process on a failed write in Debian's build
// (assertions on): this one writes through `fs` and stops logging on the
// first failure instead. Never fails; without a file it discards.
std::shared_ptr<rocksdb::Logger> NewInfoLog(StoreFileSystem& fs,
                                            const std::string& dir);

// Discards everything: read-only opens never create or rotate files.
std::shared_ptr<rocksdb::Logger> NewNullInfoLog();

}  // namespace ckptdb::storage
