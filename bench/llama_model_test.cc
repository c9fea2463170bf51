#include "bench/llama_model.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/partition.h"

namespace ckptdb::bench {
namespace {

// Every tensor's boxes over all ranks of `par`, by flat key.
std::map<std::string, std::vector<planner::Box>> BoxesByKey(
    const LlamaConfig& model, const Parallelism& par) {
  std::map<std::string, std::vector<planner::Box>> boxes;
  for (int rank = 0; rank < par.world(); ++rank) {
    for (const ModelShard& s : RankShards(model, par, rank))
      boxes[s.tensor.flat_key].push_back(s.box);
  }
  return boxes;
}

// Checks that the ranks of `par` hold every tensor of `model` exactly
// (replicas allowed), with the model's dtype and shape.
void ExpectPartitions(const LlamaConfig& model, const Parallelism& par) {
  SCOPED_TRACE("tp " + std::to_string(par.tp) + " pp " +
               std::to_string(par.pp) + " dp " + std::to_string(par.dp));
  const auto boxes = BoxesByKey(model, par);
  const auto tensors = ModelTensors(model);
  ASSERT_EQ(boxes.size(), tensors.size());
  for (const ModelTensor& t : tensors) {
    auto it = boxes.find(t.flat_key);
    ASSERT_NE(it, boxes.end()) << t.flat_key;
    const planner::PartitionProblem problem = planner::CheckPartition(
        t.global_shape, it->second, {.allow_replicas = true});
    EXPECT_TRUE(problem.ok()) << t.flat_key << ": " << problem.ToString();
  }
}

TEST(LlamaModelTest, RankOrderIsTpThenPpThenDp) {
  const Parallelism par{4, 3, 2};
  for (int rank = 0; rank < par.world(); ++rank) {
    const RankCoords c = CoordsOf(par, rank);
    EXPECT_EQ(RankOf(par, c), rank);
    EXPECT_EQ(rank, c.dp_index * 12 + c.pp_index * 4 + c.tp_index);
  }
  EXPECT_EQ(CoordsOf(par, 5).tp_index, 1);
  EXPECT_EQ(CoordsOf(par, 5).pp_index, 1);
  EXPECT_EQ(CoordsOf(par, 13).dp_index, 1);
}

TEST(LlamaModelTest, StagesAtTheEndsHoldFewerLayers) {
  std::vector<int> sizes;
  int next = 0;
  for (int s = 0; s < 16; ++s) {
    const auto [first, end] = StageLayers(126, 16, s);
    EXPECT_EQ(first, next);
    next = end;
    sizes.push_back(end - first);
  }
  EXPECT_EQ(next, 126);
  std::vector<int> expected(16, 8);
  expected.front() = expected.back() = 7;
  EXPECT_EQ(sizes, expected);
  // Three short stages: first, last, second.
  sizes.clear();
  for (int s = 0; s < 4; ++s) {
    const auto [first, end] = StageLayers(5, 4, s);
    sizes.push_back(end - first);
  }
  EXPECT_EQ(sizes, (std::vector<int>{1, 1, 2, 1}));
  EXPECT_EQ(StageLayers(7, 1, 0), (std::pair<int, int>{0, 7}));
}

TEST(LlamaModelTest, DefaultModelHasLlama405BSize) {
  const LlamaConfig model;
  const auto tensors = ModelTensors(model);
  EXPECT_EQ(tensors.size(), 4548u);
  uint64_t bytes = 0;
  for (const ModelTensor& t : tensors)
    bytes += NumElements(t.global_shape) * DTypeSize(t.dtype);
  // 405.85 G parameters of 2 + 3 * 4 bytes: 5.68 TB.
  EXPECT_EQ(bytes, uint64_t{5681947443200});

  // The distinct shards of TP8 x PP16 sum to the model (one DP replica, the
  // TP-replicated norms counted once).
  const Parallelism par{8, 16, 128};
  std::map<std::string, std::set<planner::Box>> distinct;
  for (int rank = 0; rank < par.tp * par.pp; ++rank) {
    for (const ModelShard& s : RankShards(model, par, rank))
      distinct[s.tensor.flat_key].insert(s.box);
  }
  uint64_t stored = 0;
  for (const ModelTensor& t : tensors) {
    for (const planner::Box& box : distinct[t.flat_key])
      stored += box.volume() * DTypeSize(t.dtype);
  }
  EXPECT_EQ(stored, bytes);
}

TEST(LlamaModelTest, DefaultSaveHasLlama405BChunks) {
  // 10.94 M chunks of 512 KiB at TP8 x PP16: every distinct box cut by
  // SplitBox as BuildSavePlan cuts it.
  const LlamaConfig model;
  const Parallelism par{8, 16, 128};
  std::map<std::string, std::set<planner::Box>> distinct;
  std::map<std::string, DType> dtypes;
  for (int rank = 0; rank < par.tp * par.pp; ++rank) {
    for (const ModelShard& s : RankShards(model, par, rank)) {
      distinct[s.tensor.flat_key].insert(s.box);
      dtypes[s.tensor.flat_key] = s.tensor.dtype;
    }
  }
  uint64_t chunks = 0;
  for (const auto& [key, boxes] : distinct) {
    for (const planner::Box& box : boxes) {
      chunks +=
          planner::SplitBox(box, DTypeSize(dtypes[key]), size_t{512} << 10)
              .size();
    }
  }
  EXPECT_EQ(chunks, uint64_t{10937140});
}

TEST(LlamaModelTest, DefaultLayoutsPartitionEveryTensor) {
  const LlamaConfig model;
  ExpectPartitions(model, {8, 16, 1});
  ExpectPartitions(model, {16, 16, 1});
  ExpectPartitions(model, {4, 8, 1});
}

TEST(LlamaModelTest, ShardsAreSortedAndCarryTheirTensor) {
  const LlamaConfig model;
  const Parallelism par{8, 16, 2};
  const auto first = RankShards(model, par, 0);
  const auto last = RankShards(model, par, par.world() - 1);
  // Stage 0: embedding + 7 layers; stage 15: 7 layers + LM head + final norm.
  EXPECT_EQ(first.size(), (1 + 7 * 9) * 4u);
  EXPECT_EQ(last.size(), (7 * 9 + 2) * 4u);
  for (size_t i = 1; i < first.size(); ++i)
    EXPECT_LT(first[i - 1].tensor.flat_key, first[i].tensor.flat_key);
  const ModelShard& embedding = first.front();
  EXPECT_EQ(embedding.tensor.flat_key, "model.embedding");
  EXPECT_EQ(embedding.tensor.dtype, DType::kBFloat16);
  EXPECT_EQ(embedding.box.shape, (Shape{16032, 16384}));
  // The same rank on another replica holds the same shards.
  EXPECT_EQ(RankShards(model, par, 128).size(), first.size());
  const auto layout = SaveLayoutOf(first);
  ASSERT_EQ(layout.shards.size(), first.size());
  EXPECT_EQ(layout.shards[0].path, (planner::Path{"model", "embedding"}));
  EXPECT_EQ(LoadTargetsOf(last).size(), last.size());
}

TEST(LlamaModelTest, UnevenSplitsStillPartition) {
  // vocab 1000 over TP 3 (334, 334, 332), 8 KV rows over TP 3, layers that
  // do not divide by the stages, a TP degree beyond some dimensions (empty
  // shards are left out).
  const LlamaConfig model{.layers = 5,
                          .hidden = 16,
                          .ffn = 40,
                          .vocab = 1000,
                          .heads = 4,
                          .kv_heads = 2};
  for (int tp : {1, 2, 3, 4, 6, 16}) {
    for (int pp : {1, 2, 3, 4, 5}) ExpectPartitions(model, {tp, pp, 2});
  }
}

TEST(LlamaModelTest, ValidateNamesTheBadField) {
  LlamaConfig model;
  EXPECT_TRUE(Validate(model, {8, 16, 128}).ok());
  model.heads = 100;
  EXPECT_NE(Validate(model, {8, 16, 1}).message().find("heads"),
            std::string::npos);
  model = {};
  EXPECT_NE(Validate(model, {8, 200, 1}).message().find("pp"),
            std::string::npos);
  EXPECT_NE(Validate(model, {0, 1, 1}).message().find("tp"), std::string::npos);
}

TEST(LlamaModelTest, HeaviestRankIsOnAMiddleStage) {
  // At TP8, a middle stage's rank holds 8 layers (44.6 GB); the ends hold 7
  // plus the embedding or the LM head (42.7 GB).
  const LlamaConfig model;
  const Parallelism par{8, 16, 128};
  const int rank = HeaviestRank(model, par);
  EXPECT_EQ(CoordsOf(par, rank).pp_index, 1);
  EXPECT_EQ(CoordsOf(par, rank).dp_index, 0);
}

}  // namespace
}  // namespace ckptdb::bench
