#pragma once

// How chunk table files are laid out for direct reads: each chunk of
// kOwnBlockBytes or more starts a data block of its own, and a user property
// of the file records where each such chunk's value starts. Loads then read
// those values straight from the file (Store::ReadChunkInto), each read
// checked against the chunk's checksum; everything else goes through RocksDB.

#include <rocksdb/flush_block_policy.h>
#include <rocksdb/table_properties.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "storage/buffer_pool.h"

namespace ckptdb::storage {

// Chunks at least this large start a data block of their own.
inline constexpr size_t kOwnBlockBytes = BufferPool::kMinPooled;

// Ends data blocks at the block size, and before every chunk of
// kOwnBlockBytes or more.
std::shared_ptr<rocksdb::FlushBlockPolicyFactory>
NewChunkFlushBlockPolicyFactory();

// Records in each table file where the values of chunks that start a data
// block lie.
std::shared_ptr<rocksdb::TablePropertiesCollectorFactory>
NewValueOffsetCollectorFactory();

// Where the chunk values of one table file start
// (NewValueOffsetCollectorFactory), with the file open. Keys without an entry
// share a block with others.
struct FileOffsets {
  FileOffsets() = default;
  FileOffsets(const FileOffsets&) = delete;
  FileOffsets& operator=(const FileOffsets&) = delete;
  ~FileOffsets();

  // Whether `key` lies in the file's key range.
  bool Holds(std::string_view key) const;
  // Where the value under `key` starts, when that chunk starts a block.
  // REQUIRES: Holds(key). (Keys are matched by a 64-bit hash; a mismatch
  // could only point at other bytes, which the read's checksum rejects.)
  std::optional<uint64_t> ValueOffset(std::string_view key) const;

  std::string path;
  int fd = -1;
  std::string first, last;                    // the file's key range
  std::unordered_map<uint64_t, uint64_t> at;  // key hash -> value offset
};

// Parses one file's value offsets and opens it (when it has any); nullptr
// when it has no such property or cannot be opened (its chunks are then read
// through RocksDB).
std::shared_ptr<const FileOffsets> ParseFileOffsets(
    const std::string& path, const rocksdb::TableProperties& props);

}  // namespace ckptdb::storage
