#include "planner/layout_problems.h"

#include <gtest/gtest.h>

namespace ckptdb::planner {
namespace {

TensorMetadata Rows(std::vector<std::pair<int64_t, int64_t>>
                        rows) {  // (begin, count) of [N, 4] float32
  TensorMetadata t;
  t.global_shape = {10, 4};
  for (auto [b, n] : rows) {
    t.chunks.push_back(
        {Box{{b, 0}, {n, 4}}, 0, static_cast<uint64_t>(n) * 16, 0});
  }
  return t;
}

TEST(LayoutProblemsTest, ExactPartitionIsFine) {
  EXPECT_TRUE(LayoutProblems("w", Rows({{0, 3}, {3, 7}})).empty());
  TensorMetadata scalar;
  scalar.chunks.push_back({Box{{}, {}}, 0, 4, 0});
  EXPECT_TRUE(LayoutProblems("s", scalar).empty());
}

TEST(LayoutProblemsTest, GapOverlapOutsideAndSize) {
  auto gap = LayoutProblems("w", Rows({{0, 3}, {4, 6}}));
  ASSERT_EQ(gap.size(), 1u);
  EXPECT_NE(gap[0].find("gap"), std::string::npos) << gap[0];
  auto overlap = LayoutProblems("w", Rows({{0, 5}, {3, 7}}));
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_NE(overlap[0].find("overlap"), std::string::npos);
  EXPECT_NE(overlap[0].find("'w'"), std::string::npos);
  auto outside = LayoutProblems("w", Rows({{0, 3}, {3, 8}}));
  ASSERT_EQ(outside.size(), 1u);
  EXPECT_NE(outside[0].find("outside"), std::string::npos);
  TensorMetadata sized = Rows({{0, 10}});
  sized.chunks[0].nbytes = 12;
  auto size = LayoutProblems("w", sized);
  ASSERT_EQ(size.size(), 1u);
  EXPECT_NE(size[0].find("records 12 bytes"), std::string::npos) << size[0];
}

TEST(LayoutProblemsTest, OverlapThatHidesAGapOfTheSameVolume) {
  // Rows [0, 5) and [4, 9) of 10: row 4 twice, row 9 never.
  auto both = LayoutProblems("w", Rows({{0, 5}, {4, 5}}));
  ASSERT_EQ(both.size(), 1u);
  EXPECT_NE(both[0].find("overlap in {offset [4, 0], shape [1, 4]}"),
            std::string::npos)
      << both[0];
  auto empty = LayoutProblems("w", Rows({{0, 10}, {3, 0}}));
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_NE(empty[0].find("holds no element"), std::string::npos) << empty[0];
}

}  // namespace
}  // namespace ckptdb::planner
