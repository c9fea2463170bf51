#pragma once

// How chunk table files are laid out for direct reads. Format 3: chunks of
// kExternalValueBytes or more are in a value file (value_files.h), and a user
// property of the table file records which one and where each chunk starts in
// it. Format 2: each chunk of kOwnBlockBytes or more starts a data block of
// its own, and a user property records where each such chunk's value starts.
// Loads read those values straight from the file (Store::ReadChunkInto), each
// read checked against the chunk's checksum; everything else goes through
// RocksDB.

#include <rocksdb/flush_block_policy.h>
#include <rocksdb/table_properties.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "storage/buffer_pool.h"
#include "storage/value_files.h"

namespace ckptdb::storage {

// Chunks at least this large start a data block of their own.
inline constexpr size_t kOwnBlockBytes = BufferPool::kMinPooled;
// The block restart interval of chunk table files (ChunkCfOptions): every
// this many entries a data block entry shares no key bytes with the previous
// one, which the offsets of small chunks' values depend on.
inline constexpr int kChunkBlockRestartInterval = 16;

// Ends data blocks at the block size, and before every chunk of
// kOwnBlockBytes or more.
std::shared_ptr<rocksdb::FlushBlockPolicyFactory>
NewChunkFlushBlockPolicyFactory();

// What a staged writer tells the collector of its table file about the value
// file its pointers point into: its name (ValueFileName), how long it is, and
// whether the value being added is a pointer (to the value at next_offset).
struct ValueFileLog {
  std::string name;
  uint64_t end = 0;
  bool next_is_pointer = false;
  uint64_t next_offset = 0;
};

// Records in each table file where the values of chunks that start a data
// block lie; with `log`, also where the values its writer put in the value
// file lie (the pointers, as the writer declares them).
std::shared_ptr<rocksdb::TablePropertiesCollectorFactory>
NewValueOffsetCollectorFactory(std::shared_ptr<ValueFileLog> log = nullptr);

// Key hash -> offset of a value: an open-addressing table indexed by the
// hash (mixed), at most half full, so that a lookup reads one or two adjacent
// slots, where a node-based hash map took a cache miss a node and a binary
// search of sorted pairs several. Of pairs with the same hash, the first added
// counts.
class OffsetIndex {
 public:
  // Adds the 16-byte little-endian (key hash, offset) pairs of `bytes` (a
  // partial pair at the end is ignored, and so is a pair whose offset is
  // all ones).
  void AddPairs(std::string_view bytes);
  std::optional<uint64_t> Find(uint64_t hash) const;
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t offset = kEmpty;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  void Insert(uint64_t hash, uint64_t offset);
  // The slot where a lookup of `hash` starts.
  static size_t Home(uint64_t hash, size_t mask);
  // Makes room for `count` pairs (rehashing what is there).
  void Reserve(size_t count);

  std::vector<Slot> slots_;  // a power of two of them, or none
  size_t size_ = 0;
};

// Where the chunk values of one table file start
// (NewValueOffsetCollectorFactory), with the file holding them open. Files
// written before the table-offsets property know only the values that start a
// block; their other keys have no entry.
struct FileOffsets {
  FileOffsets() = default;
  FileOffsets(const FileOffsets&) = delete;
  FileOffsets& operator=(const FileOffsets&) = delete;
  ~FileOffsets();

  // Whether `key` lies in the file's key range.
  bool Holds(std::string_view key) const;
  // Where the value under `key` starts in the file at `path` (open as `fd`):
  // in the value file, or in the table file.
  // REQUIRES: Holds(key). (Keys are matched by a 64-bit hash; a mismatch
  // could only point at other bytes, which the read's checksum rejects.)
  struct Location {
    const std::string* path;
    int fd;
    uint64_t offset;
  };
  std::optional<Location> ValueOffset(std::string_view key) const;

  // The table file, open when `at` has entries.
  std::string path;
  int fd = -1;
  // The value file, open when `external` has entries.
  std::string value_path;
  int value_fd = -1;
  // The table file's key range.
  std::string first, last;
  // Key hash -> offset of the value in the table file.
  OffsetIndex at;
  // Key hash -> offset of the value in the value file.
  OffsetIndex external;
};

// Parses one table file's value offsets and opens the files they point into
// (when it has any); nullptr when it has no such property or cannot be opened
// (its chunks are then read through RocksDB). `store_path` locates value
// files; `open_for_read` opens each file (StoreFileSystem::OpenForDirectRead):
// a descriptor the FileOffsets then owns, or -1 when it cannot be opened.
std::shared_ptr<const FileOffsets> ParseFileOffsets(
    const std::string& path, const rocksdb::TableProperties& props,
    const std::string& store_path,
    const std::function<int(const std::string&)>& open_for_read);

// The value file a table file's chunks point into and how long it must be;
// nullopt when they point into none, or when the property that says so is
// malformed (HasValueFile tells).
std::optional<ValueFileExtent> ValueFileOf(
    const rocksdb::TableProperties& props);
// Whether the table file has the property that names a value file.
bool HasValueFile(const rocksdb::TableProperties& props);

// Where every chunk value of one table file lies, from the properties its
// writer recorded: the copy a store keeps of them (record_copies.h) finds a
// chunk's bytes when the table file's index, footer or pointer is damaged.
struct ChunkLocations {
  // The table file's key range.
  std::string first, last;
  // The value file its pointers point into (name under the values
  // directory); empty when none.
  std::string value_file;
  // Key hash -> offset of the value in the table file / in the value file.
  OffsetIndex in_table, in_value_file;

  bool Holds(std::string_view key) const { return first <= key && key <= last; }
  // Where the value under `key` starts: in the value file (true) or the
  // table file (false), at the offset. (Keys are matched by a 64-bit hash; a
  // mismatch could only point at other bytes, which the read's checksum
  // rejects.)
  std::optional<std::pair<bool, uint64_t>> Find(std::string_view key) const;
};
// The properties of a table file that ChunkLocations come from, as one
// string; nullopt for a file without them (written before they existed).
std::optional<std::string> LocatorBlob(const rocksdb::TableProperties& props);
// Parses LocatorBlob's string; nullopt when it is malformed.
std::optional<ChunkLocations> ParseLocatorBlob(std::string_view blob);

}  // namespace ckptdb::storage
