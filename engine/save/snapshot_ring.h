#pragma once

// The snapshot memory of an asynchronous save (DB::SaveAsync, async_save.cc).

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb::engine {

// The host copies of a rank's chunks for an asynchronous save, in a ring of
// memory: the caller's thread copies chunk after chunk (in write order) while
// there is room, the writers wait for each chunk's copy and release it once
// written; room comes back as the oldest copies are released. Holds at most
// the ring's bytes. REQUIRES: every chunk fits in the ring; chunks are
// allocated in order 0, 1, 2, ...
class SnapshotRing {
 public:
  // `memory` holds `size` bytes and outlives the ring; `chunks` is the number
  // of chunks that will be copied.
  SnapshotRing(char* memory, uint64_t size, size_t chunks);

  // Producer: room for the `n` bytes of chunk `i`, waiting while the ring is
  // full.
  char* Allocate(size_t i, uint64_t n);
  // Producer: chunk `i`'s bytes are at `data` (what Allocate returned).
  void Ready(size_t i, const char* data);
  // Producer: chunk `i` and every later one fail with `error`.
  void Fail(size_t i, Status error);

  // Writers: the bytes of chunk `i`, once copied, or the producer's error.
  Result<const char*> Wait(size_t i);
  // Writers: chunk `i` is written; its room may be reused once every older
  // chunk's is released too.
  void Release(size_t i);

 private:
  struct Live {
    size_t chunk;
    uint64_t at, n;
    bool released;
  };
  struct Copy {
    const char* data = nullptr;
    // Index of its Live among all allocations.
    uint64_t slot = 0;
  };

  // Where `n` bytes fit after the newest live copy, if they do.
  bool Fits(uint64_t n, uint64_t* at) const;

  char* const memory_;
  const uint64_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Copy> copies_;
  std::deque<Live> live_;
  uint64_t first_slot_ = 0, next_slot_ = 0;
  size_t failed_from_ = SIZE_MAX;
  Status error_;
};

}  // namespace ckptdb::engine
