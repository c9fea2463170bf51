#include "ckptdb/shape.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "ckptdb/types.h"

namespace ckptdb {
namespace {

// The shape holds exactly what a std::vector given the same operations holds.
void ExpectSame(const Shape& shape, const std::vector<int64_t>& model) {
  ASSERT_EQ(shape.size(), model.size());
  ASSERT_EQ(shape.empty(), model.empty());
  ASSERT_TRUE(std::equal(shape.begin(), shape.end(), model.begin()));
  ASSERT_GE(shape.capacity(), shape.size());
}

// One random operation, the same on `shape` and on `model`.
void ApplyRandomOperation(std::mt19937_64& rng, Shape& shape,
                          std::vector<int64_t>& model) {
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  auto both = [&](auto op) {
    op(shape);
    op(model);
  };
  const int64_t v = static_cast<int64_t>(pick(1000)) - 500;
  const size_t at = pick(model.size() + 1);  // a position, end included
  switch (pick(12)) {
    case 0:
      return both([&](auto& c) { c.push_back(v); });
    case 1:
      if (!model.empty()) both([](auto& c) { c.pop_back(); });
      return;
    case 2:
      return both([n = pick(10), v](auto& c) { c.resize(n, v); });
    case 3:
      return both([&](auto& c) { c.insert(c.begin() + at, v); });
    case 4: {
      // Its own values, inserted into itself (the vector takes a copy).
      const std::vector<int64_t> copy = model;
      shape.insert(shape.begin() + at, shape.begin(), shape.end());
      model.insert(model.begin() + at, copy.begin(), copy.end());
      return;
    }
    case 5: {
      const size_t to = at + pick(model.size() - at + 1);
      return both([&](auto& c) { c.erase(c.begin() + at, c.begin() + to); });
    }
    case 6: {
      Shape copy = shape;  // copy, then moved back: inline or heap
      shape = Shape();
      ExpectSame(shape, {});
      shape = std::move(copy);
      return;
    }
    case 7:  // a tail of its own values assigned to itself
      return both([&](auto& c) { c.assign(c.begin() + at, c.end()); });
    case 8:
      return both([n = pick(9), v](auto& c) { c.assign(n, v); });
    case 9: {
      Shape other(model.begin(), model.end());
      ExpectSame(other, model);
      EXPECT_EQ(other, shape);
      EXPECT_EQ(other <=> shape, std::strong_ordering::equal);
      other.push_back(v);
      EXPECT_LT(shape, other);
      Shape moved(std::move(other));
      EXPECT_TRUE(other.empty());
      swap(moved, shape);  // and back
      swap(moved, shape);
      return;
    }
    case 10:
      return both([](auto& c) { c.clear(); });
    default:
      if (at < model.size()) both([&](auto& c) { c[at] = v; });
  }
}

TEST(ShapeTest, RandomOperationsMatchAVector) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    Shape shape;
    std::vector<int64_t> model;
    for (int op = 0; op < 60; ++op) {
      ApplyRandomOperation(rng, shape, model);
      ExpectSame(shape, model);
      EXPECT_EQ(std::vector<int64_t>(shape), model);
    }
  }
}

TEST(ShapeTest, OrdersAsVectorsDo) {
  const std::vector<std::vector<int64_t>> values = {{},      {0},
                                                    {0, 0},  {0, 1},
                                                    {1},     {1, 2, 3, 4, 5, 6},
                                                    {-1, 7}, {2, 2, 2, 2, 2}};
  for (const auto& a : values) {
    for (const auto& b : values) {
      EXPECT_EQ(Shape(a) == Shape(b), a == b);
      EXPECT_EQ(Shape(a) < Shape(b), a < b);
    }
  }
}

TEST(ShapeTest, HoldsFourValuesWithoutTheHeapAndMoreOnIt) {
  Shape small = {1, 2, 3, 4};
  EXPECT_EQ(small.capacity(), Shape::kInline);
  const int64_t* inline_data = small.data();
  EXPECT_TRUE(inline_data >= reinterpret_cast<const int64_t*>(&small) &&
              inline_data < reinterpret_cast<const int64_t*>(&small + 1));
  small.push_back(5);
  EXPECT_GT(small.capacity(), Shape::kInline);
  EXPECT_EQ(small, (Shape{1, 2, 3, 4, 5}));
  Shape moved = std::move(small);  // takes the heap values as they are
  EXPECT_EQ(moved, (Shape{1, 2, 3, 4, 5}));
  EXPECT_TRUE(small.empty());
  EXPECT_THROW(moved.at(5), std::out_of_range);
  EXPECT_EQ(moved.at(4), 5);
}

// What C++ callers written against std::vector<int64_t> shapes do still
// compiles and means the same: build views from vectors, compare with them,
// copy into them, pass shapes where a vector or a span is taken.
TEST(ShapeTest, ConvertsToAndFromStdVectorWhereCallersUseOne) {
  const std::vector<int64_t> dims = {2, 3, 4, 5, 6};
  float data[720] = {};
  const TensorView view = TensorView::Whole(data, DType::kFloat32, dims);
  EXPECT_EQ(view.global_shape, dims);
  EXPECT_EQ(view.num_elements(), 720);
  const std::vector<int64_t> back = view.local_shape;
  EXPECT_EQ(back, dims);
  auto size_of = [](const std::vector<int64_t>& v) { return v.size(); };
  EXPECT_EQ(size_of(view.global_shape), 5u);
  const std::span<const int64_t> span(view.global_shape);
  EXPECT_EQ(std::accumulate(span.begin(), span.end(), int64_t{0}), 20);
  EXPECT_EQ(ShapeToString(view.global_shape), "[2, 3, 4, 5, 6]");
}

}  // namespace
}  // namespace ckptdb
