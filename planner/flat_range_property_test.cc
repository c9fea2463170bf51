// Property tests of flat-range shards: FlatRangeBoxes against a brute-force
// enumeration, and save and load plans of random flat ranges mixed with boxes
// against brute-force references (validation, every element delivered once).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "core/random_boxes.h"
#include "planner/flat_range.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"

namespace ckptdb::planner {
namespace {

using testing::ForEachElement;
using testing::RandomPartition;

Shape RandomShape(std::mt19937& rng, int max_ndim, int64_t max_extent) {
  Shape shape(rng() % (max_ndim + 1));
  for (int64_t& d : shape) d = static_cast<int64_t>(rng() % (max_extent + 1));
  return shape;
}

// A random partition of [0, n) into ranges.
std::vector<std::pair<int64_t, int64_t>> RandomRanges(std::mt19937& rng,
                                                      int64_t n, int pieces) {
  std::vector<int64_t> cuts = {0, n};
  for (int i = 1; i < pieces && n > 0; ++i)
    cuts.push_back(static_cast<int64_t>(rng() % (n + 1)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i] < cuts[i + 1]) ranges.push_back({cuts[i], cuts[i + 1]});
  }
  if (ranges.empty()) ranges.push_back({0, n});  // an empty tensor: [0, 0)
  return ranges;
}

// The dimension after which the box holds whole dimensions, before which
// extents of 1: the level of the decomposition it belongs to.
size_t Level(const Shape& shape, const Box& box) {
  size_t level = box.ndim();
  while (level > 0 && box.shape[level - 1] == shape[level - 1]) --level;
  if (level > 0) --level;  // the partial dimension
  return level;
}

// Runs `check(seed)` for seeds [0, cases): one test (not one per seed), so
// that ctest's list stays short; a failure names its seed.
template <typename Check>
void ForSeeds(int cases, Check&& check) {
  for (int seed = 0; seed < cases; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    check(seed);
    if (::testing::Test::HasFailure()) return;
  }
}

void CheckBoxesOfRandomRange(int seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  const Shape shape = RandomShape(rng, 4, 6);
  const int64_t n = NumElements(shape);
  int64_t begin = static_cast<int64_t>(rng() % (n + 1));
  int64_t end = static_cast<int64_t>(rng() % (n + 1));
  if (begin > end) std::swap(begin, end);
  const std::vector<Box> boxes = FlatRangeBoxes(shape, begin, end);
  const std::string what = ShapeToString(shape) + " [" + std::to_string(begin) +
                           ", " + std::to_string(end) + ")";
  EXPECT_LE(boxes.size(), std::max<size_t>(1, 2 * shape.size() - 1)) << what;
  std::map<size_t, int> per_level;
  std::vector<int> count(static_cast<size_t>(n), 0);
  if (begin == end) {
    // One empty box at the origin names the tensor (none for a 0-d one).
    EXPECT_EQ(boxes.size(), shape.empty() ? 0u : 1u) << what;
    for (const Box& box : boxes) EXPECT_EQ(box.volume(), 0) << what;
    return;
  }
  int64_t next = begin;
  for (const Box& box : boxes) {
    ASSERT_GT(box.volume(), 0) << what;
    ASSERT_TRUE(Contains(Box{Shape(shape.size(), 0), shape}, box)) << what;
    EXPECT_EQ(ContiguousRun(shape, box.origin, box.shape, 1),
              std::optional<size_t>(FlatIndex(shape, box.origin)))
        << what << ": " << BoxToString(box) << " is not one run";
    EXPECT_EQ(FlatIndex(shape, box.origin), next) << what;
    next += box.volume();
    ++per_level[Level(shape, box)];
    ForEachElement(box, [&](const Shape& x) { ++count[FlatIndex(shape, x)]; });
  }
  EXPECT_EQ(next, end) << what;
  for (const auto& [level, boxes_at] : per_level)
    EXPECT_LE(boxes_at, 3) << what << " level " << level;
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(count[i], i >= begin && i < end ? 1 : 0) << what << " at " << i;
}

TEST(FlatRangeProperty, BoxesAreTheRangeInFlatOrder3000Cases) {
  ForSeeds(3000, CheckBoxesOfRandomRange);
}

// One rank's piece of a tensor in a random layout: a flat range or a box.
struct Piece {
  int rank;
  bool flat;
  int64_t begin, end;  // flat: the range
  Box box;             // not flat: the box
};

// The boxes the planner sees for `piece`.
std::vector<Box> BoxesOf(const Shape& shape, const Piece& piece) {
  if (piece.flat) return FlatRangeBoxes(shape, piece.begin, piece.end);
  return {piece.box};
}

// A random layout of `shape` over `ranks` ranks: a partition into flat ranges
// or into boxes, each piece held by 1..ranks ranks; a partition of flat ranges
// may have some ranges cut into their boxes (Shards holding them).
std::vector<Piece> RandomLayout(std::mt19937& rng, const Shape& shape,
                                int ranks) {
  std::vector<Piece> pieces;
  auto holders = [&]() {
    std::vector<int> out;
    for (int r = 0; r < ranks; ++r) {
      if (rng() % ranks == 0) out.push_back(r);
    }
    if (out.empty()) out.push_back(static_cast<int>(rng() % ranks));
    return out;
  };
  if (rng() % 3 == 0) {
    std::vector<Box> cells;
    RandomPartition(Box{Shape(shape.size(), 0), shape}, rng, 3, cells);
    for (const Box& cell : cells) {
      for (int r : holders()) pieces.push_back({r, false, 0, 0, cell});
    }
    return pieces;
  }
  for (auto [b, e] : RandomRanges(rng, NumElements(shape), 1 + rng() % 5)) {
    const bool as_boxes = rng() % 4 == 0;
    for (int r : holders()) {
      if (!as_boxes) {
        pieces.push_back({r, true, b, e, {}});
        continue;
      }
      for (const Box& box : FlatRangeBoxes(shape, b, e))
        pieces.push_back({r, false, 0, 0, box});
    }
  }
  return pieces;
}

// Brute force: the boxes cover every element, and boxes that share an element
// are identical.
bool ValidBruteForce(const Shape& shape, const std::vector<Box>& boxes) {
  std::vector<const Box*> first(static_cast<size_t>(NumElements(shape)));
  bool valid = true;
  for (const Box& box : boxes) {
    ForEachElement(box, [&](const Shape& x) {
      const Box*& seen = first[FlatIndex(shape, x)];
      if (seen != nullptr && *seen != box) valid = false;
      seen = &box;
    });
  }
  for (const Box* b : first) valid = valid && b != nullptr;
  return valid;
}

// Flat ranges with random gaps and overlaps: the save planner accepts exactly
// the layouts the brute force finds valid. Returns whether it was valid.
bool CheckSaveValidation(int seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  const Shape shape = RandomShape(rng, 3, 5);
  const int64_t n = NumElements(shape);
  const int ranks = 1 + static_cast<int>(rng() % 3);
  std::vector<Piece> pieces = RandomLayout(rng, shape, ranks);
  if (rng() % 3 == 0 && pieces.size() > 1)
    pieces.erase(pieces.begin() + rng() % pieces.size());  // maybe a gap
  if (rng() % 3 == 0) {  // an extra range: maybe an overlap
    int64_t b = static_cast<int64_t>(rng() % (n + 1));
    int64_t e = static_cast<int64_t>(rng() % (n + 1));
    if (b > e) std::swap(b, e);
    pieces.push_back({static_cast<int>(rng() % ranks), true, b, e, {}});
  }
  std::vector<RankSaveLayout> layouts(ranks);
  std::vector<Box> all;
  for (const Piece& piece : pieces) {
    for (const Box& box : BoxesOf(shape, piece)) {
      layouts[piece.rank].shards.push_back(
          {"t", {"t"}, DType::kFloat32, shape, box});
      all.push_back(box);
    }
  }
  const bool valid = ValidBruteForce(shape, all);
  auto plan = BuildSavePlan(layouts, 1 + rng() % 64);
  EXPECT_EQ(plan.ok(), valid)
      << ShapeToString(shape) << ": " << plan.status().ToString();
  return valid;
}

TEST(FlatLayoutProperty, SaveValidationMatchesBruteForce2000Cases) {
  int valid = 0;
  ForSeeds(2000, [&](int seed) { valid += CheckSaveValidation(seed); });
  ::testing::Test::RecordProperty("valid_layouts", valid);
  // Both outcomes are exercised.
  EXPECT_GT(valid, 200);
  EXPECT_LT(valid, 1800);
}

// The position of global element `x` in the buffer of `piece`.
int64_t PositionIn(const Shape& shape, const Piece& piece, const Shape& x) {
  if (piece.flat) return FlatIndex(shape, x) - piece.begin;
  Shape in_box(x.size());
  for (size_t d = 0; d < x.size(); ++d) in_box[d] = x[d] - piece.box.origin[d];
  return FlatIndex(piece.box.shape, in_box);
}

// Every flat position of every target piece of rank `rank`, counted by the
// load plan's items, must be written once from the same global element.
void CheckDelivered(const Shape& shape, const TensorMetadata& stored,
                    const LoadPlan& plan, int rank,
                    const std::vector<Piece>& mine,
                    const std::vector<std::pair<size_t, Box>>& target_boxes) {
  std::vector<std::vector<int>> count(mine.size());
  for (size_t p = 0; p < mine.size(); ++p) {
    count[p].assign(
        static_cast<size_t>(mine[p].flat ? mine[p].end - mine[p].begin
                                         : mine[p].box.volume()),
        0);
  }
  for (const ReadItem& item : plan.items) {
    if (item.dest_rank != rank) continue;
    const auto& [p, box] = target_boxes[item.target];
    const ChunkMetadata& chunk = stored.chunks[plan.reads[item.read].chunk];
    ForEachElement(Box{Shape(item.box.shape.size(), 0), item.box.shape},
                   [&](const Shape& i) {
                     Shape from_chunk(i.size()), global(i.size());
                     for (size_t d = 0; d < i.size(); ++d) {
                       from_chunk[d] =
                           chunk.box.origin[d] + item.box.origin[d] + i[d];
                       global[d] = box.origin[d] + item.dest_origin[d] + i[d];
                     }
                     ASSERT_EQ(from_chunk, global);
                     ++count[p][PositionIn(shape, mine[p], global)];
                   });
  }
  for (const auto& c : count) {
    for (int k : c) EXPECT_EQ(k, 1);
  }
}

// A tensor saved from random flat ranges (or boxes) on N ranks loads into
// random flat ranges (or boxes) on M ranks: each needed chunk read once, every
// target element written once from the right stored element.
void CheckReshard(int seed) {
  std::mt19937 rng(static_cast<unsigned>(seed) + 100000);
  const Shape shape = RandomShape(rng, 3, 6);
  const int save_ranks = 1 + static_cast<int>(rng() % 4);
  const int load_ranks = 1 + static_cast<int>(rng() % 4);
  std::vector<RankSaveLayout> layouts(save_ranks);
  for (const Piece& piece : RandomLayout(rng, shape, save_ranks)) {
    for (const Box& box : BoxesOf(shape, piece)) {
      layouts[piece.rank].shards.push_back(
          {"t", {"t"}, DType::kInt16, shape, box});
    }
  }
  auto save = BuildSavePlan(layouts, 1 + rng() % 32);
  ASSERT_TRUE(save.ok()) << save.status().ToString();
  TensorMetadata stored{DType::kInt16, shape, {}};
  for (const PlannedChunk& c : save->tensors.at(0).chunks) {
    stored.chunks.push_back({c.box, c.writer_rank, c.nbytes, 0});
  }
  const std::map<std::string, TensorMetadata> tensors = {{"t", stored}};

  std::vector<std::vector<Piece>> mine(load_ranks);
  for (const Piece& piece : RandomLayout(rng, shape, load_ranks))
    mine[piece.rank].push_back(piece);
  std::vector<std::vector<LoadTarget>> targets(load_ranks);
  std::vector<std::vector<std::pair<size_t, Box>>> target_boxes(load_ranks);
  for (int r = 0; r < load_ranks; ++r) {
    for (size_t p = 0; p < mine[r].size(); ++p) {
      for (const Box& box : BoxesOf(shape, mine[r][p])) {
        targets[r].push_back({"t", box});
        target_boxes[r].push_back({p, box});
      }
    }
  }
  auto load = BuildLoadPlan(tensors, targets);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  std::set<size_t> read;
  for (const ChunkRead& r : load->reads)
    EXPECT_TRUE(read.insert(r.chunk).second) << "chunk read twice";
  for (int r = 0; r < load_ranks; ++r)
    CheckDelivered(shape, stored, *load, r, mine[r], target_boxes[r]);
}

TEST(FlatLayoutProperty, ReshardsBetweenFlatRangesAndBoxes2000Cases) {
  ForSeeds(2000, CheckReshard);
}

}  // namespace
}  // namespace ckptdb::planner
