#pragma once

#include <rocksdb/env.h>

#include <cstdint>
#include <memory>
#include <string>

#include "storage/file_system.h"

namespace ckptdb::storage {

// The most bytes the info log keeps in `LOG` before it moves it to `LOG.old`
// (replacing the one before) and starts a new `LOG`.
inline constexpr uint64_t kInfoLogBytes = uint64_t{4} << 20;

// RocksDB's info log for a read-write store: `LOG` in the store directory,
// and the one before it as `LOG.old`. Each passes `max_bytes` by one line at
// most, however long the store stays open: a store that is saved to hundreds
// of thousands of times keeps about 2 * max_bytes of log. RocksDB's own file
// logger aborts the process on a failed write in Debian's build (assertions
// on): this one writes through `fs` and stops logging on the first failure
// instead. Never fails; without a file it discards. Thread-safe.
std::shared_ptr<rocksdb::Logger> NewInfoLog(std::shared_ptr<StoreFileSystem> fs,
                                            const std::string& dir,
                                            uint64_t max_bytes = kInfoLogBytes);

// Discards everything: read-only opens never create or rotate files.
std::shared_ptr<rocksdb::Logger> NewNullInfoLog();

}  // namespace ckptdb::storage
