#include "engine/collectives/wire.h"

#include <gtest/gtest.h>

namespace ckptdb::engine {
namespace {

TEST(WireTest, SaveLayoutRoundTrip) {
  planner::RankSaveLayout layout;
  layout.shards.push_back(
      {"a.b", {"a", "b"}, DType::kBFloat16, {4, 2}, {{2, 0}, {2, 2}}});
  layout.values.push_back({"lr", {"lr"}, Value(0.5)});
  layout.values.push_back({"blob", {"blob"}, Value(Bytes{"\x01\x02"})});
  layout.values.push_back(
      {"rng", {"rng"}, Value(BigInt{"-18446744073709551617"})});
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
  EXPECT_EQ(decoded.values[2].value, Value(BigInt{"-18446744073709551617"}));
}

// A rank's own class takes its layout as it is; the other classes are
// decoded; the classes come out as from decoding every payload.
TEST(WireTest, OwnClassTakesTheRanksLayoutAndTheOthersAreDecoded) {
  auto layout = [](int64_t row) {
    planner::RankSaveLayout l;
    l.shards.push_back(
        {"w", {"w"}, DType::kFloat32, {4, 2}, {{row, 0}, {2, 2}}});
    l.values.push_back({"step", {"step"}, Value(int64_t{3})});
    return l;
  };
  RankClasses gathered;
  gathered.payloads = {EncodeSaveLayout(Status::OK(), layout(0)),
                       EncodeSaveLayout(Status::NotFound("x"), layout(2))};
  gathered.class_of_rank = {0, 1, 0};
  // The first failing rank's status, named.
  auto all = DecodeSaveClasses(gathered);
  EXPECT_EQ(all.status().ToString(), Status::NotFound("rank 1: x").ToString());
  for (int rank : {0, 1, 2}) {
    planner::RankSaveLayout own = layout(rank == 1 ? 2 : 0);
    const Status status = rank == 1 ? Status::NotFound("x") : Status::OK();
    auto classes = DecodeSaveClasses(gathered, rank, &own, status);
    EXPECT_EQ(classes.status().ToString(), all.status().ToString()) << rank;
  }
  gathered.payloads[1] = EncodeSaveLayout(Status::OK(), layout(2));
  planner::RankSaveLayout own = layout(2);
  auto classes = DecodeSaveClasses(gathered, 1, &own, Status::OK());
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  ASSERT_EQ(classes->layouts.size(), 2u);
  EXPECT_EQ(classes->class_of_rank, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(classes->layouts[0].shards[0].box, (planner::Box{{0, 0}, {2, 2}}));
  EXPECT_EQ(classes->layouts[1].shards[0].box, (planner::Box{{2, 0}, {2, 2}}));
  EXPECT_EQ(classes->layouts[1].values[0].value, Value(int64_t{3}));
}

// A world of one rank: its layout is the only class, as encoding, gathering
// and decoding it gives; its local error fails the call as
// DecodeSaveClasses's.
TEST(WireTest, OneRanksClassesAreWhatGatheringAndDecodingGive) {
  planner::RankSaveLayout layout;
  layout.shards.push_back(
      {"a.b", {"a", "b"}, DType::kFloat32, {4}, {{0}, {4}}, {}});
  layout.values.push_back({"lr", {"lr"}, Value(0.5)});
  RankClasses gathered;
  gathered.payloads = {EncodeSaveLayout(Status::OK(), layout)};
  gathered.class_of_rank = {0};
  auto decoded = DecodeSaveClasses(gathered);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  auto comm = SingleProcessCommunicator();
  planner::RankSaveLayout own = layout;
  auto alone =
      GatherSaveClasses(*comm, CallArguments("save"), &own, Status::OK());
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->class_of_rank, decoded->class_of_rank);
  ASSERT_EQ(alone->layouts.size(), 1u);
  EXPECT_EQ(alone->layouts[0].shards[0].path,
            decoded->layouts[0].shards[0].path);
  EXPECT_EQ(alone->layouts[0].shards[0].box, decoded->layouts[0].shards[0].box);
  EXPECT_EQ(alone->layouts[0].values[0].value,
            decoded->layouts[0].values[0].value);

  gathered.payloads = {EncodeSaveLayout(Status::NotFound("x"), layout)};
  own = layout;
  EXPECT_EQ(GatherSaveClasses(*comm, CallArguments("save"), &own,
                              Status::NotFound("x"))
                .status(),
            DecodeSaveClasses(gathered).status());
  EXPECT_EQ(DecodeSaveClasses(gathered).status(), Status::NotFound("x"));
}

// A load's gathered targets: the rank's own class is taken from what it
// encoded, the other classes are decoded, and the result is what decoding
// every class gives.
TEST(WireTest, OwnClassTakesTheRanksTargetsAndTheOthersAreDecoded) {
  auto shared = [](int64_t row, bool on_device) {
    RankTargets t;
    t.targets = {{"w", {{row, 0}, {2, 2}}}, {"b", {{row}, {2}}}};
    t.placements = {{DType::kFloat32, on_device}, {DType::kInt8, false}};
    return t;
  };
  auto own = [](int device) {
    RankTargets t;
    t.buffer_bytes = 100 + static_cast<uint64_t>(device);
    t.device = device;
    return t;
  };
  RankClasses gathered;
  gathered.payloads = {EncodeTargets(shared(0, false)),
                       EncodeTargets(shared(2, true))};
  gathered.class_of_rank = {0, 1, 0};
  gathered.own = {EncodeTargets(own(0)), EncodeTargets(own(1)),
                  EncodeTargets(own(2))};
  auto all = DecodeTargetClasses(gathered);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (int rank : {0, 1, 2}) {
    RankTargets mine = shared(rank == 1 ? 2 : 0, rank == 1);
    auto got = DecodeTargetClasses(gathered, rank, &mine);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->classes.class_of_rank, all->classes.class_of_rank);
    ASSERT_EQ(got->classes.targets.size(), 2u);
    for (size_t c = 0; c < 2; ++c) {
      ASSERT_EQ(got->classes.targets[c].size(), 2u) << rank;
      for (size_t t = 0; t < 2; ++t) {
        EXPECT_EQ(got->classes.targets[c][t].flat_key,
                  all->classes.targets[c][t].flat_key);
        EXPECT_EQ(got->classes.targets[c][t].box,
                  all->classes.targets[c][t].box);
      }
    }
    EXPECT_EQ(got->classes.placements, all->classes.placements) << rank;
    EXPECT_EQ(got->devices, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(got->buffer_bytes, 100u);
    EXPECT_TRUE(got->any_on_device);
  }
  EXPECT_EQ(all->classes.targets[1][0].box, (planner::Box{{2, 0}, {2, 2}}));
}

TEST(WireTest, PathKindsAndNoneRoundTrip) {
  using K = PathPartKind;
  planner::RankSaveLayout layout;
  layout.shards.push_back({"s.0",
                           {"s", "0"},
                           DType::kFloat32,
                           {2},
                           {{0}, {2}},
                           {K::kStrKey, K::kIntKey}});
  layout.values.push_back(
      {"b.1", {"b", "1"}, Value(None{}), {K::kStrKey, K::kTupleIndex}});
  Status local;
  planner::RankSaveLayout decoded;
  const std::string bytes = EncodeSaveLayout(Status::OK(), layout);
  ASSERT_TRUE(DecodeSaveLayout(bytes, &local, &decoded).ok());
  EXPECT_EQ(decoded.shards[0].kinds, layout.shards[0].kinds);
  EXPECT_EQ(decoded.values[0].kinds, layout.values[0].kinds);
  EXPECT_EQ(decoded.values[0].value, Value(None{}));
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(DecodeSaveLayout(bytes.substr(0, n), &local, &decoded).ok());
}

TEST(WireTest, TruncatedInputIsAnError) {
  RankTargets sent;
  sent.status = Status::NotFound("gone");
  sent.buffer_bytes = 77;
  sent.device = 3;
  sent.targets = {{"w", {{0}, {4}}}, {"b", {{2, 0}, {1, 5}}}};
  sent.placements = {{DType::kBFloat16, true}, {DType::kInt32, false}};
  const std::string bytes = EncodeTargets(sent);
  RankTargets got;
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(DecodeTargets(bytes.substr(0, n), &got).ok()) << n;
  ASSERT_TRUE(DecodeTargets(bytes, &got).ok());
  EXPECT_EQ(got.status.ToString(), sent.status.ToString());
  EXPECT_EQ(got.buffer_bytes, 77u);
  EXPECT_EQ(got.device, 3);
  ASSERT_EQ(got.targets.size(), 2u);
  EXPECT_EQ(got.targets[1].flat_key, "b");
  EXPECT_EQ(got.targets[1].box, (planner::Box{{2, 0}, {1, 5}}));
  EXPECT_EQ(got.placements, sent.placements);
}

TEST(WireTest, SaveOutcomeRoundTripsAndTruncationIsAnError) {
  for (bool deleted : {false, true}) {
    SaveOutcome sent;
    sent.status = Status::IOError("retention: deleting checkpoint id 3");
    sent.info.id = 9;
    sent.info.step = 90;
    sent.info.tag = "best";
    sent.info.world_size = 4;
    sent.info.nbytes = 1000;
    sent.info.nbytes_written = 100;
    sent.info.references = {3, 7};
    sent.deleted = deleted;
    const std::string bytes = EncodeSaveOutcome(sent);
    SaveOutcome got;
    for (size_t n = 0; n < bytes.size(); ++n)
      EXPECT_FALSE(DecodeSaveOutcome(bytes.substr(0, n), &got).ok()) << n;
    EXPECT_FALSE(DecodeSaveOutcome(bytes + "x", &got).ok());
    ASSERT_TRUE(DecodeSaveOutcome(bytes, &got).ok());
    EXPECT_EQ(got.status.ToString(), sent.status.ToString());
    EXPECT_EQ(got.info.id, 9);
    EXPECT_EQ(got.info.step, 90);
    EXPECT_EQ(got.info.tag, "best");
    EXPECT_EQ(got.info.world_size, 4);
    EXPECT_EQ(got.info.nbytes_written, 100);
    EXPECT_EQ(got.info.references, (std::vector<int64_t>{3, 7}));
    EXPECT_EQ(got.deleted, deleted);
  }
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
