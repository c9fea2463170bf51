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

TEST(ShapeTest, RandomOperationsMatchAVector) {
  std::mt19937_64 rng(7);
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  for (int trial = 0; trial < 300; ++trial) {
    Shape shape;
    std::vector<int64_t> model;
    for (int op = 0; op < 60; ++op) {
      const int64_t v = static_cast<int64_t>(pick(1000)) - 500;
      switch (pick(12)) {
        case 0:
          shape.push_back(v);
          model.push_back(v);
          break;
        case 1:
          if (!model.empty()) {
            shape.pop_back();
            model.pop_back();
          }
          break;
        case 2: {
          const size_t n = pick(10);
          shape.resize(n, v);
          model.resize(n, v);
          break;
        }
        case 3: {
          const size_t at = pick(model.size() + 1);
          shape.insert(shape.begin() + at, v);
          model.insert(model.begin() + at, v);
          break;
        }
        case 4: {
          // Its own values, inserted into itself.
          const size_t at = pick(model.size() + 1);
          const std::vector<int64_t> copy = model;
          shape.insert(shape.begin() + at, shape.begin(), shape.end());
          model.insert(model.begin() + at, copy.begin(), copy.end());
          break;
        }
        case 5:
          if (!model.empty()) {
            const size_t from = pick(model.size());
            const size_t to = from + pick(model.size() - from + 1);
            shape.erase(shape.begin() + from, shape.begin() + to);
            model.erase(model.begin() + from, model.begin() + to);
          }
          break;
        case 6: {
          Shape copy = shape;  // copy, then moved back: inline or heap
          shape = Shape();
          ExpectSame(shape, {});
          shape = std::move(copy);
          break;
        }
        case 7: {
          // A tail of its own values assigned to itself.
          const size_t from = pick(model.size() + 1);
          shape.assign(shape.begin() + from, shape.end());
          model.assign(model.begin() + from, model.end());
          break;
        }
        case 8: {
          const size_t n = pick(9);
          shape.assign(n, v);
          model.assign(n, v);
          break;
        }
        case 9: {
          Shape other(model.begin(), model.end());
          ExpectSame(other, model);
          EXPECT_EQ(other, shape);
          EXPECT_EQ(other <=> shape, std::strong_ordering::equal);
          other.push_back(v);
          EXPECT_LT(shape, other);
          Shape moved(std::move(other));
          EXPECT_TRUE(other.empty());
          swap(moved, shape);
          std::swap(model, model);  // keeps the model; swapped back below
          swap(moved, shape);
          break;
        }
        case 10:
          shape.clear();
          model.clear();
          break;
        default:
          if (!model.empty()) {
            const size_t at = pick(model.size());
            shape[at] = v;
            model[at] = v;
          }
      }
      ExpectSame(shape, model);
      EXPECT_EQ(std::vector<int64_t>(shape), model);
    }
  }
}

TEST(ShapeTest, OrdersAsVectorsDo) {
  const std::vector<std::vector<int64_t>> values = {
      {}, {0}, {0, 0}, {0, 1}, {1}, {1, 2, 3, 4, 5, 6}, {-1, 7}, {2, 2, 2, 2, 2}};
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
