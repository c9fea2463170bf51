#include "storage/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace ckptdb::storage {
namespace {

// Every implementation this CPU runs gives the library's XXH3-64 for every
// length the algorithm treats differently (0-16, 17-128, 129-240, long inputs
// with partial stripes and blocks) and at unaligned addresses.
TEST(ChecksumTest, SameAsTheLibraryForEveryLengthAndAlignment) {
  const std::vector<ChecksumImpl> impls = ChecksumImpls();
  ASSERT_STREQ(impls.back().name, "library");
  const auto reference = impls.back().fn;
  std::mt19937_64 rng(11);
  std::vector<unsigned char> bytes((size_t{1} << 20) + 64);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {1023, 1024, 1025, 4096, 65535, 65536, 524288, 1048576})
    lengths.push_back(n);
  for (const ChecksumImpl& impl : impls) {
    for (size_t n : lengths) {
      for (size_t shift : {0, 1, 7, 33}) {
        ASSERT_EQ(impl.fn(bytes.data() + shift, n),
                  reference(bytes.data() + shift, n))
            << impl.name << ": " << n << " bytes at +" << shift;
      }
    }
  }
  EXPECT_EQ(ChunkChecksum(bytes.data(), 4096),
            impls.front().fn(bytes.data(), 4096));
  EXPECT_NE(ChunkChecksum(bytes.data(), 4096),
            ChunkChecksum(bytes.data() + 1, 4096));
}

}  // namespace
}  // namespace ckptdb::storage
