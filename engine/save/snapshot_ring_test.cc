#include "engine/save/snapshot_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace ckptdb::engine {
namespace {

// The byte at position `k` of chunk `i`.
char Pattern(size_t i, uint64_t k) { return static_cast<char>(i * 31 + k * 7); }

// A producer copies chunks of random sizes into a ring a few chunks large
// while `writers` threads take every writers-th chunk each, in order, check its
// bytes and release it, as a save's parallel writers do. A copy placed over
// bytes not yet released shows as a wrong byte.
void RunRing(uint64_t ring_size, uint64_t max_chunk, size_t chunks, int writers,
             uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint64_t> sizes(chunks);
  for (auto& n : sizes) n = 1 + rng() % max_chunk;
  std::vector<char> memory(ring_size);
  SnapshotRing ring(memory.data(), ring_size, chunks);
  std::vector<std::thread> threads;
  std::vector<int> bad(writers, 0);
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (size_t i = w; i < chunks; i += writers) {
        Result<const char*> data = ring.Wait(i);
        ASSERT_TRUE(data.ok()) << data.status().ToString();
        for (uint64_t k = 0; k < sizes[i]; ++k)
          bad[w] += (*data)[k] != Pattern(i, k);
        ring.Release(i);
      }
    });
  }
  for (size_t i = 0; i < chunks; ++i) {
    char* copy = ring.Allocate(i, sizes[i]);
    ASSERT_GE(copy, memory.data());
    ASSERT_LE(copy + sizes[i], memory.data() + ring_size);
    for (uint64_t k = 0; k < sizes[i]; ++k) copy[k] = Pattern(i, k);
    ring.Ready(i, copy);
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < writers; ++w) EXPECT_EQ(bad[w], 0) << "writer " << w;
}

TEST(SnapshotRingTest, ARingHoldingEverythingNeverWaits) {
  RunRing(/*ring_size=*/64 * 100, /*max_chunk=*/64, /*chunks=*/100,
          /*writers=*/1, 1);
}

TEST(SnapshotRingTest, CopiesWrapAroundWithoutOverwritingUnwrittenOnes) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    SCOPED_TRACE(seed);
    RunRing(/*ring_size=*/3 * 97, /*max_chunk=*/97, /*chunks=*/500,
            /*writers=*/1 + seed % 3, seed);
  }
}

TEST(SnapshotRingTest, AChunkAsLargeAsTheRingWaitsForItToEmpty) {
  RunRing(/*ring_size=*/128, /*max_chunk=*/128, /*chunks=*/200, /*writers=*/2,
          7);
}

TEST(SnapshotRingTest, AFailedCopyFailsItsChunkAndEveryLaterOne) {
  std::vector<char> memory(256);
  SnapshotRing ring(memory.data(), memory.size(), 6);
  for (size_t i = 0; i < 3; ++i) {
    char* copy = ring.Allocate(i, 16);
    std::memset(copy, static_cast<int>(i), 16);
    ring.Ready(i, copy);
  }
  ring.Fail(3, Status::IOError("device copy of chunk 3 failed"));
  for (size_t i = 0; i < 3; ++i) {
    Result<const char*> data = ring.Wait(i);
    ASSERT_TRUE(data.ok());
    EXPECT_EQ((*data)[0], static_cast<char>(i));
    ring.Release(i);
  }
  for (size_t i = 3; i < 6; ++i) {
    Result<const char*> data = ring.Wait(i);
    ASSERT_FALSE(data.ok());
    EXPECT_NE(data.status().message().find("chunk 3"), std::string::npos);
  }
}

}  // namespace
}  // namespace ckptdb::engine
