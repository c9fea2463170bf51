#include "engine/src/load_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

namespace ckptdb::engine {
namespace {

// A tensor of `rows` x 256 float32 rows stored in chunks of `rows_per_chunk`.
TensorMetadata RowChunks(int64_t rows, int64_t rows_per_chunk) {
  TensorMetadata t;
  t.global_shape = {rows, 256};
  for (int64_t r = 0; r < rows; r += rows_per_chunk) {
    ChunkMetadata c;
    c.global_offset = {r, 0};
    c.local_shape = {std::min(rows_per_chunk, rows - r), 256};
    c.nbytes = static_cast<uint64_t>(c.local_shape[0]) * 256 * 4;
    t.chunks.push_back(c);
  }
  return t;
}

// Every read lands in exactly one round, and in every round no rank holds
// more than the budget unless a single read alone exceeds it.
TEST(AssignRoundsTest, EveryReadOnceAndEveryRoundWithinBudget) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    CheckpointMetadata meta;
    const int tensors = 1 + static_cast<int>(rng() % 4);
    const int world = 1 + static_cast<int>(rng() % 8);
    std::vector<std::vector<planner::LoadTarget>> targets(world);
    for (int t = 0; t < tensors; ++t) {
      const std::string key = std::string("t").append(std::to_string(t));
      const int64_t rows = 16 + static_cast<int64_t>(rng() % 200);
      meta.tensors[key] = RowChunks(rows, 1 + static_cast<int64_t>(rng() % 40));
      for (int r = 0; r < world; ++r) {  // columns: every chunk goes everywhere
        const int64_t b = 256 * r / world, e = 256 * (r + 1) / world;
        if (e > b) targets[r].push_back({key, {{0, b}, {rows, e - b}}});
      }
    }
    auto plan = planner::BuildLoadPlan(meta.tensors, targets);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const uint64_t budget = (1 + rng() % 64) * 4096;
    auto rounds = AssignRounds(meta, *plan, world, budget);
    std::vector<int> seen(plan->reads.size(), 0);
    for (const auto& round : rounds) {
      EXPECT_FALSE(round.empty());
      std::vector<uint64_t> held(world, 0), largest(world, 0);
      for (size_t read : round) {
        ++seen[read];
        const int reader = plan->reads[read].reader_rank;
        bool remote = false;
        for (const auto& item : plan->items) {
          if (item.read != read || item.dest_rank == reader) continue;
          const uint64_t bytes = item.num_elements() * 4;
          held[item.dest_rank] += bytes;
          largest[item.dest_rank] = std::max(largest[item.dest_rank], bytes);
          remote = true;
        }
        if (remote) {
          held[reader] += plan->reads[read].nbytes;
          largest[reader] = std::max(largest[reader], plan->reads[read].nbytes);
        }
      }
      for (int r = 0; r < world; ++r) {
        if (held[r] > budget) {
          // Only a read too large for any round stands alone.
          EXPECT_EQ(held[r], largest[r]) << "rank " << r << " trial " << trial;
        }
      }
    }
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << i;
    if (world == 1) {
      EXPECT_LE(rounds.size(), 1u);  // nothing is held for other ranks
    }
  }
}

// The tree reaches every receiver exactly once, from a rank that already
// holds the box, with each rank sending at most once per step, in
// ceil(log2(n + 1)) steps.
TEST(DeviceHopsTest, BinomialTreeReachesEveryReceiverOnce) {
  EXPECT_TRUE(DeviceHops(3, {}).empty());
  EXPECT_EQ(DeviceHops(2, {0}), (std::vector<DeviceHop>{{0, 2, 0}}));
  EXPECT_EQ(DeviceHops(0, {1, 2, 3}),
            (std::vector<DeviceHop>{{0, 0, 1}, {1, 0, 2}, {1, 1, 3}}));
  for (int n = 1; n <= 40; ++n) {
    const int reader = n / 2;
    std::vector<int> receivers;
    for (int r = 0; r <= n; ++r) {
      if (r != reader) receivers.push_back(r);
    }
    const std::vector<DeviceHop> hops = DeviceHops(reader, receivers);
    ASSERT_EQ(hops.size(), receivers.size());
    std::map<int, int> since{{reader, -1}};  // rank -> step it got the box
    std::set<std::pair<int, int>> sent;      // (step, rank)
    int steps = 0;
    for (const DeviceHop& hop : hops) {
      ASSERT_TRUE(since.count(hop.from)) << n;
      EXPECT_LT(since[hop.from], hop.step) << n;
      EXPECT_TRUE(since.emplace(hop.to, hop.step).second) << n;
      EXPECT_TRUE(sent.emplace(hop.step, hop.from).second) << n;
      steps = std::max(steps, hop.step + 1);
    }
    EXPECT_EQ(since.size(), receivers.size() + 1);
    const int log = static_cast<int>(std::ceil(std::log2(n + 1)));
    EXPECT_EQ(steps, log) << n;
    EXPECT_EQ(
        std::count_if(hops.begin(), hops.end(),
                      [&](const DeviceHop& h) { return h.from == reader; }),
        log)
        << n;
  }
}

}  // namespace
}  // namespace ckptdb::engine
