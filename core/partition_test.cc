#include "core/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/random_boxes.h"

namespace ckptdb::planner {
namespace {

using testing::RandomPartition;

using E = PartitionError;

Box B(Shape origin, Shape shape) {
  return Box{std::move(origin), std::move(shape)};
}

PartitionOptions Replicas() { return {.allow_replicas = true}; }

TEST(PartitionTest, ExactPartitions) {
  EXPECT_TRUE(
      CheckPartition({10, 4}, {B({0, 0}, {3, 4}), B({3, 0}, {7, 4})}).ok());
  EXPECT_TRUE(
      CheckPartition({4, 10}, {B({0, 3}, {4, 7}), B({0, 0}, {4, 3})}).ok());
  EXPECT_TRUE(CheckPartition({4, 4}, {B({0, 0}, {2, 2}), B({0, 2}, {2, 2}),
                                      B({2, 0}, {2, 2}), B({2, 2}, {2, 2})})
                  .ok());
  EXPECT_TRUE(CheckPartition({}, {B({}, {})}).ok());  // 0-d: one element
  EXPECT_TRUE(CheckPartition({0, 3}, {}).ok());       // empty tensor
  // A non-guillotine "pinwheel" of a 3 x 3 tensor.
  EXPECT_TRUE(CheckPartition({3, 3}, {B({0, 0}, {2, 1}), B({0, 1}, {1, 2}),
                                      B({1, 2}, {2, 1}), B({2, 0}, {1, 2}),
                                      B({1, 1}, {1, 1})})
                  .ok());
}

TEST(PartitionTest, OverlapThatHidesAGapOfTheSameVolume) {
  // Rows [0, 2) and [1, 3) of 4: 4 elements held, row 1 twice, row 3 never.
  PartitionProblem p =
      CheckPartition({4, 2}, {B({0, 0}, {2, 2}), B({1, 0}, {2, 2})});
  EXPECT_EQ(p.error, E::kOverlap) << p.ToString();
  EXPECT_EQ(p.box, 0u);
  EXPECT_EQ(p.other_box, 1u);
  EXPECT_EQ(p.overlap, B({1, 0}, {1, 2}));
  EXPECT_EQ(p.ToString(),
            "overlap: boxes 0 and 1 share {offset [1, 0], shape [1, 2]}");
}

TEST(PartitionTest, GapNamesTheFirstMissingElement) {
  PartitionProblem p =
      CheckPartition({4, 2}, {B({0, 0}, {1, 2}), B({2, 0}, {2, 2})});
  EXPECT_EQ(p.error, E::kGap);
  EXPECT_EQ(p.missing_element, (Shape{1, 0}));
  EXPECT_EQ(p.covered, 6);
  EXPECT_EQ(p.total, 8);
  p = CheckPartition({3}, {});
  EXPECT_EQ(p.error, E::kGap);
  EXPECT_EQ(p.missing_element, (Shape{0}));
  EXPECT_EQ(p.covered, 0);
  p = CheckPartition({}, {});
  EXPECT_EQ(p.error, E::kGap);
  EXPECT_EQ(p.missing_element, Shape{});
  EXPECT_EQ(p.total, 1);
}

TEST(PartitionTest, ReplicasCountOnceWhenAllowed) {
  const std::vector<Box> boxes = {B({0}, {2}), B({2}, {2}), B({0}, {2})};
  EXPECT_TRUE(CheckPartition({4}, boxes, Replicas()).ok());
  PartitionProblem p = CheckPartition({4}, boxes);
  EXPECT_EQ(p.error, E::kOverlap);
  EXPECT_EQ(p.box, 0u);
  EXPECT_EQ(p.other_box, 2u);
  // A partial overlap names the lowest holder of each box.
  p = CheckPartition({4}, {B({0}, {3}), B({0}, {3}), B({2}, {2}), B({2}, {2})},
                     Replicas());
  EXPECT_EQ(p.error, E::kOverlap);
  EXPECT_EQ(p.box, 0u);
  EXPECT_EQ(p.other_box, 2u);
  EXPECT_EQ(p.overlap, B({2}, {1}));
  EXPECT_TRUE(CheckPartition({}, {B({}, {}), B({}, {})}, Replicas()).ok());
  EXPECT_EQ(CheckPartition({}, {B({}, {}), B({}, {})}).error, E::kOverlap);
}

// Boxes that are each the whole tensor: one is a partition, several are
// replicas (a partition only where replicas are allowed), and an empty
// tensor's whole box is still an empty box.
TEST(PartitionTest, WholeTensorBoxes) {
  EXPECT_TRUE(CheckPartition({3, 4}, {B({0, 0}, {3, 4})}).ok());
  EXPECT_TRUE(
      CheckPartition({3, 4}, {B({0, 0}, {3, 4}), B({0, 0}, {3, 4})}, Replicas())
          .ok());
  const PartitionProblem twice =
      CheckPartition({3, 4}, {B({0, 0}, {3, 4}), B({0, 0}, {3, 4})});
  EXPECT_EQ(twice.error, E::kOverlap);
  EXPECT_EQ(twice.other_box, 1u);
  EXPECT_EQ(CheckPartition({0, 4}, {B({0, 0}, {0, 4})}).error, E::kEmptyBox);
  EXPECT_EQ(CheckPartition({3, -1}, {B({0, 0}, {3, -1})}).error, E::kBadShape);
  EXPECT_EQ(CheckPartition({3, 4}, {B({0, 0}, {3, 4}), B({0}, {3})}, Replicas())
                .error,
            E::kWrongRank);
}

TEST(PartitionTest, BoxesOutsideOrEmpty) {
  EXPECT_EQ(CheckBoxInside({4, 4}, B({0}, {4})), E::kWrongRank);
  EXPECT_EQ(CheckBoxInside({4, 4}, B({2, 0}, {3, 4})), E::kOutside);
  EXPECT_EQ(CheckBoxInside({4}, B({-1}, {2})), E::kOutside);
  EXPECT_EQ(CheckBoxInside({4}, B({1}, {-1})), E::kOutside);
  EXPECT_EQ(CheckBoxInside({4}, B({INT64_MAX}, {INT64_MAX})), E::kOutside);
  EXPECT_EQ(CheckBoxInside({4}, B({2}, {INT64_MAX})), E::kOutside);
  EXPECT_EQ(CheckBoxInside({4}, B({4}, {0})), E::kNone);
  EXPECT_EQ(CheckBoxInside({-1}, B({0}, {0})), E::kOutside);
  PartitionProblem p =
      CheckPartition({4}, {B({0}, {4}), B({3}, {2}), B({9}, {1})});
  EXPECT_EQ(p.error, E::kOutside);
  EXPECT_EQ(p.box, 1u);
  p = CheckPartition({4}, {B({0}, {4}), B({1}, {0})});
  EXPECT_EQ(p.error, E::kEmptyBox);
  EXPECT_EQ(p.box, 1u);
  EXPECT_TRUE(CheckPartition({4}, {B({0}, {4}), B({1}, {0})},
                             {.allow_empty_boxes = true})
                  .ok());
  EXPECT_EQ(CheckPartition({0, 2}, {B({0, 0}, {0, 2})}).error, E::kEmptyBox);
  EXPECT_TRUE(
      CheckPartition({0, 2}, {B({0, 0}, {0, 2})}, {.allow_empty_boxes = true})
          .ok());
}

TEST(PartitionTest, BadGlobalShapes) {
  EXPECT_EQ(CheckPartition({4, -1}, {}).error, E::kBadShape);
  const int64_t big = int64_t{1} << 31;
  EXPECT_EQ(CheckPartition({big, big, 2}, {B({0, 0, 0}, {big, big, 2})}).error,
            E::kBadShape);
  EXPECT_TRUE(CheckPartition({big, big}, {B({0, 0}, {big, big})}).ok());
}

TEST(PartitionTest, BoxesCutInManyDimensionsTakeTheSweep) {
  // One element of a 40-d tensor of 2^40 elements has 2^40 corners.
  const Shape shape(40, 2);
  PartitionProblem p = CheckPartition(shape, {B(Shape(40, 0), Shape(40, 1))});
  EXPECT_EQ(p.error, E::kGap);
  EXPECT_FALSE(p.missing_element.has_value());
  EXPECT_EQ(p.covered, 1);
  EXPECT_EQ(p.total, int64_t{1} << 40);
  p = CheckPartition(
      shape, {B(Shape(40, 0), Shape(40, 2)), B(Shape(40, 1), Shape(40, 1))});
  EXPECT_EQ(p.error, E::kOverlap);
  EXPECT_EQ(p.overlap, B(Shape(40, 1), Shape(40, 1)));
}

TEST(PartitionTest, LargeInputsAreChecked) {
  // 10^6 row chunks; a 500 x 500 grid.
  std::vector<Box> rows;
  for (int64_t r = 0; r < 1'000'000; ++r) rows.push_back(B({r, 0}, {1, 8}));
  EXPECT_TRUE(CheckPartition({1'000'000, 8}, rows).ok());
  rows[500'000].origin[0] = 500'001;  // a gap, then an overlap
  PartitionProblem p = CheckPartition({1'000'000, 8}, rows);
  EXPECT_EQ(p.error, E::kGap);
  EXPECT_EQ(p.missing_element, (Shape{500'000, 0}));
  std::vector<Box> grid;
  for (int64_t i = 0; i < 500; ++i) {
    for (int64_t j = 0; j < 500; ++j) grid.push_back(B({i * 2, j}, {2, 1}));
  }
  EXPECT_TRUE(CheckPartition({1000, 500}, grid).ok());
  grid[1234].shape = {2, 2};
  p = CheckPartition({1000, 500}, grid);
  EXPECT_EQ(p.error, E::kOverlap);
  EXPECT_EQ(p.box, 1234u);
  EXPECT_EQ(p.other_box, 1235u);
}

// --- Property tests against brute force -------------------------------------

// Calls fn(coord) for every element of a tensor of `shape`, row-major.
template <typename Fn>
void ForEachElement(const Shape& shape, Fn&& fn) {
  for (int64_t e : shape) {
    if (e == 0) return;
  }
  Shape coord(shape.size(), 0);
  while (true) {
    fn(coord);
    size_t d = shape.size();
    while (true) {
      if (d == 0) return;
      --d;
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}

bool Holds(const Box& box, const Shape& coord) {
  for (size_t d = 0; d < coord.size(); ++d) {
    if (coord[d] < box.origin[d] || coord[d] >= box.origin[d] + box.shape[d])
      return false;
  }
  return true;
}

// What CheckPartition should return, by counting every element's holders.
PartitionProblem BruteForce(const Shape& shape, const std::vector<Box>& boxes,
                            const PartitionOptions& options) {
  PartitionProblem want;
  int64_t total = 1;
  for (int64_t e : shape) total *= e;
  std::vector<size_t> live;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box& b = boxes[i];
    want.box = i;
    if (b.origin.size() != shape.size() || b.shape.size() != shape.size()) {
      want.error = E::kWrongRank;
      return want;
    }
    int64_t volume = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (b.origin[d] < 0 || b.shape[d] < 0 ||
          b.origin[d] + b.shape[d] > shape[d]) {
        want.error = E::kOutside;
        return want;
      }
      volume *= b.shape[d];
    }
    if (volume == 0 && !options.allow_empty_boxes) {
      want.error = E::kEmptyBox;
      return want;
    }
    bool replica = false;
    for (size_t j : live) replica |= options.allow_replicas && boxes[j] == b;
    if (volume > 0 && !replica) live.push_back(i);
  }
  want = {};
  bool found = false;
  ForEachElement(shape, [&](const Shape& coord) {
    if (found) return;
    std::vector<size_t> holders;
    for (size_t i : live) {
      if (Holds(boxes[i], coord)) holders.push_back(i);
    }
    if (holders.size() == 1) return;
    found = true;
    if (holders.empty()) {
      want.error = E::kGap;
      want.missing_element = coord;
      want.total = total;
      for (size_t i : live) want.covered += boxes[i].volume();
    } else {
      want.error = E::kOverlap;
      want.box = holders[0];
      want.other_box = holders[1];
      want.overlap = *Intersect(boxes[holders[0]], boxes[holders[1]]);
    }
  });
  return want;
}

int64_t Rand(std::mt19937& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

Box RandomBox(const Shape& shape, std::mt19937& rng) {
  Box b{Shape(shape.size()), Shape(shape.size())};
  for (size_t d = 0; d < shape.size(); ++d) {
    b.origin[d] = Rand(rng, 0, shape[d]);
    b.shape[d] = Rand(rng, 0, shape[d] - b.origin[d]);
  }
  return b;
}

// Breaks a partition the ways stored records and layouts go wrong.
void Mutate(const Shape& shape, std::mt19937& rng, std::vector<Box>& boxes) {
  const size_t ndim = shape.size();
  const size_t i = boxes.empty() ? 0 : rng() % boxes.size();
  switch (rng() % 9) {
    case 0:  // a replica
      if (!boxes.empty()) boxes.push_back(boxes[i]);
      break;
    case 1:  // shifted by one: overlap and gap of the same volume, or outside
      if (ndim > 0 && !boxes.empty())
        boxes[i].origin[rng() % ndim] += rng() % 2 ? 1 : -1;
      break;
    case 2:  // grown or shrunk by one
      if (ndim > 0 && !boxes.empty())
        boxes[i].shape[rng() % ndim] += rng() % 2 ? 1 : -1;
      break;
    case 3:  // lost
      if (!boxes.empty()) boxes.erase(boxes.begin() + i);
      break;
    case 4:  // a random extra box, possibly empty
      boxes.push_back(RandomBox(shape, rng));
      break;
    case 5:  // another rank
      if (!boxes.empty()) {
        boxes[i].origin.push_back(0);
        boxes[i].shape.push_back(1);
      }
      break;
    case 6:  // an empty box at a random place inside
      boxes.push_back(RandomBox(shape, rng));
      if (ndim > 0) boxes.back().shape[rng() % ndim] = 0;
      break;
    default:  // a replica that also moved by one
      if (ndim > 0 && !boxes.empty()) {
        boxes.push_back(boxes[i]);
        boxes.back().origin[rng() % ndim] += 1;
      }
      break;
  }
}

std::vector<Box> RandomBoxes(const Shape& shape, std::mt19937& rng) {
  std::vector<Box> boxes;
  if (rng() % 5 == 0) {
    const int n = static_cast<int>(rng() % 6);
    for (int k = 0; k < n; ++k) boxes.push_back(RandomBox(shape, rng));
    return boxes;
  }
  if (NumElements(shape) > 0)
    RandomPartition({Shape(shape.size(), 0), shape}, rng, 5, boxes);
  const int mutations = static_cast<int>(rng() % 3);
  for (int k = 0; k < mutations; ++k) Mutate(shape, rng, boxes);
  std::shuffle(boxes.begin(), boxes.end(), rng);
  return boxes;
}

Shape RandomShape(std::mt19937& rng) {
  Shape shape(rng() % 4);
  for (int64_t& e : shape) e = Rand(rng, 0, 6) + (rng() % 8 ? 1 : 0);
  return shape;
}

void ExpectSame(const PartitionProblem& got, const PartitionProblem& want) {
  EXPECT_EQ(got.error, want.error)
      << got.ToString() << " vs " << want.ToString();
  if (got.error != want.error || want.ok()) return;
  switch (want.error) {
    case E::kOverlap:
      EXPECT_EQ(got.other_box, want.other_box);
      EXPECT_EQ(got.overlap, want.overlap);
      [[fallthrough]];
    case E::kWrongRank:
    case E::kOutside:
    case E::kEmptyBox:
      EXPECT_EQ(got.box, want.box);
      break;
    case E::kGap:
      EXPECT_EQ(got.missing_element, want.missing_element);
      EXPECT_EQ(got.covered, want.covered);
      EXPECT_EQ(got.total, want.total);
      break;
    default:
      break;
  }
}

class PartitionPropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(PartitionPropertyTest, CornersMatchBruteForce) {
  std::mt19937 rng(static_cast<unsigned>(GetParam()));
  int problems = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Shape shape = RandomShape(rng);
    const std::vector<Box> boxes = RandomBoxes(shape, rng);
    const PartitionOptions options{.allow_replicas = rng() % 2 == 0,
                                   .allow_empty_boxes = rng() % 2 == 0};
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " shape " << ShapeToString(shape)
                 << " boxes " << boxes.size());
    const PartitionProblem want = BruteForce(shape, boxes, options);
    ExpectSame(CheckPartition(shape, boxes, options), want);
    problems += want.ok() ? 0 : 1;
  }
  EXPECT_GT(problems, 100);
  EXPECT_LT(problems, 350);
}

// The sweep may report another overlap than the first, and a gap only when
// there is no overlap, with no element.
TEST_P(PartitionPropertyTest, SweepFindsTheSameKindOfProblem) {
  std::mt19937 rng(static_cast<unsigned>(GetParam()) + 1000);
  for (int trial = 0; trial < 400; ++trial) {
    const Shape shape = RandomShape(rng);
    const std::vector<Box> boxes = RandomBoxes(shape, rng);
    PartitionOptions options{.allow_replicas = rng() % 2 == 0,
                             .allow_empty_boxes = rng() % 2 == 0};
    options.corners_per_box = 0;
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " shape " << ShapeToString(shape));
    const PartitionProblem want = BruteForce(shape, boxes, options);
    const PartitionProblem got = CheckPartition(shape, boxes, options);
    if ((want.error != E::kGap && want.error != E::kOverlap) || shape.empty()) {
      ExpectSame(got, want);  // 0-d tensors always take the corners
      continue;
    }
    bool any_overlap = false;
    for (size_t a = 0; a < boxes.size(); ++a) {
      for (size_t b = a + 1; b < boxes.size(); ++b) {
        if (boxes[a].volume() == 0 || boxes[b].volume() == 0) continue;
        if (options.allow_replicas && boxes[a] == boxes[b]) continue;
        any_overlap |= Intersect(boxes[a], boxes[b]).has_value();
      }
    }
    if (any_overlap) {
      ASSERT_EQ(got.error, E::kOverlap) << got.ToString();
      ASSERT_LT(got.box, got.other_box);
      EXPECT_EQ(Intersect(boxes[got.box], boxes[got.other_box]), got.overlap);
      if (options.allow_replicas) {
        EXPECT_NE(boxes[got.box], boxes[got.other_box]);
      }
    } else {
      ASSERT_EQ(got.error, E::kGap) << got.ToString();
      EXPECT_FALSE(got.missing_element.has_value());
      EXPECT_EQ(got.covered, want.covered);
      EXPECT_EQ(got.total, want.total);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, PartitionPropertyTest, ::testing::Range(0, 8));

}  // namespace
}  // namespace ckptdb::planner
