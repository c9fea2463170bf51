#include "engine/save/snapshot_ring.h"

#include <algorithm>
#include <utility>

namespace ckptdb::engine {

SnapshotRing::SnapshotRing(char* memory, uint64_t size, size_t chunks)
    : memory_(memory), size_(size), copies_(chunks) {}

char* SnapshotRing::Allocate(size_t i, uint64_t n) {
  std::unique_lock lock(mu_);
  uint64_t at = 0;
  cv_.wait(lock, [&] { return Fits(n, &at); });
  live_.push_back({i, at, n, false});
  copies_[i].slot = next_slot_++;
  return memory_ + at;
}

void SnapshotRing::Ready(size_t i, const char* data) {
  std::lock_guard lock(mu_);
  copies_[i].data = data;
  cv_.notify_all();
}

void SnapshotRing::Fail(size_t i, Status error) {
  std::lock_guard lock(mu_);
  failed_from_ = std::min(failed_from_, i);
  error_ = std::move(error);
  cv_.notify_all();
}

Result<const char*> SnapshotRing::Wait(size_t i) {
  std::unique_lock lock(mu_);
  cv_.wait(lock,
           [&] { return copies_[i].data != nullptr || i >= failed_from_; });
  if (copies_[i].data == nullptr) return error_;
  return copies_[i].data;
}

void SnapshotRing::Release(size_t i) {
  std::lock_guard lock(mu_);
  live_[copies_[i].slot - first_slot_].released = true;
  while (!live_.empty() && live_.front().released) {
    live_.pop_front();
    ++first_slot_;
  }
  cv_.notify_all();
}

bool SnapshotRing::Fits(uint64_t n, uint64_t* at) const {
  if (live_.empty()) return *at = 0, true;
  const uint64_t head = live_.front().at;
  const uint64_t tail = live_.back().at + live_.back().n;
  if (live_.back().at >= head) {  // live bytes are [head, tail)
    if (size_ - tail >= n) return *at = tail, true;
    if (head >= n) return *at = 0, true;
    return false;
  }
  // Wrapped: live bytes are [head, end) and [0, tail).
  if (head - tail >= n) return *at = tail, true;
  return false;
}

}  // namespace ckptdb::engine
