#include "engine/save/snapshot_memory.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ckptdb::engine {
namespace {

TEST(SnapshotMemoryTest, GetGivesWritableMemoryOfAtLeastTheSizeAsked) {
  SnapshotMemory memory;
  EXPECT_EQ(memory.size(), 0u);
  const uint64_t n = (uint64_t{3} << 20) + 5;
  auto p = memory.Get(n);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::memset(*p, 0x5A, n);
  EXPECT_EQ((*p)[n - 1], 0x5A);
  EXPECT_GE(memory.size(), n);
}

TEST(SnapshotMemoryTest, GetUsesWhatPrepareSetUpAndGrowsOnlyWhenAskedForMore) {
  SnapshotMemory memory;
  memory.Prepare(uint64_t{4} << 20);
  auto small = memory.Get(uint64_t{1} << 20);
  ASSERT_TRUE(small.ok());
  EXPECT_GE(memory.size(), uint64_t{4} << 20);  // the prepared region
  auto same = memory.Get(uint64_t{4} << 20);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, *small);
  auto larger = memory.Get(uint64_t{8} << 20);
  ASSERT_TRUE(larger.ok());
  EXPECT_GE(memory.size(), uint64_t{8} << 20);
  std::memset(*larger, 1, uint64_t{8} << 20);
  // Preparing less than is held changes nothing.
  memory.Prepare(uint64_t{2} << 20);
  auto kept = memory.Get(uint64_t{8} << 20);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, *larger);
  EXPECT_EQ((*kept)[(uint64_t{8} << 20) - 1], 1);
}

TEST(SnapshotMemoryTest, DestroyedWhilePreparing) {
  for (int i = 0; i < 4; ++i) {
    SnapshotMemory memory;
    memory.Prepare(uint64_t{16} << 20);
  }
}

}  // namespace
}  // namespace ckptdb::engine
