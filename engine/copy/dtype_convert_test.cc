#include "engine/copy/dtype_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ckptdb::engine {
namespace {

TEST(MinifloatTest, KnownEncodings) {
  EXPECT_EQ(FloatToHalf(1.0), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0), 0x7BFF);
  EXPECT_EQ(FloatToHalf(1e6), 0x7C00);                   // overflow to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  // NaN becomes the quiet NaN of each format (its sign kept), as torch's.
  EXPECT_EQ(FloatToHalf(NAN), 0x7E00);
  EXPECT_EQ(FloatToBFloat16(NAN), 0x7FC0);
  EXPECT_EQ(FloatToBFloat16(-NAN), 0xFFC0);
  EXPECT_EQ(FloatToE5M2(NAN), 0x7E);
  EXPECT_EQ(FloatToE4M3FN(NAN), 0x7F);
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

// Float to integer truncates toward zero and saturates, NaN becomes 0.
TEST(ConvertElementsTest, FloatToIntegerTruncatesAndSaturates) {
  const std::vector<double> src = {2.9, -2.9, 1e10, -1e10,
                                   std::numeric_limits<double>::quiet_NaN()};
  std::vector<int32_t> out(src.size(), 7);
  ConvertElements(src.data(), DType::kFloat64, out.data(), DType::kInt32,
                  src.size());
  EXPECT_EQ(out, (std::vector<int32_t>{2, -2, INT32_MAX, INT32_MIN, 0}));
  std::vector<uint8_t> bytes(src.size(), 7);
  ConvertElements(src.data(), DType::kFloat64, bytes.data(), DType::kUInt8,
                  src.size());
  EXPECT_EQ(bytes, (std::vector<uint8_t>{2, 0, 255, 0, 0}));
}

// Integer to integer wraps like a C cast; to bool is "not zero".
TEST(ConvertElementsTest, IntegerToIntegerWraps) {
  const std::vector<int64_t> src = {300, -1, 0, int64_t{1} << 40};
  std::vector<uint8_t> u8(src.size());
  ConvertElements(src.data(), DType::kInt64, u8.data(), DType::kUInt8,
                  src.size());
  EXPECT_EQ(u8, (std::vector<uint8_t>{44, 255, 0, 0}));
  std::vector<uint8_t> flags(src.size());
  ConvertElements(src.data(), DType::kInt64, flags.data(), DType::kBool,
                  src.size());
  EXPECT_EQ(flags, (std::vector<uint8_t>{1, 1, 0, 1}));
}

// Unsigned 32- and 64-bit integers: by value to floats (uint64 above 2^63
// too), saturated from floats, wrapped like a C cast between integers.
TEST(ConvertElementsTest, UnsignedIntegersConvertByValue) {
  const std::vector<uint64_t> big = {UINT64_MAX, uint64_t{1} << 63, 5};
  std::vector<double> as_double(big.size());
  ConvertElements(big.data(), DType::kUInt64, as_double.data(), DType::kFloat64,
                  big.size());
  EXPECT_EQ(as_double, (std::vector<double>{18446744073709551616.0,
                                            9223372036854775808.0, 5.0}));
  std::vector<int64_t> as_int(big.size());
  ConvertElements(big.data(), DType::kUInt64, as_int.data(), DType::kInt64,
                  big.size());
  EXPECT_EQ(as_int, (std::vector<int64_t>{-1, INT64_MIN, 5}));
  const std::vector<double> floats = {-1.0, 5e9, 3.7, 2e19};
  std::vector<uint32_t> u32(floats.size());
  ConvertElements(floats.data(), DType::kFloat64, u32.data(), DType::kUInt32,
                  floats.size());
  EXPECT_EQ(u32, (std::vector<uint32_t>{0, UINT32_MAX, 3, UINT32_MAX}));
  std::vector<uint64_t> u64(floats.size());
  ConvertElements(floats.data(), DType::kFloat64, u64.data(), DType::kUInt64,
                  floats.size());
  EXPECT_EQ(u64, (std::vector<uint64_t>{0, 5000000000, 3, UINT64_MAX}));
  const std::vector<int32_t> negative = {-1, 7};
  std::vector<uint32_t> wrapped(negative.size());
  ConvertElements(negative.data(), DType::kInt32, wrapped.data(),
                  DType::kUInt32, negative.size());
  EXPECT_EQ(wrapped, (std::vector<uint32_t>{UINT32_MAX, 7}));
}

// The same dtype copies the bytes; integers to floats round to the nearest.
TEST(ConvertElementsTest, SameDTypeCopiesAndIntegersRoundToFloats) {
  const std::vector<uint16_t> halves = {0x3C00, 0x7E00,
                                        0xFC00};  // 1, NaN, -inf
  std::vector<uint16_t> copy(halves.size());
  ConvertElements(halves.data(), DType::kFloat16, copy.data(), DType::kFloat16,
                  halves.size());
  EXPECT_EQ(copy, halves);
  const std::vector<int32_t> ints = {2049, -3};
  std::vector<uint16_t> as_half(ints.size());
  ConvertElements(ints.data(), DType::kInt32, as_half.data(), DType::kFloat16,
                  ints.size());
  EXPECT_EQ(HalfToFloat(as_half[0]), 2048.0);  // ties to even
  EXPECT_EQ(HalfToFloat(as_half[1]), -3.0);
}

}  // namespace
}  // namespace ckptdb::engine
