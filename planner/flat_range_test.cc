#include "planner/flat_range.h"

#include <gtest/gtest.h>

namespace ckptdb::planner {
namespace {

TEST(FlatRangeTest, WholeRowsAreOneBox) {
  EXPECT_EQ(FlatRangeBoxes({4, 5}, 5, 15),
            (std::vector<Box>{{{1, 0}, {2, 5}}}));
  EXPECT_EQ(FlatRangeBoxes({4, 5}, 0, 20),
            (std::vector<Box>{{{0, 0}, {4, 5}}}));
}

TEST(FlatRangeTest, HeadMiddleAndTailAtEveryLevel) {
  // Shape [3, 4, 5] (60 elements), elements [7, 53): row 0 of dim 0 from
  // element 7 (cols 2-4 of row 1, then rows 2-3), rows 1 of dim 0, then row 2
  // up to element 53 (rows 0-1, then cols 0-2 of row 2).
  EXPECT_EQ(FlatRangeBoxes({3, 4, 5}, 7, 53),
            (std::vector<Box>{{{0, 1, 2}, {1, 1, 3}},
                              {{0, 2, 0}, {1, 2, 5}},
                              {{1, 0, 0}, {1, 4, 5}},
                              {{2, 0, 0}, {1, 2, 5}},
                              {{2, 2, 0}, {1, 1, 3}}}));
}

TEST(FlatRangeTest, WithinOneRow) {
  EXPECT_EQ(FlatRangeBoxes({4, 5}, 6, 9), (std::vector<Box>{{{1, 1}, {1, 3}}}));
}

TEST(FlatRangeTest, EmptyRangesZeroDimAndEmptyShapes) {
  EXPECT_EQ(FlatRangeBoxes({4, 5}, 3, 3), (std::vector<Box>{{{0, 0}, {0, 5}}}));
  EXPECT_EQ(FlatRangeBoxes({}, 0, 1), (std::vector<Box>{{{}, {}}}));
  EXPECT_TRUE(FlatRangeBoxes({}, 0, 0).empty());
  EXPECT_EQ(FlatRangeBoxes({3, 0, 2}, 0, 0),
            (std::vector<Box>{{{0, 0, 0}, {0, 0, 2}}}));
}

TEST(FlatRangeTest, FlatIndex) {
  EXPECT_EQ(FlatIndex({3, 4, 5}, {2, 1, 3}), 2 * 20 + 5 + 3);
  EXPECT_EQ(FlatIndex({}, {}), 0);
}

}  // namespace
}  // namespace ckptdb::planner
