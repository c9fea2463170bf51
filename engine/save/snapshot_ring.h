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
//
// Or, when the memory holds every chunk (the shared mode), each chunk has a
// place of its own, and writers may write chunks straight from the caller's
// memory while the caller copies others: a writer Takes its next chunk, which
// is its to write directly unless the caller has claimed it for the copy
// (ClaimCopy). The caller claims chunks from the back of every part
// (planner::SnapshotCopyOrder) and the writers take theirs from the front, so
// that they meet inside each part; WaitForDirect then returns once every chunk
// taken directly is written, after which nothing reads the caller's memory.
class SnapshotRing {
 public:
  // `memory` holds `size` bytes and outlives the ring; `chunks` is the number
  // of chunks that will be copied.
  SnapshotRing(char* memory, uint64_t size, size_t chunks);
  // The shared mode: chunk i (in write order) of `sizes[i]` bytes has the
  // place after chunk i - 1's in `memory`, which holds them all.
  SnapshotRing(char* memory, const std::vector<uint64_t>& sizes);

  // Writers: where chunk `i`'s bytes come from.
  struct Source {
    // The copy, or nullptr when the writer reads the caller's memory.
    const char* data = nullptr;
    // The writer writes the chunk from the caller's memory, then calls
    // DirectDone(i) (not Release).
    bool direct = false;
  };
  // Writers: chunk `i` to write directly (the shared mode, while the caller
  // has not claimed it), else its copy once ready (Wait).
  Result<Source> Take(size_t i);
  // Writers: chunk `i`, taken directly, is written (or failed): the caller's
  // memory is no longer read for it.
  void DirectDone(size_t i);

  // Producer, shared mode: chunk `i`'s place to copy it into, or nullptr when
  // a writer has taken it directly. Ready(i, place) follows.
  char* ClaimCopy(size_t i);
  // Producer, shared mode: waits until every chunk taken directly is written.
  // REQUIRES: every chunk claimed or taken (so no writer takes one later).
  void WaitForDirect();

  // Producer: room for the `n` bytes of chunk `i`, waiting while the ring is
  // full.
  char* Allocate(size_t i, uint64_t n);
  // Producer: chunk `i`'s bytes are at `data` (what Allocate returned).
  void Ready(size_t i, const char* data);
  // Producer: chunk `i` and every later one not yet copied fail with `error`.
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

  bool shared() const { return !claims_.empty(); }
  // Where `n` bytes fit after the newest live copy, if they do.
  bool Fits(uint64_t n, uint64_t* at) const;

  // Shared mode: each chunk's state, and its place in memory_.
  enum class Claim : uint8_t { kOpen, kDirect, kDirectDone, kCopy };

  char* const memory_;
  const uint64_t size_;
  // Empty outside the shared mode.
  std::vector<uint64_t> places_;
  std::vector<Claim> claims_;
  size_t direct_in_flight_ = 0;  // taken directly, not yet written
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Copy> copies_;
  std::deque<Live> live_;
  uint64_t first_slot_ = 0, next_slot_ = 0;
  size_t failed_from_ = SIZE_MAX;
  Status error_;
};

}  // namespace ckptdb::engine
