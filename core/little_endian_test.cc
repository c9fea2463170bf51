#include "core/little_endian.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>

namespace ckptdb {
namespace {

// Numbers go out least significant byte first, and come back as they went,
// signed ones included.
TEST(LittleEndianTest, WritesTheLeastSignificantByteFirstAndReadsItBack) {
  std::string out;
  PutLittleEndian<uint32_t>(&out, 0x04030201u);
  PutLittleEndian<int64_t>(&out, -2);
  PutLittleEndian<uint16_t>(&out, 0xbeef);
  EXPECT_EQ(out, std::string("\x01\x02\x03\x04", 4) +
                     std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8) +
                     std::string("\xef\xbe", 2));
  EXPECT_EQ(GetLittleEndian<uint32_t>(out.data()), 0x04030201u);
  EXPECT_EQ(GetLittleEndian<int64_t>(out.data() + 4), -2);
  EXPECT_EQ(GetLittleEndian<uint16_t>(out.data() + 12), 0xbeef);

  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const auto u = static_cast<uint64_t>(rng());
    const auto s = static_cast<int32_t>(rng());
    std::string bytes;
    PutLittleEndian(&bytes, u);
    PutLittleEndian(&bytes, s);
    ASSERT_EQ(bytes.size(), 12u);
    EXPECT_EQ(GetLittleEndian<uint64_t>(bytes.data()), u);
    EXPECT_EQ(GetLittleEndian<int32_t>(bytes.data() + 8), s);
  }
  for (int64_t v : {std::numeric_limits<int64_t>::min(), int64_t{-1},
                    int64_t{0}, std::numeric_limits<int64_t>::max()}) {
    std::string bytes;
    PutLittleEndian(&bytes, v);
    EXPECT_EQ(GetLittleEndian<int64_t>(bytes.data()), v);
  }
}

}  // namespace
}  // namespace ckptdb
