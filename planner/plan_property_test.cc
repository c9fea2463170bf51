// Property tests: random tensors, random N-rank save layouts (with replicas)
// and random M-rank target layouts, checked against brute-force references.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/random_boxes.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"

namespace ckptdb::planner {
namespace {

using testing::RandomPartition;

using testing::ForEachElement;
using testing::Linear;

struct Tensor {
  std::string key;
  DType dtype;
  Shape shape;
};

Tensor RandomTensor(std::mt19937& rng, int i) {
  static const DType kTypes[] = {DType::kFloat32, DType::kBFloat16,
                                 DType::kInt8, DType::kFloat64};
  Tensor t{std::string("t").append(std::to_string(i)), kTypes[rng() % 4], {}};
  const int ndim = static_cast<int>(rng() % 4);
  for (int d = 0; d < ndim; ++d)
    t.shape.push_back(static_cast<int64_t>(rng() % 7) + (rng() % 8 ? 1 : 0));
  return t;
}

// Save layouts: every cell of a random partition held by 1..num_save ranks
// (replicas).
std::vector<RankSaveLayout> RandomSaveLayouts(
    const std::vector<Tensor>& tensors, int num_save, std::mt19937& rng) {
  std::vector<RankSaveLayout> save(num_save);
  for (const Tensor& t : tensors) {
    std::vector<Box> cells;
    RandomPartition(Box{Shape(t.shape.size(), 0), t.shape}, rng, 4, cells);
    for (const Box& cell : cells) {
      std::set<int> ranks;
      const int copies = 1 + static_cast<int>(rng() % num_save);
      while (static_cast<int>(ranks.size()) < copies)
        ranks.insert(static_cast<int>(rng() % num_save));
      for (int r : ranks)
        save[r].shards.push_back({t.key, {t.key}, t.dtype, t.shape, cell});
    }
  }
  return save;
}

// The chunks partition every tensor, each written by a rank holding it,
// within max_chunk. Returns them as a store records them.
std::map<std::string, TensorMetadata> ExpectChunksPartitionTensors(
    const std::vector<Tensor>& tensors, const std::vector<RankSaveLayout>& save,
    const SavePlan& save_plan, size_t max_chunk) {
  std::map<std::string, TensorMetadata> stored;
  for (const PlannedTensor& pt : save_plan.tensors) {
    const Tensor& t =
        *std::find_if(tensors.begin(), tensors.end(),
                      [&](const Tensor& x) { return x.key == pt.flat_key; });
    std::vector<int> count(static_cast<size_t>(NumElements(t.shape)), 0);
    TensorMetadata meta{pt.dtype, pt.global_shape, {}};
    for (const PlannedChunk& c : pt.chunks) {
      EXPECT_LE(c.nbytes, std::max<size_t>(max_chunk, DTypeSize(t.dtype)));
      const SaveShard& src = save[c.writer_rank].shards[c.source_shard];
      EXPECT_EQ(src.flat_key, t.key);
      EXPECT_TRUE(Contains(src.box, c.box));
      ForEachElement(c.box,
                     [&](const Shape& x) { ++count[Linear(t.shape, x)]; });
      meta.chunks.push_back({c.box, c.writer_rank, c.nbytes, 0});
    }
    for (int n : count) EXPECT_EQ(n, 1);
    stored[t.key] = std::move(meta);
  }
  return stored;
}

// Load targets: random partitions again, some cells on several ranks, some on
// none.
std::vector<std::vector<LoadTarget>> RandomLoadTargets(
    const std::vector<Tensor>& tensors, int num_load, std::mt19937& rng) {
  std::vector<std::vector<LoadTarget>> targets(num_load);
  for (const Tensor& t : tensors) {
    std::vector<Box> cells;
    RandomPartition(Box{Shape(t.shape.size(), 0), t.shape}, rng, 4, cells);
    for (const Box& cell : cells) {
      for (int r = 0; r < num_load; ++r) {
        if (rng() % 3 != 0) targets[r].push_back({t.key, cell});
      }
    }
  }
  return targets;
}

// Every chunk some target meets (brute force) is read once, by a rank that
// needs it, and no other chunk is read.
void ExpectNeededChunksReadOnce(
    const std::map<std::string, TensorMetadata>& stored,
    const std::vector<std::vector<LoadTarget>>& targets,
    const LoadPlan& load_plan) {
  std::set<std::pair<std::string, size_t>> needed;
  for (const auto& of_rank : targets) {
    for (const LoadTarget& target : of_rank) {
      const auto& chunks = stored.at(target.flat_key).chunks;
      for (size_t c = 0; c < chunks.size(); ++c) {
        if (target.box.volume() > 0 && Intersect(chunks[c].box, target.box)) {
          needed.insert({target.flat_key, c});
        }
      }
    }
  }
  std::set<std::pair<std::string, size_t>> read;
  std::map<size_t, std::set<int>> needers;
  for (const ReadItem& item : load_plan.items)
    needers[item.read].insert(item.dest_rank);
  for (size_t i = 0; i < load_plan.reads.size(); ++i) {
    const ChunkRead& r = load_plan.reads[i];
    EXPECT_TRUE(read.insert({std::string(r.flat_key), r.chunk}).second)
        << "chunk read twice";
    EXPECT_TRUE(needers[i].count(r.reader_rank))
        << "reader does not need the chunk";
  }
  EXPECT_EQ(read, needed);
}

// Every element of rank r's targets is written exactly once, from the right
// stored element.
void ExpectTargetElementsWrittenOnce(
    const std::map<std::string, TensorMetadata>& stored,
    const std::vector<LoadTarget>& targets, int r, const LoadPlan& load_plan) {
  std::vector<std::vector<int>> count(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    count[t].assign(static_cast<size_t>(targets[t].box.volume()), 0);
  }
  for (const ReadItem& item : load_plan.items) {
    if (item.dest_rank != r) continue;
    const LoadTarget& target = targets[item.target];
    const ChunkRead& cr = load_plan.reads[item.read];
    ASSERT_EQ(cr.flat_key, target.flat_key);
    const ChunkMetadata& chunk =
        stored.at(std::string(cr.flat_key)).chunks[cr.chunk];
    ForEachElement(
        Box{Shape(item.box.shape.size(), 0), item.box.shape},
        [&](const Shape& i) {
          Shape from_chunk(i.size()), from_target(i.size()),
              in_target(i.size());
          for (size_t d = 0; d < i.size(); ++d) {
            from_chunk[d] = chunk.box.origin[d] + item.box.origin[d] + i[d];
            from_target[d] = target.box.origin[d] + item.dest_origin[d] + i[d];
            in_target[d] = item.dest_origin[d] + i[d];
          }
          EXPECT_EQ(from_chunk, from_target);
          EXPECT_TRUE(Contains(chunk.box, Box{from_chunk, Shape(i.size(), 1)}));
          ++count[item.target][Linear(target.box.shape, in_target)];
        });
  }
  for (const auto& c : count) {
    for (int n : c) EXPECT_EQ(n, 1);
  }
}

class PlanPropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(PlanPropertyTest, SaveThenLoadPlansMatchBruteForce) {
  std::mt19937 rng(static_cast<unsigned>(GetParam()));
  const int num_save = 1 + static_cast<int>(rng() % 4);
  const int num_load = 1 + static_cast<int>(rng() % 4);
  const int num_tensors = 1 + static_cast<int>(rng() % 4);
  std::vector<Tensor> tensors;
  for (int i = 0; i < num_tensors; ++i) tensors.push_back(RandomTensor(rng, i));

  const std::vector<RankSaveLayout> save =
      RandomSaveLayouts(tensors, num_save, rng);
  const size_t max_chunk = 1 + rng() % 64;
  auto save_plan = BuildSavePlan(save, max_chunk);
  ASSERT_TRUE(save_plan.ok()) << save_plan.status().ToString();
  const std::map<std::string, TensorMetadata> stored =
      ExpectChunksPartitionTensors(tensors, save, *save_plan, max_chunk);

  const std::vector<std::vector<LoadTarget>> targets =
      RandomLoadTargets(tensors, num_load, rng);
  auto load_plan = BuildLoadPlan(stored, targets);
  ASSERT_TRUE(load_plan.ok()) << load_plan.status().ToString();
  ExpectNeededChunksReadOnce(stored, targets, *load_plan);
  for (int r = 0; r < num_load; ++r)
    ExpectTargetElementsWrittenOnce(stored, targets[r], r, *load_plan);

  // Determinism: the same input gives the same plans.
  EXPECT_EQ(BuildSavePlan(save, max_chunk)->ToString(), save_plan->ToString());
  EXPECT_EQ(BuildLoadPlan(stored, targets)->ToString(), load_plan->ToString());
}

INSTANTIATE_TEST_SUITE_P(Random, PlanPropertyTest, ::testing::Range(0, 300));

}  // namespace
}  // namespace ckptdb::planner
