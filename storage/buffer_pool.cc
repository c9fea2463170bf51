#include "storage/buffer_pool.h"

#include <cstdlib>
#include <new>

namespace ckptdb::storage {
namespace {

// Every buffer starts with a header recording its capacity; callers get the
// bytes after it, kHeader-aligned.
constexpr size_t kHeader = 64;
constexpr size_t kGranule = size_t{64} << 10;

size_t& CapacityOf(void* base) { return *static_cast<size_t*>(base); }

}  // namespace

BufferPool::~BufferPool() {
  for (auto& [capacity, base] : free_) std::free(base);
}

void* BufferPool::Allocate(size_t size) {
  const size_t capacity =
      size < kMinPooled ? size : (size + kGranule - 1) / kGranule * kGranule;
  void* base = nullptr;
  if (capacity >= kMinPooled) {
    std::lock_guard lock(mu_);
    // The smallest free buffer that fits, unless it would waste over a quarter.
    auto it = free_.lower_bound(capacity);
    if (it != free_.end() && it->first <= capacity + capacity / 4) {
      base = it->second;
      retained_ -= it->first;
      free_.erase(it);
    }
  }
  if (base == nullptr) {
    // aligned_alloc wants a multiple of the alignment.
    base = std::aligned_alloc(
        kHeader, (kHeader + capacity + kHeader - 1) / kHeader * kHeader);
    if (base == nullptr) throw std::bad_alloc();
    CapacityOf(base) = capacity;
  }
  return static_cast<char*>(base) + kHeader;
}

void BufferPool::Deallocate(void* p) {
  if (p == nullptr) return;
  void* base = static_cast<char*>(p) - kHeader;
  const size_t capacity = CapacityOf(base);
  if (capacity >= kMinPooled) {
    std::lock_guard lock(mu_);
    if (retained_ + capacity <= retain_bytes_) {
      free_.emplace(capacity, base);
      retained_ += capacity;
      return;
    }
  }
  std::free(base);
}

size_t BufferPool::UsableSize(void* p, size_t) const {
  return CapacityOf(static_cast<char*>(p) - kHeader);
}

size_t BufferPool::retained_bytes() const {
  std::lock_guard lock(mu_);
  return retained_;
}

}  // namespace ckptdb::storage
