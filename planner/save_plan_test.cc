#include "planner/save_plan.h"

#include <gtest/gtest.h>

namespace ckptdb::planner {
namespace {

SaveShard Shard(const std::string& key, Shape global, Shape offset, Shape shape,
                DType dtype = DType::kFloat32) {
  return {key,
          {key},
          dtype,
          std::move(global),
          Box{std::move(offset), std::move(shape)}};
}

void ExpectError(const std::vector<RankSaveLayout>& ranks,
                 const std::string& needle) {
  auto plan = BuildSavePlan(ranks, 1 << 20);
  ASSERT_FALSE(plan.ok()) << plan->ToString();
  EXPECT_TRUE(plan.status().IsInvalidArgument());
  EXPECT_NE(plan.status().message().find(needle), std::string::npos)
      << plan.status().ToString();
}

TEST(SavePlanTest, RowShardsOnTwoRanks) {
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].shards.push_back(Shard("w", {4, 3}, {0, 0}, {2, 3}));
  ranks[1].shards.push_back(Shard("w", {4, 3}, {2, 0}, {2, 3}));
  auto plan = BuildSavePlan(ranks, 1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->tensors.size(), 1u);
  ASSERT_EQ(plan->tensors[0].chunks.size(), 2u);
  EXPECT_EQ(plan->tensors[0].chunks[0].writer_rank, 0);
  EXPECT_EQ(plan->tensors[0].chunks[1].writer_rank, 1);
  EXPECT_EQ(plan->total_bytes, 48u);
  EXPECT_EQ(plan->bytes_per_rank, (std::vector<uint64_t>{24, 24}));
}

TEST(SavePlanTest, AReplicatedBoxLargerThanAChunkIsWrittenByAllItsHolders) {
  // One 1 MiB tensor held whole by 4 ranks (data parallelism), beside a
  // small sharded one: with 64 KiB chunks every holder writes a quarter of
  // it, not one rank all of it.
  std::vector<RankSaveLayout> ranks(4);
  for (int r = 0; r < 4; ++r) {
    ranks[r].shards.push_back(Shard("big", {256, 1024}, {0, 0}, {256, 1024}));
    ranks[r].shards.push_back(Shard("small", {4, 16}, {r, 0}, {1, 16}));
  }
  auto plan = BuildSavePlan(ranks, 64 << 10);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const uint64_t mean = plan->total_bytes / 4;
  for (uint64_t bytes : plan->bytes_per_rank) {
    EXPECT_LE(bytes, mean + mean / 10) << plan->ToString();
    EXPECT_GE(bytes, mean - mean / 10) << plan->ToString();
  }
  // Each chunk is written from the writer's own copy of the box.
  for (const auto& tensor : plan->tensors) {
    for (const auto& chunk : tensor.chunks) {
      const auto& shard = ranks[chunk.writer_rank].shards[chunk.source_shard];
      EXPECT_EQ(shard.flat_key, tensor.flat_key);
    }
  }
}

TEST(SavePlanTest, ReplicasStoredOnceAndBalanced) {
  // Four replicated tensors of equal size on 2 ranks: each rank writes two.
  std::vector<RankSaveLayout> ranks(2);
  for (auto& r : ranks) {
    for (const char* key : {"a", "b", "c", "d"})
      r.shards.push_back(Shard(key, {8}, {0}, {8}));
  }
  auto plan = BuildSavePlan(ranks, 1 << 20);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->total_bytes, 4u * 32);
  EXPECT_EQ(plan->bytes_per_rank, (std::vector<uint64_t>{64, 64}));
  for (const auto& t : plan->tensors) EXPECT_EQ(t.chunks.size(), 1u);
}

TEST(SavePlanTest, SplitsLargeShards) {
  std::vector<RankSaveLayout> ranks(1);
  ranks[0].shards.push_back(Shard("w", {10, 4}, {0, 0}, {10, 4}));
  auto plan = BuildSavePlan(ranks, 48);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->tensors[0].chunks.size(), 4u);
  for (const auto& c : plan->tensors[0].chunks) {
    EXPECT_LE(c.nbytes, 48u);
    EXPECT_EQ(c.source_shard, 0u);
  }
}

TEST(SavePlanTest, DifferentKeySetsPerRankAndValues) {
  std::vector<RankSaveLayout> ranks(3);
  ranks[0].shards.push_back(Shard("stage0.w", {2}, {0}, {2}));
  ranks[2].shards.push_back(Shard("stage1.w", {2}, {0}, {2}));
  ranks[1].values.push_back({"lr", {"lr"}, Value(0.5)});
  ranks[2].values.push_back({"lr", {"lr"}, Value(0.25)});
  auto plan = BuildSavePlan(ranks, 1 << 20);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->tensors.size(), 2u);
  EXPECT_EQ(std::get<double>(plan->values.at("lr")),
            0.5);  // lowest rank holding it
  EXPECT_EQ(plan->flat_mapping.size(), 3u);
}

TEST(SavePlanTest, ZeroDimAndEmptyTensors) {
  std::vector<RankSaveLayout> ranks(2);
  for (auto& r : ranks) {
    r.shards.push_back(Shard("scalar", {}, {}, {}));
    r.shards.push_back(Shard("empty", {0, 5}, {0, 0}, {0, 5}));
  }
  auto plan = BuildSavePlan(ranks, 1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->tensors.size(), 2u);
  EXPECT_EQ(plan->tensors[0].flat_key, "empty");
  EXPECT_TRUE(plan->tensors[0].chunks.empty());
  ASSERT_EQ(plan->tensors[1].chunks.size(), 1u);
  EXPECT_EQ(plan->tensors[1].chunks[0].nbytes, 4u);
}

TEST(SavePlanTest, RejectsDtypeMismatch) {
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].shards.push_back(Shard("w", {4}, {0}, {2}));
  ranks[1].shards.push_back(Shard("w", {4}, {2}, {2}, DType::kFloat16));
  ExpectError(ranks,
              "tensor 'w': rank 0 has float32 [4] but rank 1 has float16 [4]");
}

TEST(SavePlanTest, RejectsGlobalShapeMismatch) {
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].shards.push_back(Shard("w", {4}, {0}, {2}));
  ranks[1].shards.push_back(Shard("w", {5}, {2}, {3}));
  ExpectError(ranks, "rank 1 has float32 [5]");
}

TEST(SavePlanTest, RejectsOutOfBounds) {
  std::vector<RankSaveLayout> ranks(1);
  ranks[0].shards.push_back(Shard("w", {4, 4}, {2, 0}, {3, 4}));
  ExpectError(ranks, "lies outside the global shape [4, 4]");
  ranks[0].shards[0] = Shard("w", {4, 4}, {0}, {4});
  ExpectError(ranks, "2-d global shape");
}

TEST(SavePlanTest, RejectsPartialOverlap) {
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].shards.push_back(Shard("w", {4, 4}, {0, 0}, {3, 4}));
  ranks[1].shards.push_back(Shard("w", {4, 4}, {2, 0}, {2, 4}));
  ExpectError(ranks,
              "overlap in {offset [2, 0], shape [1, 4]} but are not identical "
              "replicas");
}

TEST(SavePlanTest, RejectsGap) {
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].shards.push_back(Shard("w", {4, 4}, {0, 0}, {2, 4}));
  ranks[1].shards.push_back(Shard("w", {4, 4}, {2, 0}, {1, 4}));
  ExpectError(ranks, "cover 12 of 16 elements");
  ExpectError(ranks, "no rank holds element [3, 0]");
}

TEST(SavePlanTest, RejectsOverlapThatHidesAGapOfTheSameVolume) {
  // Rows [0, 2) on ranks 0 and 1 (replicas), [1, 3) on rank 2: as many
  // distinct elements as the tensor has, but row 1 twice and row 3 never.
  std::vector<RankSaveLayout> ranks(3);
  ranks[0].shards.push_back(Shard("w", {4, 4}, {0, 0}, {2, 4}));
  ranks[1].shards.push_back(Shard("w", {4, 4}, {0, 0}, {2, 4}));
  ranks[2].shards.push_back(Shard("w", {4, 4}, {1, 0}, {2, 4}));
  ExpectError(ranks,
              "shards on rank 0 box {offset [0, 0], shape [2, 4]} and rank 2 "
              "box {offset [1, 0], shape [2, 4]} overlap in {offset [1, 0], "
              "shape [1, 4]}");
  // A gap first in row-major order, an overlap after it.
  ranks[0].shards[0] = Shard("w", {4, 4}, {1, 0}, {1, 4});
  ranks[1].shards[0] = Shard("w", {4, 4}, {0, 0}, {1, 2});
  ranks[2].shards[0] = Shard("w", {4, 4}, {1, 0}, {3, 4});
  ExpectError(ranks,
              "no rank holds element [0, 2], and the shards of all "
              "ranks overlap elsewhere");
}

TEST(SavePlanTest, RejectsTensorAndValueUnderOneKey) {
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].shards.push_back(Shard("w", {4}, {0}, {4}));
  ranks[1].values.push_back({"w", {"w"}, Value(int64_t{1})});
  ExpectError(ranks,
              "key 'w' is a small value on rank 1 and a tensor on rank 0");
}

TEST(SavePlanTest, RejectsDifferentPathsForOneFlatKey) {
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].shards.push_back(
      {"a.b", {"a", "b"}, DType::kFloat32, {2}, Box{{0}, {2}}});
  ranks[1].shards.push_back(
      {"a.b", {"a.b"}, DType::kFloat32, {2}, Box{{0}, {2}}});
  ExpectError(ranks, "flat key 'a.b' names different paths");
}

TEST(SavePlanTest, PathKindsAreKeptAndMustAgreeAcrossRanks) {
  using K = PathPartKind;
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].values.push_back(
      {"s.0", {"s", "0"}, Value(int64_t{1}), {K::kStrKey, K::kIntKey}});
  ranks[1].values.push_back(
      {"s.0", {"s", "0"}, Value(int64_t{1}), {K::kStrKey, K::kIntKey}});
  ranks[1].values.push_back({"t", {"t"}, Value(int64_t{2})});
  auto plan = BuildSavePlan(ranks, 1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(
      plan->path_kinds,
      (std::map<std::string, PathKinds>{{"s.0", {K::kStrKey, K::kIntKey}}}));
  // Rank 1 has the key "0" where rank 0 has the int 0.
  ranks[1].values[0].kinds.clear();
  ExpectError(ranks,
              "flat key 's.0' names different paths on rank 1 (['s', '0']) "
              "and another rank (['s', 0])");
  // Rank 1 has a list where rank 0 has a dict with the int key 0: the paths
  // read the same, and the message says which container differs.
  ranks[1].values[0].kinds = {K::kStrKey, K::kListIndex};
  ExpectError(ranks,
              "flat key 's.0' is the path ['s', 0] on rank 1 and on another "
              "rank, but its 0 under ['s'] is a list index on rank 1 and a "
              "dict's int key on the other");
  // At the root: a list on rank 1, a dict with the int key 0 on rank 0.
  ranks[0].values[0] = {"0", {"0"}, Value(int64_t{1}), {K::kIntKey}};
  ranks[1].values[0] = {"0", {"0"}, Value(int64_t{1}), {K::kListIndex}};
  ExpectError(ranks,
              "flat key '0' is the path [0] on rank 1 and on another rank, "
              "but its 0 under the root is a list index on rank 1 and a "
              "dict's int key on the other");
}

TEST(SavePlanTest, RanksWhoseStateDictsDisagreeOnTheirStructureAreRefused) {
  using K = PathPartKind;
  // Rank 0 has a dict at 'a' holding 'x'; rank 1 a value (or tensor) at 'a'.
  std::vector<RankSaveLayout> ranks(2);
  ranks[0].values.push_back({"a.x", {"a", "x"}, Value(int64_t{1})});
  ranks[1].values.push_back({"a", {"a"}, Value(int64_t{3})});
  ExpectError(ranks,
              "key 'a' is a small value on rank 1 but a container on rank 0, "
              "which holds 'a.x' under it");
  ranks[1].values.clear();
  ranks[1].shards.push_back(Shard("a", {4}, {0}, {4}));
  ExpectError(ranks,
              "key 'a' is a tensor on rank 1 but a container on rank 0, which "
              "holds 'a.x' under it");
  // A dict at ['m', 'l'] on rank 0, a list there on rank 1: different keys.
  ranks[0].values = {{"m.l.x", {"m", "l", "x"}, Value(int64_t{1})}};
  ranks[1].shards.clear();
  ranks[1].values = {{"m.l.0",
                      {"m", "l", "0"},
                      Value(int64_t{2}),
                      {K::kStrKey, K::kStrKey, K::kListIndex}}};
  ExpectError(ranks,
              "the container at ['m', 'l'] is a list on rank 1 (which holds "
              "'m.l.0') but a dict on rank 0 (which holds 'm.l.x')");
  // A dict with an int key on one rank and a str key on another is one dict;
  // so are different keys of one list, and disjoint subtrees (pipeline
  // stages).
  ranks[0].values = {
      {"d.0", {"d", "0"}, Value(int64_t{1}), {K::kStrKey, K::kIntKey}},
      {"l.1", {"l", "1"}, Value(int64_t{1}), {K::kStrKey, K::kListIndex}},
      {"stage0.w", {"stage0", "w"}, Value(int64_t{1})}};
  ranks[1].values = {
      {"d.k", {"d", "k"}, Value(int64_t{1})},
      {"l.0", {"l", "0"}, Value(int64_t{1}), {K::kStrKey, K::kListIndex}},
      {"stage1.w", {"stage1", "w"}, Value(int64_t{1})}};
  auto plan = BuildSavePlan(ranks, 1 << 20);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
}

}  // namespace
}  // namespace ckptdb::planner

namespace ckptdb::planner {
namespace {

TEST(SavePlanTest, ManyColumnShardsAreCheckedQuickly) {
  // 20000 column shards of one tensor: a sweep along rows would compare all
  // pairs.
  std::vector<RankSaveLayout> ranks(1);
  for (int64_t c = 0; c < 20000; ++c) {
    ranks[0].shards.push_back(
        {"w", {"w"}, DType::kFloat32, {4, 20000}, Box{{0, c}, {4, 1}}});
  }
  auto plan = BuildSavePlan(ranks, 1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->tensors[0].chunks.size(), 20000u);
  ranks[0].shards.back().box = Box{{0, 19998}, {4, 2}};
  auto overlap = BuildSavePlan(ranks, 1 << 20);
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("overlap in {offset [0, 19998]"),
            std::string::npos)
      << overlap.status().ToString();
}

}  // namespace
}  // namespace ckptdb::planner
