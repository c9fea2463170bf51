#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "engine/load/load_executor.h"

namespace ckptdb::engine {
namespace {

TEST(LoadScratchTest, KeepsItsMemoryUntilALargerRoundNeedsMore) {
  LoadScratch scratch;
  char* a = scratch.Reserve(0, 4096).value();
  ASSERT_NE(a, nullptr);
  std::memset(a, 1, 4096);
  EXPECT_EQ(scratch.Reserve(0, 100).value(), a);  // smaller: the same memory
  char* b = scratch.Reserve(1, 4096).value();
  EXPECT_NE(b, a);  // the other slot's own
  char* c = scratch.Reserve(0, 1 << 20).value();
  ASSERT_NE(c, nullptr);
  std::memset(c, 2, 1 << 20);
}

// An allocation that fails is an error naming the bytes and leaves the slot
// usable: the next load gets memory it may write, not a pointer to what was
// freed.
TEST(LoadScratchTest, AFailedAllocationIsAnErrorAndLeavesTheSlotUsable) {
  LoadScratch scratch;
  ASSERT_NE(scratch.Reserve(0, 4096).value(), nullptr);
  const uint64_t huge = std::numeric_limits<uint64_t>::max() / 2;
  const Result<char*> failed = scratch.Reserve(0, huge);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(failed.status().IsIOError());
  EXPECT_NE(failed.status().message().find(std::to_string(huge) + " bytes"),
            std::string::npos)
      << failed.status().ToString();
  char* again = scratch.Reserve(0, 4096).value();
  ASSERT_NE(again, nullptr);
  std::memset(again, 3, 4096);
}

}  // namespace
}  // namespace ckptdb::engine
