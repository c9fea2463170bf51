#include "core/memory_overlap.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace ckptdb::planner {
namespace {

// Every byte of `m`, with how many elements hold it.
std::map<uintptr_t, int> BytesByBruteForce(const StridedMemory& m) {
  std::map<uintptr_t, int> bytes;
  const int64_t n = NumElements(m.shape);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat;
    uint64_t offset = 0;
    for (size_t d = m.shape.size(); d-- > 0;) {
      offset += static_cast<uint64_t>(rest % m.shape[d] * m.strides[d]);
      rest /= m.shape[d];
    }
    for (size_t b = 0; b < m.element_bytes; ++b)
      ++bytes[m.base + offset * m.element_bytes + b];
  }
  return bytes;
}

StridedMemory RandomMemory(std::mt19937& rng) {
  StridedMemory m;
  m.base = rng() % 48;
  m.element_bytes = size_t{1} << (rng() % 3);
  const size_t dims = rng() % 4;
  for (size_t d = 0; d < dims; ++d) {
    m.shape.push_back(rng() % 5);
    m.strides.push_back(rng() % 7);
  }
  return m;
}

TEST(MemoryOverlapTest, ADenseArrayIsOneRunAndMeetsOnlyWhatItTouches) {
  const StridedMemory a{100, 4, {2, 3}, {3, 1}};  // bytes [100, 124)
  EXPECT_EQ(Extent(a).begin, 100u);
  EXPECT_EQ(Extent(a).end, 124u);
  EXPECT_EQ(SelfOverlap(a, 1), Overlap::kNone);
  const StridedMemory next{124, 4, {6}, {1}};
  const StridedMemory last_element{120, 4, {1}, {1}};
  EXPECT_EQ(MutualOverlap(a, next, 1), Overlap::kNone);
  EXPECT_EQ(MutualOverlap(a, last_element, 1), Overlap::kSome);
}

TEST(MemoryOverlapTest, InterleavedColumnsOfOneBufferAreDisjoint) {
  // Columns 0 and 1 of a [4, 2] float buffer: extents overlap, bytes do not.
  const StridedMemory col0{0, 4, {4}, {2}}, col1{4, 4, {4}, {2}};
  EXPECT_EQ(MutualOverlap(col0, col1, 16), Overlap::kNone);
  const StridedMemory both{0, 4, {4, 2}, {2, 1}};
  EXPECT_EQ(MutualOverlap(col1, both, 16), Overlap::kSome);
}

TEST(MemoryOverlapTest, OverlappingStridesAndBroadcastsOverlapThemselves) {
  EXPECT_EQ(SelfOverlap({0, 4, {3}, {0}}, 16), Overlap::kSome);
  EXPECT_EQ(SelfOverlap({0, 4, {3, 1}, {0, 1}}, 16), Overlap::kSome);
  EXPECT_EQ(SelfOverlap({0, 4, {2, 4}, {3, 1}}, 16), Overlap::kSome);
  EXPECT_EQ(SelfOverlap({0, 4, {2, 2}, {1, 2}}, 16), Overlap::kNone);
  EXPECT_EQ(SelfOverlap({0, 4, {1, 5}, {0, 1}}, 16), Overlap::kNone);
}

TEST(MemoryOverlapTest, TooManyRunsToProveIsUnknownNotAGuess) {
  const StridedMemory col0{0, 4, {1000}, {2}}, col1{4, 4, {1000}, {2}};
  EXPECT_EQ(MutualOverlap(col0, col1, 999), Overlap::kUnknown);
  EXPECT_EQ(MutualOverlap(col0, col1, 1000), Overlap::kNone);
}

TEST(MemoryOverlapTest, MatchesBruteForceOnRandomArrays) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    const StridedMemory a = RandomMemory(rng), b = RandomMemory(rng);
    const std::map<uintptr_t, int> ba = BytesByBruteForce(a);
    const std::map<uintptr_t, int> bb = BytesByBruteForce(b);
    SCOPED_TRACE(trial);
    const ByteRange extent = Extent(a);
    if (ba.empty()) {
      EXPECT_TRUE(extent.empty());
    } else {
      EXPECT_EQ(extent.begin, ba.begin()->first);
      EXPECT_EQ(extent.end, ba.rbegin()->first + 1);
    }
    bool self = false;
    for (const auto& [byte, holders] : ba) self = self || holders > 1;
    EXPECT_EQ(SelfOverlap(a, 1 << 20), self ? Overlap::kSome : Overlap::kNone);
    bool mutual = false;
    for (const auto& [byte, holders] : ba) mutual = mutual || bb.count(byte);
    EXPECT_EQ(MutualOverlap(a, b, 1 << 20),
              mutual ? Overlap::kSome : Overlap::kNone);
    // With too small a budget the answer is exact or unknown, never wrong.
    const Overlap bounded = MutualOverlap(a, b, 2);
    if (bounded != Overlap::kUnknown) {
      EXPECT_EQ(bounded, mutual ? Overlap::kSome : Overlap::kNone);
    }
    const Overlap bounded_self = SelfOverlap(a, 2);
    if (bounded_self != Overlap::kUnknown) {
      EXPECT_EQ(bounded_self, self ? Overlap::kSome : Overlap::kNone);
    }
  }
}

}  // namespace
}  // namespace ckptdb::planner
