#include "planner/write_parts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ckptdb::planner {
namespace {

TEST(WritePartsTest, SmallWritesAreOnePart) {
  const std::vector<uint64_t> bytes{10, 20, 30};
  EXPECT_EQ(SplitIntoParts(bytes, 8), (std::vector<size_t>{0, 3}));
  EXPECT_EQ(SplitIntoParts({}, 8), (std::vector<size_t>{0, 0}));
}

TEST(WritePartsTest, APartPerShareOfTheTotalAtMostThreads) {
  const std::vector<uint64_t> bytes(8, 100);
  EXPECT_EQ(SplitIntoParts(bytes, 4, 200),
            (std::vector<size_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(SplitIntoParts(bytes, 2, 200), (std::vector<size_t>{0, 4, 8}));
  EXPECT_EQ(SplitIntoParts(bytes, 8, 400), (std::vector<size_t>{0, 4, 8}));
}

TEST(WritePartsTest, ManySmallChunksMakeAPartPerShareOfTheirCount) {
  // 40 MB in 10,000 chunks: under a part's bytes, over a part's chunks.
  const std::vector<uint64_t> bytes(10000, 4096);
  EXPECT_EQ(SplitIntoParts(bytes, 2), (std::vector<size_t>{0, 5000, 10000}));
  EXPECT_EQ(SplitIntoParts(bytes, 8).size(), 10000 / kWritePartChunks + 1);
  // The same bytes in a few chunks stay one part.
  EXPECT_EQ(SplitIntoParts(std::vector<uint64_t>(3, 40000000 / 3), 8),
            (std::vector<size_t>{0, 3}));
}

TEST(WritePartsTest, AChunkLargerThanAShareLeavesPartsEmpty) {
  // 1000 of 1100 bytes in the first chunk: the next chunk begins past the
  // shares of parts 1 and 2, so both begin there and part 1 is empty.
  const std::vector<uint64_t> bytes{1000, 50, 50};
  EXPECT_EQ(SplitIntoParts(bytes, 3, 100), (std::vector<size_t>{0, 1, 1, 3}));
}

// The rule stated in the header, checked element by element: chunk i is in
// the last part p whose share begins at or before the bytes written before i.
TEST(WritePartsTest, EveryChunkIsInThePartItsBytesFallIn) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = rng() % 12;
    std::vector<uint64_t> bytes(n);
    for (uint64_t& b : bytes)
      b = rng() % 4 == 0 ? 0 : rng() % (rng() % 2 ? 50 : 2000);
    const int threads = 1 + static_cast<int>(rng() % 6);
    const uint64_t part_bytes = 1 + rng() % 400;
    const size_t part_chunks = 1 + rng() % (rng() % 2 ? 4 : 40);
    const std::vector<size_t> begins =
        SplitIntoParts(bytes, threads, part_bytes, part_chunks);
    uint64_t total = 0;
    for (uint64_t b : bytes) total += b;
    const size_t parts = begins.size() - 1;
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_GE(parts, 1u);
    EXPECT_LE(parts, std::max<size_t>(1, std::min<size_t>(threads, n)));
    EXPECT_EQ(parts, std::clamp<size_t>(
                         std::max<size_t>(total / part_bytes, n / part_chunks),
                         1, std::max<size_t>(1, std::min<size_t>(threads, n))));
    EXPECT_EQ(begins.front(), 0u);
    EXPECT_EQ(begins.back(), n);
    EXPECT_TRUE(std::is_sorted(begins.begin(), begins.end()));
    uint64_t before = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t want = 0;
      for (size_t q = 1; q < parts; ++q)
        if (before >= total * q / parts) want = q;
      EXPECT_LE(begins[want], i) << "chunk " << i;
      EXPECT_LT(i, begins[want + 1]) << "chunk " << i;
      before += bytes[i];
    }
  }
}

TEST(WritePartsTest, TheSnapshotCopiesFromTheBackOfEveryPartInTurn) {
  EXPECT_EQ(SnapshotCopyOrder(std::vector<size_t>{0, 3, 3, 5}),
            (std::vector<size_t>{2, 4, 1, 3, 0}));
  EXPECT_EQ(SnapshotCopyOrder(std::vector<size_t>{0, 0}),
            (std::vector<size_t>{}));
  EXPECT_EQ(SnapshotCopyOrder(std::vector<size_t>{}), (std::vector<size_t>{}));
}

// Every chunk once; within a part from its back to its front; and the k-th
// chunk from the back of a part comes before the (k+1)-th from the back of
// any part.
TEST(WritePartsTest, TheSnapshotCopyOrderHoldsEveryChunkOnceBackToFront) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = rng() % 20;
    std::vector<uint64_t> bytes(n);
    for (uint64_t& b : bytes) b = rng() % 300;
    const std::vector<size_t> begins =
        SplitIntoParts(bytes, 1 + static_cast<int>(rng() % 5), 1 + rng() % 200);
    const std::vector<size_t> order = SnapshotCopyOrder(begins);
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<size_t> all(n);
    for (size_t i = 0; i < n; ++i) all[i] = i;
    ASSERT_EQ(sorted, all);
    auto from_back = [&](size_t i) {
      size_t p = 0;
      while (begins[p + 1] <= i) ++p;
      return begins[p + 1] - 1 - i;
    };
    for (size_t k = 1; k < order.size(); ++k)
      EXPECT_LE(from_back(order[k - 1]), from_back(order[k]));
  }
}

}  // namespace
}  // namespace ckptdb::planner
