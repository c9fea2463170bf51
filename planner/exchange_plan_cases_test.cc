// BuildExchangePlan and DeviceHops on fixed cases: what the property tests
// (exchange_plan_test.cc) check in general, pinned where a default matters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "planner/exchange_plan.h"

namespace ckptdb::planner {
namespace {

// DeviceHops on fixed cases.
TEST(DeviceHopsTest, BinomialTree) {
  EXPECT_TRUE(DeviceHops(3, {}).empty());
  EXPECT_EQ(DeviceHops(2, {0}), (std::vector<DeviceHop>{{0, 2, 0}}));
  EXPECT_EQ(DeviceHops(0, {1, 2, 3}),
            (std::vector<DeviceHop>{{0, 0, 1}, {1, 0, 2}, {1, 1, 3}}));
  // Up to 40 receivers: each reached once from a rank holding the box since
  // an earlier step, each rank sending at most once per step, in
  // ceil(log2(n + 1)) steps, the reader sending in every one.
  for (int n = 1; n <= 40; ++n) {
    const int reader = n / 2;
    std::vector<int> receivers;
    for (int r = 0; r <= n; ++r) {
      if (r != reader) receivers.push_back(r);
    }
    const std::vector<DeviceHop> hops = DeviceHops(reader, receivers);
    ASSERT_EQ(hops.size(), receivers.size());
    std::map<int, int> since{{reader, -1}};
    std::set<std::pair<int, int>> sent;
    int steps = 0;
    for (const DeviceHop& hop : hops) {
      ASSERT_TRUE(since.count(hop.from)) << n;
      EXPECT_LT(since[hop.from], hop.step) << n;
      EXPECT_TRUE(since.emplace(hop.to, hop.step).second) << n;
      EXPECT_TRUE(sent.emplace(hop.step, hop.from).second) << n;
      steps = std::max(steps, hop.step + 1);
    }
    const int log = static_cast<int>(std::ceil(std::log2(n + 1)));
    EXPECT_EQ(steps, log) << n;
    EXPECT_EQ(
        std::count_if(hops.begin(), hops.end(),
                      [&](const DeviceHop& h) { return h.from == reader; }),
        log)
        << n;
  }
}

// A matrix saved by rows in default-sized chunks (whole rows, just under
// 512 KiB) and loaded by columns on two ranks: each rank receives the halves
// of the chunks the other reads, just under 256 KiB each, and with the default
// bounds every one lands in its target in place, none through a staging copy.
TEST(ExchangePlanTest, HalvesOfDefaultChunksResplitByColumnsLandInPlace) {
  constexpr int64_t kRows = 448, kCols = 584;  // 224 rows: 523,264 bytes
  TensorMetadata meta{DType::kFloat32, {kRows, kCols}, {}};
  for (int64_t row = 0; row < kRows; row += 224) {
    meta.chunks.push_back({Box{{row, 0}, {224, kCols}}, 0, 224 * kCols * 4, 0});
  }
  const std::map<std::string, TensorMetadata> tensors{{"w", meta}};
  std::vector<std::vector<LoadTarget>> targets(2);
  std::vector<OwnTarget> own[2];
  for (int r = 0; r < 2; ++r) {
    const Box half{{0, r * kCols / 2}, {kRows, kCols / 2}};
    targets[r].push_back({"w", half});
    own[r].push_back({half, DType::kFloat32, true});
  }
  const Result<LoadPlan> plan = BuildLoadPlan(tensors, targets);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto tensor_of_read = TensorsOfReads(*plan, tensors);
  uint64_t received = 0;
  for (int rank = 0; rank < 2; ++rank) {
    ExchangeInputs in;
    in.rank = rank;
    in.world = 2;
    in.plan = &*plan;
    in.tensor_of_read = &tensor_of_read;
    in.targets = &own[rank];
    in.placements = [](int, size_t) {
      return TargetPlacement{DType::kFloat32, false};
    };
    in.window_bytes = uint64_t{64} << 20;
    const ExchangePlan exchange = BuildExchangePlan(in);
    for (const ExchangeRound& round : exchange.rounds) {
      for (const ExchangeMessage& m : round.recvs) {
        EXPECT_FALSE(m.packed) << "rank " << rank << ": " << m.nbytes;
        EXPECT_TRUE(m.in_place.has_value()) << "rank " << rank;
        received += m.nbytes;
      }
    }
  }
  EXPECT_EQ(received, uint64_t{kRows * kCols * 4 / 2});
}

}  // namespace
}  // namespace ckptdb::planner
