#pragma once

// The host memory behind the snapshots of asynchronous saves (DB::SaveAsync,
// async_save.cc), kept from one save to the next.

#include <cstdint>
#include <mutex>
#include <thread>

#include "ckptdb/status.h"

namespace ckptdb::engine {

// Fresh memory costs far more than a copy the first time it is written: a
// page fault per page and, on a VM, the host backing each page (the first
// SaveAsync of 512 MiB stalled 1.7-2.1 s against 0.04-0.08 s for a memcpy,
// bench/README.md). So the memory is mapped with transparent huge pages where
// the kernel offers them (a fault per 2 MiB) and written once before a
// snapshot copies into it: on a thread started by Prepare (at open, when
// Options::snapshot_bytes says how much), or else after the first save that
// needs it, which copies into pages not yet touched (Get) while its
// writers write most chunks straight from the caller's memory, and touches
// the rest once it has returned (TouchInBackground). Thread-safe.
class SnapshotMemory {
 public:
  SnapshotMemory() = default;
  SnapshotMemory(const SnapshotMemory&) = delete;
  SnapshotMemory& operator=(const SnapshotMemory&) = delete;
  // Waits for a Prepare under way.
  ~SnapshotMemory();

  // Maps and touches `bytes` on a thread of its own; returns at once. A
  // failure there is not reported: Get then maps the memory itself.
  void Prepare(uint64_t bytes);

  // At least `bytes` of memory for a snapshot that starts now: what Prepare
  // or an earlier Get set up (waiting for Prepare to finish), else a fresh
  // mapping in place of the smaller region, its pages not touched yet
  // (`*fresh` is then true): the copy into it faults them in, and
  // TouchInBackground touches the rest. Valid until the next Get.
  Result<char*> Get(uint64_t bytes, bool* fresh);

  // Touches the held memory's pages that nothing has written yet, on a thread
  // of its own; returns at once. Get waits for it. Concurrent
  // reads and writes of the memory are safe: a page is faulted in, never
  // written (where the kernel cannot do that, Linux < 5.14, nothing is done).
  void TouchInBackground();

  // Bytes held (0 before the first Get or finished Prepare).
  uint64_t size();

 private:
  struct Region {
    char* data = nullptr;
    uint64_t size = 0;
  };
  static Result<Region> Map(uint64_t bytes);
  static Result<Region> MapTouched(uint64_t bytes);
  static void Unmap(Region region);
  void JoinPreparing();

  std::mutex mu_;  // guards region_ and preparing_
  std::thread preparing_;
  Region region_;
};

}  // namespace ckptdb::engine
