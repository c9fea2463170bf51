// Property tests of the per-rank planners: at random sizes, the parts that
// BuildClassSavePlan and BuildRankLoadPlan give each rank, put together, are
// the global plans of BuildSavePlan and BuildLoadPlan; and the overlap index
// and split sizes agree with brute force.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "core/random_boxes.h"
#include "planner/box_index.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"

namespace ckptdb::planner {
namespace {

using testing::RandomPartition;

struct Tensor {
  std::string key;
  DType dtype;
  Shape shape;
};

std::vector<Tensor> RandomTensors(std::mt19937& rng) {
  static const DType kTypes[] = {DType::kFloat32, DType::kBFloat16,
                                 DType::kInt8, DType::kFloat64};
  std::vector<Tensor> tensors;
  // Up to 13 tensors: "t10" sorts before "t2".
  const int n = 1 + static_cast<int>(rng() % 13);
  for (int i = 0; i < n; ++i) {
    Tensor t{std::string("t").append(std::to_string(i)), kTypes[rng() % 4], {}};
    const int ndim = static_cast<int>(rng() % 4);
    for (int d = 0; d < ndim; ++d)
      t.shape.push_back(static_cast<int64_t>(rng() % 7) + (rng() % 8 ? 1 : 0));
    tensors.push_back(t);
  }
  return tensors;
}

// Half the classes' targets in random order, their placements with them:
// planning does not rely on targets coming sorted by key.
void ShuffleSomeClasses(std::mt19937& rng, TargetClasses& classes) {
  for (size_t c = 0; c < classes.targets.size(); ++c) {
    if (rng() % 2 == 0) continue;
    std::vector<size_t> order(classes.targets[c].size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<LoadTarget> shuffled;
    std::vector<TargetPlacement> placements;
    for (size_t i : order) {
      shuffled.push_back(classes.targets[c][i]);
      placements.push_back(classes.placements[c][i]);
    }
    classes.targets[c] = std::move(shuffled);
    classes.placements[c] = std::move(placements);
  }
}

// `world` ranks spread over `classes` classes, each class with a rank.
std::vector<int> RandomClassOfRank(std::mt19937& rng, int classes, int world) {
  std::vector<int> of(world);
  for (int r = 0; r < world; ++r)
    of[r] = r < classes ? r : static_cast<int>(rng() % classes);
  std::shuffle(of.begin(), of.end(), rng);
  // Classes numbered by their lowest rank, as the engine numbers them.
  std::map<int, int> renumber;
  for (int& c : of) c = renumber.try_emplace(c, renumber.size()).first->second;
  return of;
}

class RankPlanPropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(RankPlanPropertyTest, SavePartsMakeTheGlobalPlan) {
  std::mt19937 rng(static_cast<unsigned>(GetParam()));
  const std::vector<Tensor> tensors = RandomTensors(rng);
  const int num_classes = 1 + static_cast<int>(rng() % 4);
  const int world = num_classes + static_cast<int>(rng() % 5);
  SaveClasses classes;
  classes.layouts.resize(num_classes);
  classes.class_of_rank = RandomClassOfRank(rng, num_classes, world);
  for (const Tensor& t : tensors) {
    std::vector<Box> cells;
    RandomPartition(Box{Shape(t.shape.size(), 0), t.shape}, rng, 4, cells);
    for (const Box& cell : cells) {
      std::set<int> holders{static_cast<int>(rng() % num_classes)};
      while (rng() % 2) holders.insert(static_cast<int>(rng() % num_classes));
      for (int c : holders)
        classes.layouts[c].shards.push_back(
            {t.key, {t.key}, t.dtype, t.shape, cell});
    }
  }
  classes.layouts[0].values.push_back({"v", {"v"}, Value(int64_t{7})});
  std::vector<RankSaveLayout> ranks(world);
  for (int r = 0; r < world; ++r)
    ranks[r] = classes.layouts[classes.class_of_rank[r]];
  const size_t max_chunk = 1 + rng() % 64;

  auto global = BuildSavePlan(ranks, max_chunk);
  ASSERT_TRUE(global.ok()) << global.status().ToString();
  auto whole = BuildClassSavePlan(classes, max_chunk);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->ToString(), global->ToString());
  EXPECT_EQ(whole->bytes_per_rank, global->bytes_per_rank);

  std::map<std::string, std::vector<PlannedChunk>> together;
  for (int r = 0; r < world; ++r) {
    auto part = BuildClassSavePlan(classes, max_chunk, r);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    EXPECT_EQ(part->bytes_per_rank, global->bytes_per_rank);
    EXPECT_EQ(part->total_bytes, global->total_bytes);
    EXPECT_EQ(part->flat_mapping, global->flat_mapping);
    EXPECT_EQ(part->values, global->values);
    for (const PlannedTensor& t : part->tensors) {
      for (const PlannedChunk& c : t.chunks) {
        EXPECT_EQ(c.writer_rank, r);
        together[t.flat_key].push_back(c);
      }
    }
  }
  for (const PlannedTensor& t : global->tensors) {
    auto& chunks = together[t.flat_key];
    std::sort(chunks.begin(), chunks.end(),
              [](const PlannedChunk& a, const PlannedChunk& b) {
                return a.box < b.box;
              });
    ASSERT_EQ(chunks.size(), t.chunks.size()) << t.flat_key;
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].box, t.chunks[i].box);
      EXPECT_EQ(chunks[i].writer_rank, t.chunks[i].writer_rank);
      EXPECT_EQ(chunks[i].source_shard, t.chunks[i].source_shard);
    }
  }
}

TEST_P(RankPlanPropertyTest, LoadPartsMakeTheGlobalPlan) {
  std::mt19937 rng(static_cast<unsigned>(GetParam()) + 1000);
  const std::vector<Tensor> tensors = RandomTensors(rng);
  std::map<std::string, TensorMetadata> stored;
  for (const Tensor& t : tensors) {
    std::vector<Box> cells;
    RandomPartition(Box{Shape(t.shape.size(), 0), t.shape}, rng, 4, cells);
    std::sort(cells.begin(), cells.end(),
              [](const Box& a, const Box& b) { return a.origin < b.origin; });
    TensorMetadata meta{t.dtype, t.shape, {}};
    for (const Box& cell : cells) {
      meta.chunks.push_back(
          {cell, 0, static_cast<uint64_t>(cell.volume()) * DTypeSize(t.dtype),
           0});
    }
    stored[t.key] = std::move(meta);
  }
  const int num_classes = 1 + static_cast<int>(rng() % 4);
  const int world = num_classes + static_cast<int>(rng() % 5);
  TargetClasses classes;
  classes.targets.resize(num_classes);
  classes.placements.resize(num_classes);
  classes.class_of_rank = RandomClassOfRank(rng, num_classes, world);
  for (const Tensor& t : tensors) {
    std::vector<Box> cells;
    RandomPartition(Box{Shape(t.shape.size(), 0), t.shape}, rng, 4, cells);
    for (const Box& cell : cells) {
      for (int c = 0; c < num_classes; ++c) {
        if (rng() % 3 == 0) continue;
        classes.targets[c].push_back({t.key, cell});
        classes.placements[c].push_back({t.dtype, rng() % 2 == 0});
      }
    }
  }
  ShuffleSomeClasses(rng, classes);
  std::vector<std::vector<LoadTarget>> targets(world);
  for (int r = 0; r < world; ++r)
    targets[r] = classes.targets[classes.class_of_rank[r]];
  auto global = BuildLoadPlan(stored, targets);
  ASSERT_TRUE(global.ok()) << global.status().ToString();
  auto on_device = [&](int rank, size_t target) {
    return classes.placements[classes.class_of_rank[rank]][target].on_device;
  };
  std::set<std::pair<std::string, size_t>> read_by_someone;
  for (int r = 0; r < world; ++r) {
    auto part = BuildRankLoadPlan(stored, classes, r);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    EXPECT_EQ(part->ToString(),
              RestrictToRank(*global, r, on_device).ToString())
        << "rank " << r;
    for (const ChunkRead& read : part->reads) {
      if (read.reader_rank != r) continue;
      EXPECT_TRUE(
          read_by_someone.insert({std::string(read.flat_key), read.chunk})
              .second);
    }
  }
  EXPECT_EQ(read_by_someone.size(), global->reads.size());
  // Positions: the canonical byte order.
  uint64_t base = 0;
  std::map<std::pair<std::string, size_t>, uint64_t> position;
  for (const auto& [key, t] : stored) {
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      position[{key, c}] = base;
      base += t.chunks[c].nbytes;
    }
  }
  for (const ChunkRead& read : global->reads)
    EXPECT_EQ(read.position,
              (position[{std::string(read.flat_key), read.chunk}]));
}

TEST_P(RankPlanPropertyTest, BoxIndexAndSplitSizesMatchBruteForce) {
  std::mt19937 rng(static_cast<unsigned>(GetParam()) + 2000);
  const int ndim = static_cast<int>(rng() % 6);
  Shape shape;
  for (int d = 0; d < ndim; ++d)
    shape.push_back(1 + static_cast<int64_t>(rng() % 9));
  std::vector<Box> boxes;
  RandomPartition(Box{Shape(ndim, 0), shape}, rng, 6, boxes);
  // Indexed, and the few first boxes, which are scanned without an index.
  const std::vector<Box> few(
      boxes.begin(),
      boxes.begin() +
          static_cast<long>(std::min(boxes.size(), BoxIndex::kScannedBoxes)));
  const BoxIndex index(boxes, static_cast<size_t>(ndim));
  const BoxIndex few_index(few, static_cast<size_t>(ndim));
  // The same boxes indexed by Rebuild, over an index that held the others.
  auto pointers = [](const std::vector<Box>& of) {
    std::vector<const Box*> out;
    for (const Box& box : of) out.push_back(&box);
    return out;
  };
  BoxIndex rebuilt(few, static_cast<size_t>(ndim));
  rebuilt.Rebuild(pointers(boxes), static_cast<size_t>(ndim));
  BoxIndex few_rebuilt(boxes, static_cast<size_t>(ndim));
  few_rebuilt.Rebuild(pointers(few), static_cast<size_t>(ndim));
  for (int q = 0; q < 20; ++q) {
    Box query{Shape(ndim), Shape(ndim)};
    for (int d = 0; d < ndim; ++d) {
      query.origin[d] = static_cast<int64_t>(rng() % shape[d]);
      query.shape[d] =
          static_cast<int64_t>(rng() % (shape[d] - query.origin[d] + 1));
    }
    // The common part, dimension by dimension; none where one is empty.
    auto expected_of = [&](const std::vector<Box>& of) {
      std::vector<std::pair<size_t, Box>> expected;
      for (size_t b = 0; b < of.size(); ++b) {
        Box common{Shape(ndim), Shape(ndim)};
        bool meets = true;
        for (int d = 0; d < ndim; ++d) {
          const int64_t begin = std::max(of[b].origin[d], query.origin[d]);
          const int64_t end = std::min(of[b].origin[d] + of[b].shape[d],
                                       query.origin[d] + query.shape[d]);
          meets = meets && end > begin;
          common.origin[d] = begin;
          common.shape[d] = end - begin;
        }
        if (meets) expected.emplace_back(b, common);
      }
      return expected;
    };
    using Case = std::pair<const std::vector<Box>*, const BoxIndex*>;
    for (const auto& [of, idx] :
         {Case{&boxes, &index}, Case{&few, &few_index}, Case{&boxes, &rebuilt},
          Case{&few, &few_rebuilt}}) {
      const std::vector<std::pair<size_t, Box>> expected = expected_of(*of);
      std::vector<std::pair<size_t, Box>> got;
      idx->ForEachOverlap(
          query, [&](size_t b, const Box& c) { got.emplace_back(b, c); });
      EXPECT_EQ(got, expected);
      std::vector<size_t> met, expected_met;
      idx->ForEachMeeting(query, [&](size_t b) { met.push_back(b); });
      for (const auto& [b, common] : expected) expected_met.push_back(b);
      EXPECT_EQ(met, expected_met);
      for (size_t b = 0; b < of->size(); ++b) {
        EXPECT_EQ(Intersect((*of)[b], query).has_value(),
                  Meet((*of)[b], query));
      }
    }
  }
  for (const Box& box : boxes) {
    const size_t elem = 1 + rng() % 4, max = 1 + rng() % 40;
    const std::vector<Box> pieces = SplitBox(box, elem, max);
    const SplitSizes sizes = SplitBoxSizes(box, elem, max);
    ASSERT_EQ(sizes.count(), pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      const uint64_t bytes =
          (i + 1) % sizes.per_run == 0 ? sizes.last_bytes : sizes.piece_bytes;
      EXPECT_EQ(bytes, static_cast<uint64_t>(pieces[i].volume()) * elem) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Random, RankPlanPropertyTest,
                         ::testing::Range(0, 300));

}  // namespace
}  // namespace ckptdb::planner
