#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <new>

#include "engine/load/load_executor.h"

namespace ckptdb::engine {
namespace {

TEST(LoadScratchTest, KeepsItsMemoryUntilALargerRoundNeedsMore) {
  LoadScratch scratch;
  char* a = scratch.Reserve(0, 4096);
  ASSERT_NE(a, nullptr);
  std::memset(a, 1, 4096);
  EXPECT_EQ(scratch.Reserve(0, 100), a);  // smaller: the same memory
  char* b = scratch.Reserve(1, 4096);
  EXPECT_NE(b, a);  // the other slot's own
  char* c = scratch.Reserve(0, 1 << 20);
  ASSERT_NE(c, nullptr);
  std::memset(c, 2, 1 << 20);
}

// An allocation that fails leaves the slot usable: the next load gets memory
// it may write, not a pointer to what was freed.
TEST(LoadScratchTest, AFailedAllocationLeavesTheSlotUsable) {
  LoadScratch scratch;
  ASSERT_NE(scratch.Reserve(0, 4096), nullptr);
  EXPECT_THROW(scratch.Reserve(0, std::numeric_limits<uint64_t>::max() / 2),
               std::bad_alloc);
  char* again = scratch.Reserve(0, 4096);
  ASSERT_NE(again, nullptr);
  std::memset(again, 3, 4096);
}

}  // namespace
}  // namespace ckptdb::engine
