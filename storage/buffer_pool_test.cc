#include "storage/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace ckptdb::storage {
namespace {

TEST(BufferPool, ReusesFreedLargeBuffers) {
  BufferPool pool(size_t{16} << 20);
  void* a = pool.Allocate((size_t{1} << 20) + 5);
  std::memset(a, 1, (size_t{1} << 20) + 5);
  EXPECT_GE(pool.UsableSize(a, 0), (size_t{1} << 20) + 5);
  pool.Deallocate(a);
  EXPECT_GT(pool.retained_bytes(), size_t{1} << 20);
  void* b = pool.Allocate((size_t{1} << 20) + 100);
  EXPECT_EQ(a, b);
  EXPECT_EQ(pool.retained_bytes(), 0u);
  pool.Deallocate(b);
}

TEST(BufferPool, DoesNotHandOutFarLargerBuffers) {
  BufferPool pool(size_t{64} << 20);
  void* big = pool.Allocate(size_t{8} << 20);
  pool.Deallocate(big);
  void* small = pool.Allocate(size_t{1} << 20);
  EXPECT_NE(big, small);
  pool.Deallocate(small);
  EXPECT_EQ(pool.retained_bytes(), (size_t{8} << 20) + (size_t{1} << 20));
}

TEST(BufferPool, RetainsAtMostItsLimit) {
  BufferPool pool(size_t{2} << 20);
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(pool.Allocate(size_t{1} << 20));
  for (void* p : held) pool.Deallocate(p);
  EXPECT_EQ(pool.retained_bytes(), size_t{2} << 20);
}

TEST(BufferPool, SmallBuffersAreNotPooled) {
  BufferPool pool(size_t{2} << 20);
  void* p = pool.Allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  pool.Deallocate(p);
  EXPECT_EQ(pool.retained_bytes(), 0u);
  pool.Deallocate(nullptr);
}

TEST(BufferPool, ConcurrentUse) {
  BufferPool pool(size_t{8} << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 200; ++i) {
        const size_t n = (size_t{1} << 16) * (1 + (i + t) % 8);
        auto* p = static_cast<unsigned char*>(pool.Allocate(n));
        p[0] = p[n - 1] = static_cast<unsigned char>(t);
        ASSERT_EQ(p[n - 1], t);
        pool.Deallocate(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(pool.retained_bytes(), size_t{8} << 20);
}

}  // namespace
}  // namespace ckptdb::storage
