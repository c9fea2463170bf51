#include "planner/retention.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace ckptdb::planner {
namespace {

std::vector<CheckpointInfo> Steps(std::initializer_list<int64_t> steps) {
  std::vector<CheckpointInfo> out;
  int64_t id = 1;
  for (int64_t s : steps) out.push_back({.id = id++, .step = s});
  return out;
}

TEST(RetentionTest, WithoutKeepLastNothingIsDeleted) {
  EXPECT_TRUE(CheckpointsToDelete(Steps({0, 1, 2}), {}).empty());
  EXPECT_TRUE(
      CheckpointsToDelete(Steps({0, 1, 2}), {.keep_every_steps = 2}).empty());
}

TEST(RetentionTest, KeepsTheNewestOldestFirstDeleted) {
  EXPECT_EQ(CheckpointsToDelete(Steps({0, 1, 2, 3, 4}), {.keep_last = 2}),
            (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(CheckpointsToDelete(Steps({0, 1}), {.keep_last = 2}).empty());
}

// Steps 0..9 with keep_last 2 and keep_every_steps 3: 0, 3, 6 stay for their
// step, 8 and 9 as the newest.
TEST(RetentionTest, PeriodicStepsAndTagsAreAlwaysKept) {
  auto all = Steps({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  all[4].tag = "best";  // step 4
  EXPECT_EQ(CheckpointsToDelete(all, {.keep_last = 2, .keep_every_steps = 3}),
            (std::vector<int64_t>{2, 3, 6, 8}));  // ids of steps 1, 2, 5, 7
  // A checkpoint without a step is kept only as one of the newest.
  std::vector<CheckpointInfo> no_step = {{.id = 5}, {.id = 2}, {.id = 9}};
  EXPECT_EQ(
      CheckpointsToDelete(no_step, {.keep_last = 1, .keep_every_steps = 1}),
      (std::vector<int64_t>{2, 5}));
}

// Against the policy stated per checkpoint, on random listings.
TEST(RetentionTest, RandomListingsFollowThePolicy) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<CheckpointInfo> all;
    const int n = static_cast<int>(rng() % 12);
    std::set<int64_t> ids;
    while (static_cast<int>(ids.size()) < n) ids.insert(rng() % 50);
    for (int64_t id : ids) {
      CheckpointInfo c{.id = id};
      if (rng() % 4) c.step = rng() % 20;
      if (rng() % 5 == 0) c.tag = std::string("t").append(std::to_string(id));
      all.push_back(c);
    }
    std::shuffle(all.begin(), all.end(), rng);
    const RetentionPolicy p{.keep_last = 1 + rng() % 4,
                            .keep_every_steps = rng() % 2
                                                    ? std::optional<int64_t>()
                                                    : 1 + rng() % 5};
    const std::vector<int64_t> got = CheckpointsToDelete(all, p);
    std::vector<int64_t> want;
    for (int64_t id : ids) {  // ascending
      int64_t newer = 0;
      for (int64_t other : ids) newer += other > id;
      const CheckpointInfo& c =
          *std::find_if(all.begin(), all.end(),
                        [&](const CheckpointInfo& x) { return x.id == id; });
      const bool kept =
          newer < *p.keep_last || c.tag ||
          (p.keep_every_steps && c.step && *c.step % *p.keep_every_steps == 0);
      if (!kept) want.push_back(id);
    }
    ASSERT_EQ(got, want) << "trial " << trial;
  }
}

}  // namespace
}  // namespace ckptdb::planner
