#include "planner/read_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "core/random_boxes.h"

namespace ckptdb::planner {
namespace {

using E = IndexEntry;

TensorMetadata Tensor(Shape shape, const std::vector<Box>& chunks) {
  TensorMetadata t;
  t.global_shape = std::move(shape);
  for (const Box& b : chunks) {
    t.chunks.push_back({b, 0, static_cast<uint64_t>(b.volume()) * 4, 0});
  }
  return t;
}

TEST(ResolveIndexTest, SlicesIntsAndMissingDimensions) {
  auto plan = ResolveIndex("w", {8, 6, 4}, {E::Range(2, 5), E::At(-1)});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->box, (Box{{2, 5, 0}, {3, 1, 4}}));
  EXPECT_EQ(plan->result_shape, (Shape{3, 4}));  // the int drops its dimension
  auto whole = ResolveIndex("w", {8, 6}, {});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->box, (Box{{0, 0}, {8, 6}}));
  EXPECT_EQ(whole->result_shape, (Shape{8, 6}));
  auto from_end = ResolveIndex("w", {8}, {E::Range(-3, std::nullopt)});
  ASSERT_TRUE(from_end.ok());
  EXPECT_EQ(from_end->box, (Box{{5}, {3}}));
  auto empty = ResolveIndex("w", {8}, {E::Range(4, 4)});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->result_shape, (Shape{0}));
  auto scalar = ResolveIndex("s", {}, {});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->box, Box{});
  EXPECT_EQ(scalar->result_shape, Shape{});
}

// As numpy's a[start:stop]: bounds beyond the dimension are clamped to it, and
// a start at or after the stop selects nothing.
TEST(ResolveIndexTest, SliceBoundsAreClampedAsNumpyClampsThem) {
  struct Case {
    IndexEntry entry;
    int64_t begin, end;
  };
  const std::vector<Case> cases = {
      {E::Range(0, 9), 0, 8},     {E::Range(-9, 2), 0, 2},
      {E::Range(5, 3), 5, 5},     {E::Range(9, 12), 8, 8},
      {E::Range(-20, -10), 0, 0}, {E::Range(std::nullopt, 100), 0, 8},
      {E::Range(-3, 100), 5, 8},  {E::Range(INT64_MIN, INT64_MAX), 0, 8},
  };
  for (const Case& c : cases) {
    auto plan = ResolveIndex("w", {8, 4}, {c.entry});
    ASSERT_TRUE(plan.ok()) << IndexToString({c.entry});
    EXPECT_EQ(plan->box, (Box{{c.begin, 0}, {c.end - c.begin, 4}}))
        << IndexToString({c.entry});
    EXPECT_EQ(plan->result_shape, (Shape{c.end - c.begin, 4}));
  }
  // A Box's range is exact: the same bounds inside the tensor give the same.
  auto exact = ResolveIndex("w", {8, 4}, {E::Exact(2, 8)});
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->box, (Box{{2, 0}, {6, 4}}));
  EXPECT_EQ(IndexOfBox(Box{{1, 2}, {3, 4}}),
            (TensorIndex{E::Exact(1, 4), E::Exact(2, 6)}));
}

TEST(ResolveIndexTest, BadIndexesNameKeyShapeAndIndex) {
  struct Case {
    TensorIndex index;
    std::string why;
  };
  const std::vector<Case> cases = {
      {{E::Exact(0, 9), E::Range()}, "out of range"},
      {{E::At(8)}, "out of range"},
      {{E::At(-9)}, "out of range"},
      {{E::Exact(-9, 2)}, "out of range"},
      {{E::Range(0, 4, 2)}, "step 2"},
      {{E::Range(), E::Range(), E::At(0)}, "more than the tensor's 2"},
      {{E::Exact(5, 3)}, "after stop"},
  };
  for (const Case& c : cases) {
    auto plan = ResolveIndex("model.w", {8, 4}, c.index);
    ASSERT_FALSE(plan.ok()) << IndexToString(c.index);
    const std::string& m = plan.status().message();
    EXPECT_TRUE(plan.status().IsInvalidArgument());
    EXPECT_NE(m.find("'model.w'"), std::string::npos) << m;
    EXPECT_NE(m.find("[8, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find(IndexToString(c.index)), std::string::npos) << m;
    EXPECT_NE(m.find(c.why), std::string::npos) << m;
  }
  EXPECT_EQ(IndexToString({E::Range(1024, 2048), E::Range(), E::At(-2),
                           E::Range(std::nullopt, 3, 2)}),
            "[1024:2048, :, -2, :3:2]");
}

TEST(PlanBoxReadTest, OnlyChunksMeetingTheBox) {
  // Row bands of 4 rows, each cut into two column blocks.
  std::vector<Box> chunks;
  for (int64_t r = 0; r < 16; r += 4) {
    chunks.push_back({{r, 0}, {4, 3}});
    chunks.push_back({{r, 3}, {4, 5}});
  }
  const TensorMetadata t = Tensor({16, 8}, chunks);
  auto plan = PlanBoxRead("w", t, {E::Range(5, 9), E::Range(4, 6)});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->parts.size(), 2u);
  EXPECT_EQ(plan->parts[0], (ChunkPart{3, Box{{5, 4}, {3, 2}}}));
  EXPECT_EQ(plan->parts[1], (ChunkPart{5, Box{{8, 4}, {1, 2}}}));
  auto none = PlanBoxRead("w", t, {E::Range(5, 5)});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->parts.empty());
  const TensorMetadata scalar = Tensor({}, {Box{}});
  auto one = PlanBoxRead("s", scalar, {});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->parts, (std::vector<ChunkPart>{{0, Box{}}}));
}

// Against brute force: random partitions of random tensors, random boxes; the
// plan's parts are exactly the chunks sharing an element with the box, and
// together they hold each element of the box once.
TEST(PlanBoxReadTest, MatchesBruteForce) {
  std::mt19937 rng(16);
  int checked = 0, parts = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const size_t ndim = 1 + rng() % 3;
    Shape shape;
    for (size_t d = 0; d < ndim; ++d) shape.push_back(1 + rng() % 9);
    std::vector<Box> chunks;
    testing::RandomPartition({Shape(ndim, 0), shape}, rng, 6, chunks);
    const TensorMetadata t = Tensor(shape, chunks);
    TensorIndex index;
    for (size_t d = 0; d < ndim; ++d) {
      const int64_t a = rng() % (shape[d] + 1), b = rng() % (shape[d] + 1);
      index.push_back(E::Range(std::min(a, b), std::max(a, b)));
    }
    auto plan = PlanBoxRead("w", t, index);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    std::vector<ChunkPart> expected;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (auto common = Intersect(chunks[c], plan->box)) {
        expected.push_back({c, *common});
      }
    }
    ASSERT_EQ(plan->parts, expected) << "trial " << trial;
    std::vector<int> seen(plan->box.volume(), 0);
    Shape relative(ndim);
    for (const ChunkPart& p : plan->parts) {
      testing::ForEachElement(p.common, [&](const Shape& coord) {
        for (size_t d = 0; d < ndim; ++d)
          relative[d] = coord[d] - plan->box.origin[d];
        ++seen[testing::Linear(plan->box.shape, relative)];
      });
    }
    for (int s : seen) ASSERT_EQ(s, 1) << "trial " << trial;
    ++checked;
    parts += static_cast<int>(plan->parts.size());
  }
  EXPECT_EQ(checked, 400);
  EXPECT_GT(parts, 400);
}

}  // namespace
}  // namespace ckptdb::planner
