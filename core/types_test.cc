#include "ckptdb/types.h"

#include <gtest/gtest.h>

#include "ckptdb/metadata.h"

namespace ckptdb {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
  for (uint8_t raw = 0; raw < 20; ++raw) {
    if (!IsValidDType(raw)) continue;
    DType dtype = static_cast<DType>(raw);
    auto parsed = DTypeFromName(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_FALSE(IsValidDType(0));
  EXPECT_TRUE(IsValidDType(14));
  EXPECT_FALSE(IsValidDType(15));
  EXPECT_EQ(DTypeSize(DType::kUInt32), 4u);
  EXPECT_EQ(DTypeName(DType::kUInt64), "uint64");
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_FALSE(IsNumeric(DType::kBool));
  auto bad = DTypeFromName("complex64");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("complex64"), std::string::npos);
}

TEST(StateDictTest, NestedSetAndDeepCopy) {
  float w[4] = {1, 2, 3, 4};
  StateDict sd;
  sd.Child("model").Set("w", TensorView::Whole(w, DType::kFloat32, {4}));
  sd.Set("step", Value(int64_t{7}));
  StateDict copy = sd;
  copy.Child("model").Set("w", Value(std::string("replaced")));
  ASSERT_NE(sd.GetChild("model")->GetTensor("w"), nullptr);
  EXPECT_EQ(sd.GetChild("model")->GetTensor("w")->data, w);
  EXPECT_NE(copy.GetChild("model")->GetValue("w"), nullptr);
  EXPECT_EQ(std::get<int64_t>(*sd.GetValue("step")), 7);
}

TEST(StatusTest, ResultCarriesValueOrStatus) {
  Result<int> r = 3;
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(*r, 3);
  Result<int> e = Status::NotFound("key 'x'");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().ToString(), "NotFound: key 'x'");
  EXPECT_EQ(CheckpointSelector::Tag("best").ToString(), "tag 'best'");
}

}  // namespace
}  // namespace ckptdb
