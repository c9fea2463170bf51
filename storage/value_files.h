#pragma once

// Value files: where the bytes of large chunks live (format 3). A staged
// writer appends each chunk of kExternalValueBytes or more to a value file of
// its own, straight from the caller's memory, and puts a ValuePointer under
// the chunk's key in its table file instead of the bytes. The table file's
// blocks then hold no chunk bytes: no copy into RocksDB's block builder and no
// block checksum over them; the chunk's own checksum covers them, and every
// read checks it.
//
// Layout: <store>/values/<checkpoint id>/<writer rank>-<part>-<nonce>.val,
// one per staged table file that has large chunks; the nonce (8 hex digits)
// is drawn by each writer, so that no two attempts at a checkpoint id (the id
// of a save that failed is given out again) share a file: a writer left over
// from an earlier attempt (a process of a job that died) can neither truncate
// nor remove a later attempt's file. The chunk key names the checkpoint and
// writer rank, the pointer the part and nonce: a value file is reachable only
// through keys in its checkpoint's key range. So once no table file holds
// keys of a checkpoint, its value directory is garbage, and removing it is
// provably safe (DropChunks, and a read-write open for leftovers).
//
// Durability: a writer syncs its value file and the directories naming it
// before it reports success, and the coordinator checks that every value file
// its staged table files point into is present and long enough before it
// ingests them and writes the record (the commit point).

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/status.h"
#include "core/checksum.h"
#include "storage/file_system.h"

namespace ckptdb::storage {

// Chunks at least this large go to value files (format 5; 64 KiB before):
// a chunk's pointer and key in the table file then cost a few percent of its
// bytes, and its bytes skip RocksDB's block builder and block checksum.
inline constexpr size_t kExternalValueBytes = size_t{1} << 10;
static_assert(kExternalValueBytes > 32, "a pointer must not read as a chunk");

// Where one chunk's bytes lie in a value file. Encoded as 32 bytes (a chunk
// stored in a value file is at least kExternalValueBytes long, so a pointer
// is never mistaken for a chunk's own bytes: readers compare the value's size
// with the chunk's).
struct ValuePointer {
  int32_t rank = 0;
  uint32_t part = 0;
  uint32_t nonce = 0;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
};
inline constexpr size_t kValuePointerBytes = 32;
std::string EncodeValuePointer(const ValuePointer& pointer);
// nullopt unless `value` is an encoded pointer.
std::optional<ValuePointer> DecodeValuePointer(std::string_view value);

// <store>/values, and the directory and file names inside it.
std::string ValuesDir(const std::string& store_path);
std::string ValueDirOf(const std::string& store_path, int64_t checkpoint_id);
// The value file `pointer` (a value under a key of `checkpoint_id`) points
// into, and its path relative to ValuesDir.
std::string ValueFilePath(const std::string& store_path, int64_t checkpoint_id,
                          const ValuePointer& pointer);
std::string ValueFileName(int64_t checkpoint_id, const ValuePointer& pointer);
// The checkpoint id a directory under ValuesDir is named for; false for any
// other name.
bool ParseValueDirName(std::string_view name, int64_t* checkpoint_id);
// ValueFileName's inverse: the checkpoint id and the pointer's rank, part and
// nonce (offset and length 0) of a value file's name under ValuesDir; nullopt
// for any other name.
std::optional<ValuePointer> ParseValueFileName(std::string_view name,
                                               int64_t* checkpoint_id);

// A value file a table file's chunks point into (its name under ValuesDir)
// and how long it must be to hold them.
struct ValueFileExtent {
  std::string name;
  uint64_t end = 0;
};

// The value directories of a store as its file system shows them: what is
// there, what is whole, what is stray, and their removal. Which directories
// are in use is the store's knowledge (its table files and records): callers
// pass it in. Every operation goes through `fs`.
class ValueDirectories {
 public:
  ValueDirectories(StoreFileSystem& fs, std::string store_path)
      : fs_(fs), path_(std::move(store_path)) {}

  // The checkpoint ids with a directory under ValuesDir, in order; none when
  // ValuesDir is absent. Other names are skipped.
  Result<std::vector<int64_t>> Ids();
  // The names in checkpoint `checkpoint_id`'s directory; none when absent.
  Status List(int64_t checkpoint_id, std::vector<std::string>* names);
  // Removes the directory's value files and then, when nothing else is in it,
  // the directory (durably). Entries that are not value files are not
  // ckptdb's: they stay, and so does the directory. OK when absent.
  Status Remove(int64_t checkpoint_id);
  // Adds to `stray` the paths of the value files in checkpoint
  // `checkpoint_id`'s directory that are not in `named` (the value files its
  // table files point into).
  Status AddStray(int64_t checkpoint_id,
                  const std::vector<ValueFileExtent>& named,
                  std::vector<std::string>* stray);
  // "value file P is missing" or "value file P holds N bytes, its chunks need
  // M" for the first of `files` that is not whole; empty when all are.
  Result<std::string> FirstLoss(const std::vector<ValueFileExtent>& files);

 private:
  StoreFileSystem& fs_;
  const std::string path_;
};

// Removes a deleted checkpoint's files on a thread of its own, for a delete
// whose caller should not wait for them (a retention policy's delete inside a
// save: on tmpfs, unlinking 1 GiB takes about 60 ms, the kernel freeing its
// pages): its value directories, and its chunk table files, which the delete
// linked under the staging directory before RocksDB dropped them (RocksDB's
// own unlink then only drops a name). The chunks are gone from the database
// when a removal starts, so these are garbage whether it finishes or not:
// what it leaves, failed or cut short by a crash, the next save or read-write
// open collects (RemoveUnusedValueDirs; a read-write open empties the staging
// directory). One batch at a time, on a thread of lower priority
// (core/thread_priority.h). Thread-safe.
class FileRemover {
 public:
  // What one delete leaves to remove, and through what.
  struct Batch {
    std::vector<int64_t> value_dirs;  // checkpoint ids (ValueDirectories)
    std::vector<std::string> files;   // paths
    std::shared_ptr<StoreFileSystem> fs;
    std::shared_ptr<rocksdb::Logger> log;  // hears of each failure; may be null
    bool empty() const { return value_dirs.empty() && files.empty(); }
  };

  FileRemover() = default;
  FileRemover(const FileRemover&) = delete;
  FileRemover& operator=(const FileRemover&) = delete;
  ~FileRemover() { Wait(); }

  // Removes `batch` in the store at `store_path` once the batch under way is
  // done; on this thread when no thread can be started.
  void Start(std::string store_path, Batch batch);
  // Returns once no removal is under way.
  void Wait();
  // Whether a removal failed since the last call (what failed stays for the
  // store to collect).
  bool TakeFailure() { return failed_.exchange(false); }

 private:
  // The removal itself, on whichever thread runs it.
  void Remove(const std::string& store_path, const Batch& batch);
  // Wait, with mu_ held.
  void WaitLocked();

  std::mutex mu_;
  std::future<void> running_;
  std::atomic<bool> failed_{false};
};

// Appends chunk values to one value file through the store's file system
// (every call can be failed by a test). The file is created on the first
// Append. Chunks of kGatheredBelowBytes or more are written at once, straight
// from the caller's memory; smaller ones are gathered into a buffer of
// kGatherBytes and written together (a state of many small tensors made one
// write call a chunk), so a failure to write one may be reported by a later
// call. Not thread-safe.
class ValueFileWriter {
 public:
  ValueFileWriter(std::shared_ptr<StoreFileSystem> fs, std::string store_path,
                  int64_t checkpoint_id, int32_t rank, uint32_t part);
  ~ValueFileWriter();

  static constexpr size_t kGatheredBelowBytes = size_t{64} << 10;
  static constexpr size_t kGatherBytes = size_t{1} << 20;

  // Appends `bytes`; returns the pointer to them.
  Result<ValuePointer> Append(std::string_view bytes);
  // Appends `bytes` while hashing them (DigestInBlocks, with the content hash
  // when `content`): each block is written right after it is hashed, so the
  // write reads it from the cache. Sets `digest`.
  Result<ValuePointer> AppendHashing(std::string_view bytes, bool content,
                                     ChunkDigest* digest);
  // Removes the bytes of `last`, the pointer the latest append returned, from
  // the end of the file (from the buffer when they are still there).
  Status DropLast(const ValuePointer& last);
  // Writes what is gathered, syncs and closes the file, then syncs the
  // directories that name it, up to the store directory. A no-op when nothing
  // was appended.
  Status Finish();
  // Closes and removes the file (best effort).
  void Abandon();

  const std::string& path() const { return path_; }
  // The file's name relative to ValuesDir.
  std::string name() const { return ValueFileName(checkpoint_id_, id_); }

 private:
  Status Create();
  // Appends `size` bytes of a chunk of `chunk_bytes` (all of it, or one block
  // of it): into the buffer, or (after what is gathered) to the file.
  Status Write(const char* block, size_t size, size_t chunk_bytes);
  // Writes the buffer's bytes to the file and empties it.
  Status WriteGathered();
  // Writes `size` bytes at `at`; errors name `what_bytes`.
  Status WriteAt(const char* block, size_t size, uint64_t at,
                 size_t what_bytes);
  // Starts write-back of what was appended since it last started, once that
  // is kWriteBackBytes or more.
  Status StartWriteBack();

  std::shared_ptr<StoreFileSystem> fs_;
  const std::string store_path_;
  const int64_t checkpoint_id_;
  // rank, part and nonce of this writer's pointers.
  const ValuePointer id_;
  const std::string path_;
  std::unique_ptr<rocksdb::FSWritableFile> file_;
  // The file's length with the gathered bytes, which are its last.
  uint64_t size_ = 0;
  std::vector<char> gathered_;
  // Bytes appended since write-back was last started (RangeSync).
  uint64_t unsynced_ = 0;
  uint64_t synced_to_ = 0;
};

}  // namespace ckptdb::storage
