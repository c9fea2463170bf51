#include "core/box_geometry.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace ckptdb::planner {
namespace {

TEST(BoxTest, IntersectAndContains) {
  Box a{{0, 0}, {4, 4}}, b{{2, 3}, {4, 4}};
  auto common = Intersect(a, b);
  ASSERT_TRUE(common.has_value());
  EXPECT_EQ(*common, (Box{{2, 3}, {2, 1}}));
  EXPECT_FALSE(Intersect(a, Box{{4, 0}, {1, 1}}).has_value());
  EXPECT_TRUE(Contains(a, Box{{1, 1}, {3, 3}}));
  EXPECT_FALSE(Contains(a, Box{{1, 1}, {4, 3}}));
  EXPECT_TRUE(Intersect(Box{}, Box{}).has_value());  // 0-d boxes meet
}

TEST(BoxTest, SplitKeepsFittingBoxWhole) {
  Box box{{0, 0}, {4, 4}};
  EXPECT_EQ(SplitBox(box, 4, 64), std::vector<Box>{box});
}

TEST(BoxTest, SplitAlongRows) {
  Box box{{10, 0}, {10, 4}};  // 16 bytes per row
  auto pieces = SplitBox(box, 4, 48);
  ASSERT_EQ(pieces.size(), 4u);  // 3 + 3 + 3 + 1 rows
  EXPECT_EQ(pieces[0], (Box{{10, 0}, {3, 4}}));
  EXPECT_EQ(pieces[3], (Box{{19, 0}, {1, 4}}));
}

TEST(BoxTest, SplitInsideRowsWhenARowIsTooLarge) {
  Box box{{0, 0, 0},
          {2, 3, 8}};  // a row of dim 0 is 3*8*1 = 24 bytes; one of dim 1 is 8
  auto pieces = SplitBox(box, 1, 16);
  // dim 1 cut into runs of 2: per outer index {0..2},{2..3} -> 2 * 2 pieces.
  ASSERT_EQ(pieces.size(), 4u);
  int64_t total = 0;
  for (const Box& p : pieces) {
    EXPECT_EQ(p.shape[0], 1);
    EXPECT_LE(p.volume(), 16);
    total += p.volume();
  }
  EXPECT_EQ(total, box.volume());
  EXPECT_EQ(pieces[1], (Box{{0, 2, 0}, {1, 1, 8}}));
}

TEST(BoxTest, SplitBelowOneElementKeepsOneElementPerPiece) {
  Box box{{0}, {3}};
  auto pieces = SplitBox(box, 8, 4);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2], (Box{{2}, {1}}));
}

// Split into a caller's vector, box after box: each split replaces what the
// vector held with exactly the pieces the returning form gives.
TEST(BoxTest, SplitIntoAVectorReplacesItsPieces) {
  const std::vector<std::pair<Box, size_t>> cases = {
      {Box{{10, 0}, {10, 4}}, 48},
      {Box{{0, 0}, {4, 4}}, 64},
      {Box{{0, 0, 0}, {2, 3, 8}}, 16},
      {Box{{0}, {3}}, 4}};
  std::vector<Box> pieces = {Box{{7}, {7}}};  // left over from before
  for (const auto& [box, max_bytes] : cases) {
    SplitBox(box, 4, max_bytes, pieces);
    EXPECT_EQ(pieces, SplitBox(box, 4, max_bytes)) << BoxToString(box);
  }
}

TEST(BoxTest, ContiguousRunOnlyForOneRunOfMemory) {
  const Shape shape{4, 5, 6};
  // Whole rows of whole planes, a partial row, leading ones.
  EXPECT_EQ(ContiguousRun(shape, {1, 0, 0}, {2, 5, 6}, 4), size_t{30 * 4});
  EXPECT_EQ(ContiguousRun(shape, {2, 1, 0}, {1, 3, 6}, 4),
            size_t{(2 * 30 + 6) * 4});
  EXPECT_EQ(ContiguousRun(shape, {3, 4, 2}, {1, 1, 3}, 2),
            size_t{(3 * 30 + 4 * 6 + 2) * 2});
  EXPECT_EQ(ContiguousRun(shape, {0, 0, 0}, shape, 8), size_t{0});
  // Two partial dimensions, or a partial one before a length > 1.
  EXPECT_EQ(ContiguousRun(shape, {0, 1, 0}, {2, 3, 6}, 4), std::nullopt);
  EXPECT_EQ(ContiguousRun(shape, {0, 0, 1}, {1, 2, 5}, 4), std::nullopt);
  // 0-d and empty boxes.
  EXPECT_EQ(ContiguousRun({}, {}, {}, 4), size_t{0});
  EXPECT_EQ(ContiguousRun(shape, {1, 1, 1}, {0, 2, 2}, 4), size_t{0});
}

// Against element-by-element copying: the runs visit the box's elements in
// row-major order, each run contiguous on both sides.
TEST(BoxTest, RunPairsCopyTheBoxElementByElement) {
  std::mt19937 rng(5);
  int cases = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t ndim = trial % 4;
    const size_t elem = size_t{1} << (trial % 4);
    Shape src_shape, dst_shape, src_offset, dst_offset, lengths;
    for (size_t d = 0; d < ndim; ++d) {
      const int64_t len = rng() % 4;
      lengths.push_back(len);
      // Whole dimensions on one side or both, often.
      src_shape.push_back(len + (rng() % 3 == 0 ? 0 : rng() % 3));
      dst_shape.push_back(len + (rng() % 3 == 0 ? 0 : rng() % 3));
      src_offset.push_back(rng() % (src_shape[d] - len + 1));
      dst_offset.push_back(rng() % (dst_shape[d] - len + 1));
    }
    // Expected: one (src, dst) pair per element, in row-major box order.
    std::vector<std::pair<uint64_t, uint64_t>> want;
    Shape index(ndim, 0);
    for (int64_t e = 0; e < NumElements(lengths); ++e) {
      uint64_t src = 0, dst = 0;
      for (size_t d = 0; d < ndim; ++d) {
        src = src * src_shape[d] + src_offset[d] + index[d];
        dst = dst * dst_shape[d] + dst_offset[d] + index[d];
      }
      want.emplace_back(src * elem, dst * elem);
      for (size_t d = ndim; d-- > 0;) {
        if (++index[d] < lengths[d]) break;
        index[d] = 0;
      }
    }
    std::vector<std::pair<uint64_t, uint64_t>> got;
    ForEachRunPair(src_shape, src_offset, dst_shape, dst_offset, lengths, elem,
                   [&](const RunPair& r) {
                     ASSERT_EQ(r.nbytes % elem, 0u);
                     for (uint64_t b = 0; b < r.nbytes; b += elem)
                       got.emplace_back(r.src + b, r.dst + b);
                   });
    ASSERT_EQ(got, want) << "case " << trial;
    cases += !want.empty();
  }
  EXPECT_GT(cases, 1500);
}

}  // namespace
}  // namespace ckptdb::planner
