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
#include <string>
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
  std::string path;
  int fd = -1;
  std::string first, last;  // the keys with entries span [first, last]
  std::unordered_map<std::string, uint64_t> at;
};

// Parses one file's value offsets and opens it; nullptr when it has none or
// cannot be opened (its chunks are then read through RocksDB).
std::shared_ptr<const FileOffsets> ParseFileOffsets(
    const std::string& path, const rocksdb::TableProperties& props);

}  // namespace ckptdb::storage
