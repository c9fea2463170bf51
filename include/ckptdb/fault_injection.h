#pragma once

// Testing hook: makes the store's file operations fail on demand, the way a
// failing disk or a full file system would. Production code passes no
// injector (Options::fault_injector stays nullptr) and pays nothing.
//
//   auto faults = std::make_shared<ckptdb::FaultInjector>();
//   ckptdb::Options options;
//   options.fault_injector = faults;
//   faults->Arm({.nth = 7});            // the 7th file operation fails, EIO
//   faults->Arm({.nth = 1, .from_nth_on = true, .ops =
//   FileOpMask(FileOp::kWrite),
//                .error = ENOSPC});     // every write fails: a full disk
//
// Every file operation of a store goes through it: RocksDB's (through a
// FileSystem wrapper) and ckptdb's own (staged files, direct chunk reads, the
// commit journal, markers, directory syncs). Thread-safe.

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ckptdb {

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

const char* FileOpName(FileOp op);

// Which calls fail.
struct FaultRule {
  // The call (1-based, counting only calls whose operation is in `ops`) that
  // fails; 0 fails none and only counts.
  int64_t nth = 0;
  // Fail every counted call from the nth on, not just the nth.
  bool from_nth_on = false;
  // The operations counted (FileOpMask bits).
  uint32_t ops = kAllFileOps;
  // Only calls on paths containing this are counted ("" counts all), e.g.
  // "MANIFEST" or "/LOG".
  std::string path_contains;
  // The errno a failed call reports: EIO or ENOSPC.
  int error = EIO;
  // A file system with this many free bytes: writes that do not fit fail with
  // ENOSPC, deleting a file frees its size. Negative: no limit. Applies on top
  // of `nth`.
  int64_t free_bytes = -1;
};

// One failed call, for tests to compare with the error the caller saw.
struct InjectedFault {
  FileOp op;
  std::string path;
  int error;
};

class FaultInjector {
 public:
  // Starts counting from zero under `rule`; forgets earlier faults.
  void Arm(const FaultRule& rule);
  // Stops failing calls (counting goes on).
  void Disarm();

  // Called before each file operation: 0 to let it run, or the errno to fail
  // it with. `bytes` is what a write adds to the file system (0 otherwise).
  int Check(FileOp op, std::string_view path, uint64_t bytes = 0);
  // A file of `bytes` was deleted (returns its space to a `free_bytes` disk).
  void Freed(uint64_t bytes);

  // Calls counted since Arm.
  int64_t calls() const;
  std::vector<InjectedFault> injected() const;

 private:
  mutable std::mutex mu_;
  FaultRule rule_;
  bool armed_ = false;
  int64_t calls_ = 0;
  std::vector<InjectedFault> injected_;
};

}  // namespace ckptdb
