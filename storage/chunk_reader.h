#pragma once

// The chunk file reader: reads of chunk bytes straight from the files that
// hold them, bypassing RocksDB's block reads and copies. A large chunk lives
// in a value file (value_files.h), or starts a data block of its own in its
// table file (chunk_files.h); either way its bytes are one run of a file,
// read with preadv into the caller's memory and checked against the chunk's
// checksum. Reads through RocksDB (small chunks, and any read this reader
// cannot do) are the store's (store_reads.cc). Private to storage/.
//
// Table files are found and parsed as reads reach them, so that a rank holds
// the offsets (and open files) only of the chunks it reads; the indexes of a
// few checkpoints are kept. Thread-safe.

#include <rocksdb/db.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ckptdb/status.h"
#include "storage/buffer_pool.h"
#include "storage/chunk_files.h"
#include "storage/file_system.h"
#include "storage/store.h"
#include "storage/value_files.h"

namespace ckptdb::storage {

// A chunk buffer's bytes: pinned in RocksDB's block cache, or read directly
// into a buffer of `pool`.
struct ChunkBuffer::Impl {
  ~Impl() {
    if (owned != nullptr) pool->Deallocate(owned);
  }
  rocksdb::PinnableSlice slice;
  std::shared_ptr<BufferPool> pool;
  char* owned = nullptr;
  size_t owned_size = 0;
};

class ChunkFileReader {
 public:
  // Over the `chunks` column family of `db`, whose files `fs` opens; buffers
  // come from `pool`. `db` and `fs` outlive the reader.
  ChunkFileReader(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* chunks,
                  std::shared_ptr<StoreFileSystem> fs,
                  std::shared_ptr<BufferPool> pool, std::string store_path);

  // Reads the value under `key` (a key of checkpoint `checkpoint_id`'s
  // range) straight from its value or table file into `pieces`, in order,
  // and checks it against `checksum`. False, with nothing to report, when
  // that is not possible (a chunk sharing its block, a file that cannot be
  // opened or read, a mismatch): the caller reads through RocksDB, which
  // names the problem.
  bool ReadDirect(int64_t checkpoint_id, const std::string& key,
                  uint64_t checksum, const std::vector<ChunkPiece>& pieces);
  // One value of ReadDirectMany.
  struct DirectRead {
    int64_t checkpoint_id = 0;  // whose key range holds the value
    std::string_view key;       // valid until ReadDirectMany returns
    uint64_t checksum = 0;
    std::span<const ChunkPiece> pieces;
  };
  // ReadDirect for each of `reads`; (*done)[i] says whether read i was read
  // and matched its checksum. Values of one file that lie at most
  // kMaxGapBytes apart are read with one preadv, the bytes between them into
  // a scratch buffer: a value costs a system call only where it stands apart.
  void ReadDirectMany(const std::vector<DirectRead>& reads,
                      std::vector<char>* done);
  // The most bytes between two values that one read spans.
  static constexpr uint64_t kMaxGapBytes = 16 << 10;
  // The most bytes of values one read gathers.
  static constexpr uint64_t kMaxSpanBytes = 8 << 20;
  // Reads the bytes `pointer` names from the value file at `path`, open as
  // `fd`, into `buffer`; `what` names the chunk in errors. Corruption when
  // the file is not a regular file or ends too early; the size is checked
  // before anything is allocated.
  Status ReadValueFile(int fd, const std::string& path, const std::string& what,
                       const ValuePointer& pointer, ChunkBuffer* buffer);
  // Drops what is known of checkpoint `checkpoint_id`'s files (deleted, or
  // an id given out again), closing them.
  void Forget(int64_t checkpoint_id);

 private:
  // The table files of one checkpoint that reads have reached.
  struct Index {
    std::vector<std::shared_ptr<const FileOffsets>> files;
  };
  // The open file holding the value under `key` and its offset there.
  // REQUIRES: mu_ held.
  using Located =
      std::pair<std::shared_ptr<const FileOffsets>, FileOffsets::Location>;
  std::optional<Located> Locate(int64_t checkpoint_id, std::string_view key);

  rocksdb::DB& db_;
  rocksdb::ColumnFamilyHandle* const chunks_;
  const std::shared_ptr<StoreFileSystem> fs_;
  const std::shared_ptr<BufferPool> pool_;
  const std::string path_;
  std::mutex mu_;
  std::map<int64_t, Index> indexes_;
};

}  // namespace ckptdb::storage
