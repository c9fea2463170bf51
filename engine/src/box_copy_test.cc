#include "engine/src/box_copy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

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

TEST(MinifloatTest, KnownEncodings) {
  EXPECT_EQ(FloatToHalf(1.0), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0), 0x7BFF);
  EXPECT_EQ(FloatToHalf(1e6), 0x7C00);                   // overflow to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(FloatToBFloat16(1.0), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(3.140625), 0x4049);
  EXPECT_EQ(FloatToE4M3FN(448.0), 0x7E);
  EXPECT_EQ(FloatToE4M3FN(1.0), 0x38);
  EXPECT_TRUE(std::isnan(E4M3FNToFloat(FloatToE4M3FN(1000.0))));
  EXPECT_EQ(FloatToE5M2(1.0), 0x3C);
  EXPECT_EQ(FloatToE5M2(57344.0), 0x7B);
  // Round half to even: 1 + 2^-11 is halfway between two halves; ties to the
  // even 1.0.
  EXPECT_EQ(FloatToHalf(1.0 + std::ldexp(1.0, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);
}

TEST(MinifloatTest, EveryCodeRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    double v = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(FloatToHalf(v), h) << h;
    double b = BFloat16ToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(b)) {
      ASSERT_EQ(FloatToBFloat16(b), h) << h;
    }
  }
  for (uint32_t c = 0; c < 256; ++c) {
    double a = E4M3FNToFloat(static_cast<uint8_t>(c)),
           b = E5M2ToFloat(static_cast<uint8_t>(c));
    if (!std::isnan(a)) {
      ASSERT_EQ(FloatToE4M3FN(a), c) << c;
    }
    if (!std::isnan(b)) {
      ASSERT_EQ(FloatToE5M2(b), c) << c;
    }
  }
}

}  // namespace
}  // namespace ckptdb::engine
