#include "engine/save/snapshot_ring.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace ckptdb::engine {

SnapshotRing::SnapshotRing(char* memory, uint64_t size, size_t chunks)
    : memory_(memory), size_(size), copies_(chunks) {}

SnapshotRing::SnapshotRing(char* memory, const std::vector<uint64_t>& sizes)
    : memory_(memory),
      size_(std::accumulate(sizes.begin(), sizes.end(), uint64_t{0})),
      places_(sizes.size()),
      claims_(sizes.size(), Claim::kOpen),
      copies_(sizes.size()) {
  uint64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    places_[i] = at;
    at += sizes[i];
  }
}

Result<SnapshotRing::Source> SnapshotRing::Take(size_t i) {
  if (shared()) {
    std::lock_guard lock(mu_);
    if (claims_[i] == Claim::kOpen) {
      claims_[i] = Claim::kDirect;
      ++direct_in_flight_;
      return Source{nullptr, true};
    }
  }
  CKPTDB_ASSIGN_OR_RETURN(const char* data, Wait(i));
  return Source{data, false};
}

void SnapshotRing::DirectDone(size_t i) {
  std::lock_guard lock(mu_);
  if (claims_[i] != Claim::kDirect) return;
  claims_[i] = Claim::kDirectDone;
  if (--direct_in_flight_ == 0) cv_.notify_all();
}

char* SnapshotRing::ClaimCopy(size_t i) {
  std::lock_guard lock(mu_);
  if (claims_[i] != Claim::kOpen) return nullptr;
  claims_[i] = Claim::kCopy;
  return memory_ + places_[i];
}

void SnapshotRing::WaitForDirect() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return direct_in_flight_ == 0; });
}

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
  if (shared()) return;  // every chunk keeps its place
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
