#include "planner/load_plan.h"

#include <gtest/gtest.h>

namespace ckptdb::planner {
namespace {

TensorMetadata RowChunks(Shape global, int64_t rows_per_chunk,
                         DType dtype = DType::kFloat32) {
  TensorMetadata t;
  t.dtype = dtype;
  t.global_shape = global;
  const int64_t row = NumElements(global) / global[0];
  for (int64_t r = 0; r < global[0]; r += rows_per_chunk) {
    ChunkMetadata c;
    c.box.origin = Shape(global.size(), 0);
    c.box.origin[0] = r;
    c.box.shape = global;
    c.box.shape[0] = std::min(rows_per_chunk, global[0] - r);
    c.nbytes = static_cast<uint64_t>(c.box.shape[0] * row) * DTypeSize(dtype);
    t.chunks.push_back(c);
  }
  return t;
}

TEST(LoadPlanTest, RowsToColumnsOnTwoRanks) {
  std::map<std::string, TensorMetadata> stored = {{"w", RowChunks({4, 6}, 2)}};
  std::vector<std::vector<LoadTarget>> targets = {
      {{"w", Box{{0, 0}, {4, 3}}}},
      {{"w", Box{{0, 3}, {4, 3}}}},
  };
  auto plan = BuildLoadPlan(stored, targets);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->reads.size(), 2u);  // each chunk once
  EXPECT_NE(plan->reads[0].reader_rank,
            plan->reads[1].reader_rank);  // balanced
  ASSERT_EQ(plan->items.size(), 4u);
  const ReadItem& item = plan->items[3];  // chunk 1 -> rank 1
  EXPECT_EQ(item.read, 1u);
  EXPECT_EQ(item.dest_rank, 1);
  EXPECT_EQ(item.box.origin, (Shape{0, 3}));
  EXPECT_EQ(item.dest_origin, (Shape{2, 0}));
  EXPECT_EQ(item.box.shape, (Shape{2, 3}));
  EXPECT_EQ(plan->read_bytes_per_rank, (std::vector<uint64_t>{48, 48}));
}

// Chunks of unequal sizes needed by the same ranks spread their bytes evenly
// over those ranks, not only their count: taking turns would give rank 0 both
// 3-row chunks.
TEST(LoadPlanTest, ReadersShareTheBytesOfUnequalChunks) {
  TensorMetadata w;
  w.dtype = DType::kFloat32;
  w.global_shape = {8, 4};
  int64_t row = 0;
  for (int64_t rows : {3, 1, 3, 1}) {
    ChunkMetadata c;
    c.box = Box{{row, 0}, {rows, 4}};
    c.nbytes = static_cast<uint64_t>(rows * 4 * 4);
    w.chunks.push_back(c);
    row += rows;
  }
  std::vector<std::vector<LoadTarget>> targets = {
      {{"w", Box{{0, 0}, {8, 2}}}},
      {{"w", Box{{0, 2}, {8, 2}}}},
  };
  auto plan = BuildLoadPlan({{"w", w}}, targets);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->reads.size(), 4u);
  EXPECT_EQ(plan->read_bytes_per_rank, (std::vector<uint64_t>{64, 64}));
}

TEST(LoadPlanTest, ReadsOnlyChunksThatOverlap) {
  std::map<std::string, TensorMetadata> stored = {
      {"w", RowChunks({100, 2}, 10)}};
  auto plan = BuildLoadPlan(stored, {{{"w", Box{{35, 0}, {10, 1}}}}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 2u);
  EXPECT_EQ(plan->reads[0].chunk, 3u);
  EXPECT_EQ(plan->reads[1].chunk, 4u);
}

TEST(LoadPlanTest, ZeroDimTensor) {
  TensorMetadata t;
  t.global_shape = {};
  t.chunks.push_back({Box{{}, {}}, 0, 4, 0});
  auto plan = BuildLoadPlan({{"s", t}}, {{{"s", Box{}}}, {{"s", Box{}}}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 1u);
  EXPECT_EQ(plan->items.size(), 2u);
}

TEST(LoadPlanTest, RejectsUnknownKeyAndOutOfBounds) {
  std::map<std::string, TensorMetadata> stored = {{"w", RowChunks({4, 6}, 2)}};
  auto unknown = BuildLoadPlan(stored, {{{"v", Box{{0}, {1}}}}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'v'"), std::string::npos);
  auto outside = BuildLoadPlan(stored, {{}, {{"w", Box{{3, 0}, {2, 6}}}}});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("rank 1"), std::string::npos);
  EXPECT_NE(outside.status().message().find("[4, 6]"), std::string::npos);
}

TEST(LoadPlanTest, RankPlanFindsTargetsInAnyOrderAndNamesAnUnknownOne) {
  std::map<std::string, TensorMetadata> stored = {{"a", RowChunks({2, 2}, 1)},
                                                  {"c", RowChunks({2, 2}, 1)},
                                                  {"e", RowChunks({2, 2}, 1)}};
  auto whole = [](const std::string& key) {
    return LoadTarget{key, Box{{0, 0}, {2, 2}}};
  };
  TargetClasses classes;
  classes.class_of_rank = {0, 1};
  classes.targets = {{whole("e"), whole("a"), whole("c")},
                     {whole("a"), whole("c"), whole("e")}};
  classes.placements.assign(2, std::vector<TargetPlacement>(3));
  for (int rank = 0; rank < 2; ++rank) {
    auto plan = BuildRankLoadPlan(stored, classes, rank);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    std::vector<std::vector<LoadTarget>> targets = classes.targets;
    auto global = BuildLoadPlan(stored, targets);
    ASSERT_TRUE(global.ok());
    EXPECT_EQ(plan->ToString(), RestrictToRank(*global, rank).ToString());
  }
  // A key between two the checkpoint has, after targets out of order.
  classes.targets[1] = {whole("c"), whole("a"), whole("b")};
  for (int rank = 0; rank < 2; ++rank) {
    auto plan = BuildRankLoadPlan(stored, classes, rank);
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.status().message().find("'b' on rank 1"), std::string::npos)
        << plan.status().ToString();
  }
}

}  // namespace
}  // namespace ckptdb::planner
