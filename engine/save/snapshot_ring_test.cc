#include "engine/save/snapshot_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "planner/write_parts.h"

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

// The shared mode as SaveAsync runs it: each part's writer takes its chunks
// in order, reading the caller's memory for those it takes directly, while
// the producer claims and copies the others from the back of every part.
// Once WaitForDirect returns, the caller's memory is overwritten: a writer
// that read it afterwards, or a chunk written twice or never, shows.
void RunShared(size_t chunks, int parts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint64_t> sizes(chunks);
  for (auto& n : sizes) n = 1 + rng() % 300;
  std::vector<std::vector<char>> caller(chunks);
  for (size_t i = 0; i < chunks; ++i) {
    caller[i].resize(sizes[i]);
    for (uint64_t k = 0; k < sizes[i]; ++k) caller[i][k] = Pattern(i, k);
  }
  std::vector<size_t> begins{0};
  for (int p = 1; p < parts; ++p) begins.push_back(chunks * p / parts);
  begins.push_back(chunks);
  std::vector<char> memory(std::accumulate(sizes.begin(), sizes.end(), 0ul));
  SnapshotRing ring(memory.data(), sizes);
  std::vector<int> bad(parts, 0), direct(parts, 0);
  std::vector<std::thread> writers;
  for (int p = 0; p < parts; ++p) {
    writers.emplace_back([&, p] {
      std::mt19937 slow(seed * 7 + p);
      for (size_t i = begins[p]; i < begins[p + 1]; ++i) {
        Result<SnapshotRing::Source> source = ring.Take(i);
        ASSERT_TRUE(source.ok()) << source.status().ToString();
        const char* data = source->direct ? caller[i].data() : source->data;
        if (slow() % 4 == 0) std::this_thread::yield();
        for (uint64_t k = 0; k < sizes[i]; ++k)
          bad[p] += data[k] != Pattern(i, k);
        if (source->direct) {
          ++direct[p];
          ring.DirectDone(i);
        } else {
          ring.Release(i);
        }
      }
    });
  }
  for (size_t i : planner::SnapshotCopyOrder(begins)) {
    char* place = ring.ClaimCopy(i);
    if (place == nullptr) continue;
    std::memcpy(place, caller[i].data(), sizes[i]);
    ring.Ready(i, place);
  }
  ring.WaitForDirect();
  for (auto& c : caller) std::fill(c.begin(), c.end(), '\x7f');
  for (auto& t : writers) t.join();
  for (int p = 0; p < parts; ++p) EXPECT_EQ(bad[p], 0) << "writer " << p;
}

TEST(SnapshotRingTest, WritersReadTheCallersMemoryOnlyUntilTheCopyMeetsThem) {
  for (uint32_t seed = 0; seed < 30; ++seed) {
    SCOPED_TRACE(seed);
    RunShared(/*chunks=*/1 + seed * 13 % 200, /*parts=*/1 + seed % 4, seed);
  }
}

TEST(SnapshotRingTest, AChunkClaimedByAWriterIsNotCopied) {
  std::vector<char> memory(64, 0);
  SnapshotRing ring(memory.data(), std::vector<uint64_t>{16, 16, 32});
  Result<SnapshotRing::Source> first = ring.Take(0);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->direct);
  EXPECT_EQ(ring.ClaimCopy(0), nullptr);
  char* second = ring.ClaimCopy(1);
  EXPECT_EQ(second, memory.data() + 16);
  EXPECT_EQ(ring.ClaimCopy(2), memory.data() + 32);
  std::memset(second, 5, 16);
  ring.Ready(1, second);
  Result<SnapshotRing::Source> copied = ring.Take(1);
  ASSERT_TRUE(copied.ok());
  EXPECT_FALSE(copied->direct);
  EXPECT_EQ(copied->data, second);
  ring.DirectDone(0);
  ring.WaitForDirect();  // returns: chunk 0 is written
}

}  // namespace
}  // namespace ckptdb::engine
