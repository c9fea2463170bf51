#pragma once

#include <rocksdb/memory_allocator.h>

#include <cstddef>
#include <map>
#include <mutex>

namespace ckptdb::storage {

// RocksDB's allocator for the blocks it reads: a chunk read without the block
// cache lands in a fresh buffer of the chunk's size. Plain malloc hands such
// sizes out as new mappings (or trims them back), so every read paid for
// zeroing fresh pages. The pool keeps freed large buffers, up to
// `retain_bytes` in all, for the next read of a similar size; it then holds at
// most what was in use at once. Thread-safe.
class BufferPool : public rocksdb::MemoryAllocator {
 public:
  // Buffers below this size are plain malloc.
  static constexpr size_t kMinPooled = size_t{64} << 10;

  explicit BufferPool(size_t retain_bytes) : retain_bytes_(retain_bytes) {}
  ~BufferPool() override;

  const char* Name() const override { return "ckptdb.BufferPool"; }
  void* Allocate(size_t size) override;
  void Deallocate(void* p) override;
  size_t UsableSize(void* p, size_t allocation_size) const override;

  // Bytes held in free buffers.
  size_t retained_bytes() const;

 private:
  const size_t retain_bytes_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // capacity -> buffer base
  size_t retained_ = 0;
};

}  // namespace ckptdb::storage
