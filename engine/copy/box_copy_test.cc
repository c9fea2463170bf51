#include "engine/copy/box_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/random_boxes.h"
#include "engine/copy/dtype_convert.h"

namespace ckptdb::engine {
namespace {

TEST(BoxCopyTest, CopiesSubBoxBetweenStridedBuffers) {
  std::vector<int32_t> src(4 * 5), dst(3 * 6, -1);
  std::iota(src.begin(), src.end(), 0);
  const Shape src_shape{4, 5}, dst_shape{3, 6}, src_off{1, 2}, dst_off{0, 3},
      len{2, 3};
  CopyBox({src.data(), src_shape, src_off}, DType::kInt32,
          {dst.data(), dst_shape, dst_off}, DType::kInt32, len);
  // Rows 1-2, cols 2-4 of src land in rows 0-1, cols 3-5 of dst.
  EXPECT_EQ(dst[0 * 6 + 3], 7);
  EXPECT_EQ(dst[0 * 6 + 5], 9);
  EXPECT_EQ(dst[1 * 6 + 3], 12);
  EXPECT_EQ(dst[1 * 6 + 2], -1);
  EXPECT_EQ(dst[2 * 6 + 3], -1);
}

// A strided view of a dense parent array: every dimension sliced with a step
// of 1 or 2, the dimensions then permuted (a transpose).
struct StridedView {
  Shape shape, strides;
  int64_t first = 0;  // parent element of the view's [0, ..., 0]
};

StridedView RandomView(std::mt19937& rng, const Shape& parent) {
  const Shape dense = RowMajorStrides(parent);
  StridedView v;
  for (size_t d = 0; d < parent.size(); ++d) {
    const int64_t start = static_cast<int64_t>(rng() % parent[d]);
    const int64_t step = 1 + static_cast<int64_t>(rng() % 2);
    v.first += start * dense[d];
    v.shape.push_back((parent[d] - start + step - 1) / step);
    v.strides.push_back(step * dense[d]);
  }
  std::vector<size_t> perm(parent.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  StridedView out = v;
  for (size_t d = 0; d < perm.size(); ++d) {
    out.shape[d] = v.shape[perm[d]];
    out.strides[d] = v.strides[perm[d]];
  }
  return out;
}

// The parent element of `index` in view `v`.
size_t ParentIndex(const StridedView& v, const Shape& index) {
  int64_t at = v.first;
  for (size_t d = 0; d < index.size(); ++d) at += index[d] * v.strides[d];
  return static_cast<size_t>(at);
}

// Copies out of and into transposed, sliced views of every element size match
// an element-by-element copy, and touch nothing outside the box.
TEST(BoxCopyTest, StridedViewsOfEveryElementSize) {
  std::mt19937 rng(11);
  const DType kTypes[] = {DType::kUInt8, DType::kBFloat16, DType::kFloat32,
                          DType::kInt64};
  for (int trial = 0; trial < 400; ++trial) {
    const DType dtype = kTypes[trial % 4];
    const size_t elem = DTypeSize(dtype);
    Shape parent(1 + rng() % 4);
    for (int64_t& d : parent) d = 1 + static_cast<int64_t>(rng() % 6);
    std::vector<uint8_t> bytes(NumElements(parent) * elem);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const StridedView v = RandomView(rng, parent);
    Shape offset(v.shape.size()), lengths(v.shape.size());
    for (size_t d = 0; d < v.shape.size(); ++d) {
      offset[d] = static_cast<int64_t>(rng() % v.shape[d]);
      lengths[d] = 1 + static_cast<int64_t>(rng() % (v.shape[d] - offset[d]));
    }
    const planner::Box box{offset, lengths};
    std::vector<uint8_t> packed(NumElements(lengths) * elem), want;
    planner::testing::ForEachElement(box, [&](const Shape& x) {
      const uint8_t* p = &bytes[ParentIndex(v, x) * elem];
      want.insert(want.end(), p, p + elem);
    });
    const Shape zero(lengths.size(), 0);
    CopyBox({bytes.data() + v.first * elem, v.shape, offset, v.strides}, dtype,
            {packed.data(), lengths, zero}, dtype, lengths);
    ASSERT_EQ(packed, want) << "out of the view, trial " << trial;

    // Into the view: the box's elements take the packed values, the rest of
    // the parent keeps its bytes.
    std::vector<uint8_t> into(bytes.size(), 0xA5), expected = into;
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    size_t k = 0;
    planner::testing::ForEachElement(box, [&](const Shape& x) {
      std::copy_n(&packed[k++ * elem], elem,
                  &expected[ParentIndex(v, x) * elem]);
    });
    CopyBox({packed.data(), lengths, zero}, dtype,
            {into.data() + v.first * elem, v.shape, offset, v.strides}, dtype,
            lengths);
    ASSERT_EQ(into, expected) << "into the view, trial " << trial;
  }
}

// Boxes larger than a tile of the transposing copy, out of and into a
// transpose, with a dtype conversion on one of them.
TEST(BoxCopyTest, LargeTransposesGoByTiles) {
  const int64_t rows = 150, cols = 131;
  std::vector<int32_t> a(rows * cols);
  std::iota(a.begin(), a.end(), 0);
  const Shape shape{cols, rows}, offset{3, 70}, lengths{cols - 5, rows - 71};
  const std::vector<int64_t> transposed = {1, cols};
  std::vector<int32_t> packed(NumElements(lengths));
  const Shape zero{0, 0};
  CopyBox({a.data(), shape, offset, transposed}, DType::kInt32,
          {packed.data(), lengths, zero}, DType::kInt32, lengths);
  std::vector<int64_t> back(a.size(), -1);
  CopyBox({packed.data(), lengths, zero}, DType::kInt32,
          {back.data(), shape, offset, transposed}, DType::kInt64, lengths);
  for (int64_t i = 0; i < lengths[0]; ++i) {
    for (int64_t j = 0; j < lengths[1]; ++j) {
      const int64_t at = (offset[1] + j) * cols + offset[0] + i;
      ASSERT_EQ(packed[i * lengths[1] + j], a[at]) << i << ", " << j;
      ASSERT_EQ(back[at], a[at]) << i << ", " << j;
    }
  }
  EXPECT_EQ(std::count(back.begin(), back.end(), -1),
            static_cast<int64_t>(a.size()) - NumElements(lengths));
}

TEST(BoxCopyTest, ConvertsBetweenStridedViews) {
  // A transposed 2x3 float32 view into a transposed float64 one.
  const std::vector<float> src = {0, 1, 2, 3, 4, 5};  // 2x3, read as 3x2
  std::vector<double> dst(6, -1);
  const Shape shape{3, 2}, zero{0, 0};
  const std::vector<int64_t> strides = {1, 3};
  CopyBox({src.data(), shape, zero, strides}, DType::kFloat32,
          {dst.data(), shape, zero, strides}, DType::kFloat64, shape);
  EXPECT_EQ(dst, (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST(BoxCopyTest, ZeroDimAndEmpty) {
  double a = 2.5, b = 0;
  const Shape none;
  CopyBox({&a, none, none}, DType::kFloat64, {&b, none, none}, DType::kFloat64,
          none);
  EXPECT_EQ(b, 2.5);
  const Shape shape{0, 3}, zero{0, 0};
  CopyBox({nullptr, shape, zero}, DType::kFloat32, {nullptr, shape, zero},
          DType::kFloat32, shape);
}

TEST(BoxCopyTest, ConvertsWhileCopying) {
  std::vector<float> src = {1.5f, -2.25f, 65504.f, 1e-8f};
  std::vector<uint16_t> half(4);
  const Shape shape{4}, zero{0};
  CopyBox({src.data(), shape, zero}, DType::kFloat32,
          {half.data(), shape, zero}, DType::kFloat16, shape);
  EXPECT_EQ(HalfToFloat(half[0]), 1.5);
  EXPECT_EQ(HalfToFloat(half[1]), -2.25);
  EXPECT_EQ(HalfToFloat(half[2]), 65504.0);
  EXPECT_NEAR(HalfToFloat(half[3]), 1e-8, 6e-8);
  std::vector<int8_t> ints(4);
  CopyBox({src.data(), shape, zero}, DType::kFloat32,
          {ints.data(), shape, zero}, DType::kInt8, shape);
  EXPECT_EQ(ints[0], 1);
  EXPECT_EQ(ints[1], -2);
  EXPECT_EQ(ints[2], 127);  // saturated
}

}  // namespace
}  // namespace ckptdb::engine
