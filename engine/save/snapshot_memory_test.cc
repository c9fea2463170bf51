#include "engine/save/snapshot_memory.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ckptdb::engine {
namespace {

TEST(SnapshotMemoryTest, GetGivesWritableMemoryOfAtLeastTheSizeAsked) {
  SnapshotMemory memory;
  bool fresh = false;
  EXPECT_EQ(memory.size(), 0u);
  const uint64_t n = (uint64_t{3} << 20) + 5;
  auto p = memory.Get(n, &fresh);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::memset(*p, 0x5A, n);
  EXPECT_EQ((*p)[n - 1], 0x5A);
  EXPECT_GE(memory.size(), n);
}

TEST(SnapshotMemoryTest, GetUsesWhatPrepareSetUpAndGrowsOnlyWhenAskedForMore) {
  SnapshotMemory memory;
  bool fresh = false;
  memory.Prepare(uint64_t{4} << 20);
  auto small = memory.Get(uint64_t{1} << 20, &fresh);
  ASSERT_TRUE(small.ok());
  EXPECT_GE(memory.size(), uint64_t{4} << 20);  // the prepared region
  auto same = memory.Get(uint64_t{4} << 20, &fresh);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, *small);
  auto larger = memory.Get(uint64_t{8} << 20, &fresh);
  ASSERT_TRUE(larger.ok());
  EXPECT_GE(memory.size(), uint64_t{8} << 20);
  std::memset(*larger, 1, uint64_t{8} << 20);
  // Preparing less than is held changes nothing.
  memory.Prepare(uint64_t{2} << 20);
  auto kept = memory.Get(uint64_t{8} << 20, &fresh);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, *larger);
  EXPECT_EQ((*kept)[(uint64_t{8} << 20) - 1], 1);
}

// Fresh memory comes untouched for a copy that starts at once; touching the
// rest in the background keeps what was written there.
TEST(SnapshotMemoryTest, GetGivesFreshMemoryOnceAndTouchingKeepsBytes) {
  SnapshotMemory memory;
  const uint64_t n = uint64_t{6} << 20;
  bool fresh = false;
  auto p = memory.Get(n, &fresh);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(fresh);
  EXPECT_GE(memory.size(), n);
  // The back half written, as a snapshot's copy from the back would.
  std::memset(*p + n / 2, 0x3C, n / 2);
  memory.TouchInBackground();
  auto again = memory.Get(n, &fresh);  // waits for the touching
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(fresh);
  EXPECT_EQ(*again, *p);
  for (uint64_t at = n / 2; at < n; at += 4096) ASSERT_EQ((*again)[at], 0x3C);
  for (uint64_t at = 0; at < n / 2; at += 4096) ASSERT_EQ((*again)[at], 0);
  // More than is held: fresh again, in place of the smaller region.
  auto larger = memory.Get(2 * n, &fresh);
  ASSERT_TRUE(larger.ok());
  EXPECT_TRUE(fresh);
  std::memset(*larger, 1, 2 * n);
  memory.TouchInBackground();
}

TEST(SnapshotMemoryTest, DestroyedWhilePreparing) {
  for (int i = 0; i < 4; ++i) {
    SnapshotMemory memory;
    memory.Prepare(uint64_t{16} << 20);
  }
}

TEST(SnapshotMemoryTest, DestroyedWhileTouchingInTheBackground) {
  for (int i = 0; i < 4; ++i) {
    SnapshotMemory memory;
    bool fresh = false;
    ASSERT_TRUE(memory.Get(uint64_t{16} << 20, &fresh).ok());
    memory.TouchInBackground();
  }
}

}  // namespace
}  // namespace ckptdb::engine
