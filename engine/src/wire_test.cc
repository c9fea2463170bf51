#include "engine/src/wire.h"

#include <gtest/gtest.h>

namespace ckptdb::engine {
namespace {

TEST(WireTest, SaveLayoutRoundTrip) {
  planner::RankSaveLayout layout;
  layout.shards.push_back(
      {"a.b", {"a", "b"}, DType::kBFloat16, {4, 2}, {{2, 0}, {2, 2}}});
  layout.values.push_back({"lr", {"lr"}, Value(0.5)});
  layout.values.push_back({"blob", {"blob"}, Value(Bytes{"\x01\x02"})});
  Status local;
  planner::RankSaveLayout decoded;
  ASSERT_TRUE(DecodeSaveLayout(EncodeSaveLayout(Status::NotFound("x"), layout),
                               &local, &decoded)
                  .ok());
  EXPECT_EQ(local, Status::NotFound("x"));
  ASSERT_EQ(decoded.shards.size(), 1u);
  EXPECT_EQ(decoded.shards[0].path, (planner::Path{"a", "b"}));
  EXPECT_EQ(decoded.shards[0].box, (planner::Box{{2, 0}, {2, 2}}));
  EXPECT_EQ(decoded.values[1].value, Value(Bytes{"\x01\x02"}));
}

TEST(WireTest, TruncatedInputIsAnError) {
  std::string bytes = EncodeTargets(Status::OK(), {{"w", {{0}, {4}}}}, 77);
  Status local;
  std::vector<planner::LoadTarget> targets;
  uint64_t buffer_bytes = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(
        DecodeTargets(bytes.substr(0, n), &local, &targets, &buffer_bytes).ok())
        << n;
  }
  EXPECT_TRUE(DecodeTargets(bytes, &local, &targets, &buffer_bytes).ok());
  EXPECT_EQ(buffer_bytes, 77u);
}

TEST(WireTest, FirstErrorNamesRank) {
  EXPECT_TRUE(FirstError({Status::OK(), Status::OK()}).ok());
  Status s = FirstError(
      {Status::OK(), Status::InvalidArgument("bad"), Status::NotFound("x")});
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message(), "rank 1: bad");
}

}  // namespace
}  // namespace ckptdb::engine
