#pragma once

// The file-system seam of a store: hooks that see every file operation of the
// store before it runs and may fail it, the way a failing disk or a full file
// system would. Uses: tracing a store's I/O, enforcing a quota, testing how an
// application copes with a failing disk.
//
//   // Fails every write to the store once `limit` bytes have been written.
//   class WriteQuota : public ckptdb::FileSystemHooks {
//    public:
//     explicit WriteQuota(uint64_t limit) : left_(limit) {}
//     int BeforeOperation(ckptdb::FileOp op, std::string_view path,
//                         uint64_t bytes) override {
//       if (op != ckptdb::FileOp::kWrite) return 0;
//       std::lock_guard lock(mu_);
//       if (bytes > left_) return ENOSPC;
//       left_ -= bytes;
//       return 0;
//     }
//     void Freeing(std::string_view path, uint64_t bytes) override {
//       std::lock_guard lock(mu_);
//       left_ += bytes;
//     }
//    private:
//     std::mutex mu_;
//     uint64_t left_;
//   };
//
//   ckptdb::Options options;
//   options.file_system_hooks = std::make_shared<WriteQuota>(uint64_t{1} <<
//   30);
//
// Every file operation of a store goes through the hooks: RocksDB's (table
// files, MANIFEST, WAL, info log) and ckptdb's own (staged files, value files,
// direct chunk reads, the commit journal, markers, directory syncs). The one
// exception: as a read-write handle opens, the store's path is resolved and
// its directory looked at (stat) directly, to know it as one store however
// its path is spelled.

#include <cstdint>
#include <string_view>

namespace ckptdb {

// The kinds of file operation a store performs.
enum class FileOp : uint32_t {
  // Opening or creating a file or directory handle.
  kOpen = 0,
  kRead,
  // Appending or writing bytes (also truncation and preallocation).
  kWrite,
  // fsync / fdatasync of a file.
  kSync,
  // fsync of a directory.
  kSyncDir,
  kClose,
  kRename,
  // Hard links (RocksDB ingests staged files by linking them).
  kLink,
  kDelete,
  kCreateDir,
  // Listing a directory, asking a file's size or existence.
  kStat,
};
inline constexpr int kNumFileOps = 11;

constexpr uint32_t FileOpMask(FileOp op) {
  return uint32_t{1} << static_cast<uint32_t>(op);
}
inline constexpr uint32_t kAllFileOps = (uint32_t{1} << kNumFileOps) - 1;
// The operations that change what is on disk.
inline constexpr uint32_t kMutatingFileOps =
    FileOpMask(FileOp::kOpen) | FileOpMask(FileOp::kWrite) |
    FileOpMask(FileOp::kSync) | FileOpMask(FileOp::kSyncDir) |
    FileOpMask(FileOp::kClose) | FileOpMask(FileOp::kRename) |
    FileOpMask(FileOp::kLink) | FileOpMask(FileOp::kDelete) |
    FileOpMask(FileOp::kCreateDir);

// "open", "read", "write", "sync", "directory sync", "close", "rename", "link",
// "delete", "mkdir" or "stat".
const char* FileOpName(FileOp op);

// Passed in Options::file_system_hooks. Called from any thread of the store
// (its I/O threads, RocksDB's background threads, the caller's), often
// concurrently, so implementations must be thread-safe. They must not call
// back into the store. They run on the I/O path: keep them cheap.
class FileSystemHooks {
 public:
  virtual ~FileSystemHooks() = default;

  // Called before each file operation of the store, with the path it acts on
  // (the source of a rename or link) and, for a write, the bytes it adds (0
  // for other operations). Returns 0 to let the operation run, or the errno
  // to fail it with instead (EIO, ENOSPC, ...). The store treats a failed
  // operation as a real disk error (docs/design.md, "Durability and damage"): a
  // failed read is tried again (three tries in all); otherwise the call of the
  // store that made it fails with an IOError naming the operation, the path and
  // the errno, and nothing committed is lost.
  virtual int BeforeOperation(FileOp op, std::string_view path,
                              uint64_t bytes) = 0;

  // Called when a deletion of file `path` that BeforeOperation let run is
  // about to run, with the bytes it returns to the file system: the file's
  // size when `path` is its last name, else 0 (the store links files under a
  // second name: ingested staged files, deleted tables awaiting removal).
  // Deletions the store holds back (after a failed write the store leaves
  // files in place until it is reopened) are not reported.
  virtual void Freeing(std::string_view path, uint64_t bytes) {
    (void)path;
    (void)bytes;
  }
};

}  // namespace ckptdb
