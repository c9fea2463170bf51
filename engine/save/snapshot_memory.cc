#include "engine/save/snapshot_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace ckptdb::engine {
namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Alignment of the mapping: the size of a transparent huge page on x86-64
// and arm64 (4 KiB base pages), so that the whole region can use them.
constexpr uint64_t kHugePage = uint64_t{2} << 20;

}  // namespace

SnapshotMemory::~SnapshotMemory() {
  JoinPreparing();
  Unmap(region_);
}

void SnapshotMemory::JoinPreparing() {
  std::thread preparing;
  {
    std::lock_guard lock(mu_);
    preparing = std::move(preparing_);
  }
  if (preparing.joinable()) preparing.join();
}

void SnapshotMemory::Prepare(uint64_t bytes) {
  JoinPreparing();
  std::lock_guard lock(mu_);
  if (region_.size >= bytes) return;
  preparing_ = std::thread([this, bytes] {
    Result<Region> mapped = MapTouched(bytes);
    if (!mapped.ok()) return;
    std::lock_guard lock(mu_);
    if (region_.size >= mapped->size) {
      Unmap(*mapped);
      return;
    }
    Unmap(region_);
    region_ = *mapped;
  });
}

uint64_t SnapshotMemory::size() {
  std::lock_guard lock(mu_);
  return region_.size;
}

Result<char*> SnapshotMemory::Get(uint64_t bytes, bool* fresh) {
  JoinPreparing();
  std::lock_guard lock(mu_);
  *fresh = region_.size < bytes;
  if (*fresh) {
    CKPTDB_ASSIGN_OR_RETURN(Region mapped, Map(bytes));
    Unmap(region_);
    region_ = mapped;
  }
  return region_.data;
}

void SnapshotMemory::TouchInBackground() {
  JoinPreparing();
  std::lock_guard lock(mu_);
  if (region_.data == nullptr) return;
  const Region region = region_;
  // The region stays mapped until this thread is joined: Get, Prepare and
  // the destructor join it first.
  preparing_ = std::thread([region] {
    (void)::madvise(region.data, region.size, MADV_POPULATE_WRITE);
  });
}

Result<SnapshotMemory::Region> SnapshotMemory::Map(uint64_t bytes) {
  const uint64_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // One huge page more, to align the start.
  const uint64_t mapped = size + kHugePage;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::IOError(
        "mapping " + std::to_string(bytes) +
        " bytes of snapshot memory (Options::snapshot_bytes bounds it): " +
        std::strerror(errno));
  }
  auto* base = static_cast<char*>(p);
  const uint64_t head =
      (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
  if (head > 0) ::munmap(base, head);
  if (mapped - head > size) ::munmap(base + head + size, mapped - head - size);
  char* data = base + head;
  // Advice only: without transparent huge pages the memory works the same.
  (void)::madvise(data, size, MADV_HUGEPAGE);
  return Region{data, size};
}

Result<SnapshotMemory::Region> SnapshotMemory::MapTouched(uint64_t bytes) {
  CKPTDB_ASSIGN_OR_RETURN(const Region region, Map(bytes));
  // Write every page once now, not in the snapshot's copy. The kernel does it
  // in one call where it can; otherwise a byte per base page.
  if (::madvise(region.data, region.size, MADV_POPULATE_WRITE) != 0) {
    const long page = ::sysconf(_SC_PAGESIZE);
    const uint64_t step = page > 0 ? static_cast<uint64_t>(page) : 4096;
    for (uint64_t at = 0; at < region.size; at += step)
      static_cast<volatile char*>(region.data)[at] = 0;
  }
  return region;
}

void SnapshotMemory::Unmap(Region region) {
  if (region.data != nullptr) ::munmap(region.data, region.size);
}

}  // namespace ckptdb::engine
