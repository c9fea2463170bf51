#pragma once

// Test utility: file-system hooks (ckptdb/file_system_hooks.h) that make the
// store's file operations fail on demand, the way a failing disk or a full
// file system would:
//
//   auto faults = std::make_shared<ckptdb::testing::FaultInjector>();
//   ckptdb::Options options;
//   options.file_system_hooks = faults;
//   faults->Arm({.nth = 7});            // the 7th file operation fails, EIO
//   faults->Arm({.nth = 1, .from_nth_on = true,
//                .ops = FileOpMask(FileOp::kWrite),
//                .error = ENOSPC});     // every write fails: a full disk
//
// Thread-safe.

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/file_system_hooks.h"

namespace ckptdb::testing {

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
  std::string path_contains{};
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

class FaultInjector : public FileSystemHooks {
 public:
  // Starts counting from zero under `rule`; forgets earlier faults.
  void Arm(const FaultRule& rule);
  // Stops failing calls (counting goes on).
  void Disarm();

  // 0 to let the operation run, or the errno to fail it with. `bytes` is what
  // a write adds to the file system (0 otherwise).
  int BeforeOperation(FileOp op, std::string_view path,
                      uint64_t bytes) override;
  // A file of `bytes` is being deleted (returns its space to a `free_bytes`
  // disk).
  void Freeing(std::string_view path, uint64_t bytes) override;

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

}  // namespace ckptdb::testing
