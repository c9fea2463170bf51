#include "dump_slice.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ckptdb::tools {
namespace {

using E = IndexEntry;

TEST(ParseSliceTest, NumpySyntax) {
  auto index = ParseSlice("0:4,:");
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_EQ(*index, (TensorIndex{E::Range(0, 4), E::Range()}));
  index = ParseSlice(" [ -1 , 2: , :-3:2 ] ");
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_EQ(*index, (TensorIndex{E::At(-1), E::Range(2, std::nullopt),
                                 E::Range(std::nullopt, -3, 2)}));
  index = ParseSlice("");
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(index->empty());
  EXPECT_EQ(IndexToString(*ParseSlice("1024:2048, :")), "[1024:2048, :]");
  // A trailing comma after an entry, as in numpy's a[0:4,].
  index = ParseSlice("0:4,");
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_EQ(*index, (TensorIndex{E::Range(0, 4)}));
}

TEST(ParseSliceTest, BadEntriesAreNamed) {
  for (const char* bad : {"0:4,,", "a", "1:2:3:4", "0.5", ",", "1:x", "1,,2"}) {
    auto index = ParseSlice(bad);
    ASSERT_FALSE(index.ok()) << bad;
    EXPECT_TRUE(index.status().IsInvalidArgument());
    EXPECT_NE(index.status().message().find(bad), std::string::npos)
        << index.status().message();
  }
}

Tensor Make(DType dtype, Shape shape, const void* data, size_t nbytes) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(nbytes);
  std::memcpy(t.data.data(), data, nbytes);
  return t;
}

TEST(FormatValuesTest, NestedRowsLikeNumpy) {
  const int32_t ints[] = {1, -2, 3, 4, 5, 6};
  EXPECT_EQ(FormatValues(Make(DType::kInt32, {2, 3}, ints, sizeof(ints))),
            "[[1, -2, 3],\n [4, 5, 6]]");
  const float floats[] = {0.5f, 1e-3f, 3.25f};
  EXPECT_EQ(FormatValues(Make(DType::kFloat32, {3}, floats, sizeof(floats))),
            "[0.5, 0.001, 3.25]");
  const uint16_t bf16[] = {0x3fc0, 0xbf80};  // 1.5, -1 in bfloat16
  EXPECT_EQ(FormatValues(Make(DType::kBFloat16, {2}, bf16, sizeof(bf16))),
            "[1.5, -1.]");
  // Positional from 1e-4 to 1e16, with a point: a float never reads as an int.
  const float round[] = {100.f, 1000.f, 2900.f, 2910.f, 0.f, 1e20f, 1e-5f};
  EXPECT_EQ(FormatValues(Make(DType::kFloat32, {7}, round, sizeof(round))),
            "[100., 1000., 2900., 2910., 0., 1.e+20, 1.e-05]");
  const float below[] = {0.01f, 0.1f, 9.99e-5f};
  EXPECT_EQ(FormatValues(Make(DType::kFloat32, {3}, below, sizeof(below))),
            "[0.01, 0.1, 9.99e-05]");
  const double precise[] = {0.1, 123456.789, 1e15 + 0.5};
  EXPECT_EQ(FormatValues(Make(DType::kFloat64, {3}, precise, sizeof(precise))),
            "[0.1, 123456.789, 1000000000000000.5]");
  const uint8_t flags[] = {1, 0};
  EXPECT_EQ(FormatValues(Make(DType::kBool, {2}, flags, 2)), "[True, False]");
  const double scalar = 2.5;
  EXPECT_EQ(FormatValues(Make(DType::kFloat64, {}, &scalar, 8)), "2.5");
  EXPECT_EQ(ValuesJson(Make(DType::kInt32, {2, 3}, ints, sizeof(ints))).dump(),
            "[[1,-2,3],[4,5,6]]");
  EXPECT_EQ(ValuesJson(Make(DType::kBool, {2}, flags, 2)).dump(),
            "[true,false]");
}

TEST(FormatValuesTest, LargeTensorsAreSummarized) {
  std::vector<int64_t> many(2000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i);
  const std::string text =
      FormatValues(Make(DType::kInt64, {2000}, many.data(), many.size() * 8));
  EXPECT_EQ(text, "[0, 1, 2, ..., 1997, 1998, 1999]");
  EXPECT_EQ(ValuesJson(Make(DType::kInt64, {2000}, many.data(), 16000)).size(),
            2000u);
}

}  // namespace
}  // namespace ckptdb::tools
