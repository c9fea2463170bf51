#include "core/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// The checksum of a chunk cut into runs (empty ones too, and runs at
// addresses that do not follow each other) is the chunk's.
TEST(ChecksumTest, RunsGiveTheChecksumOfTheirConcatenation) {
  std::mt19937_64 rng(12);
  std::vector<unsigned char> bytes((size_t{1} << 19) + 300);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  for (const ChecksumImpl& impl : ChecksumImpls()) {
    for (int trial = 0; trial < 60; ++trial) {
      const size_t n = trial < 30 ? rng() % 600 : rng() % (size_t{1} << 19);
      // The runs are copied apart, each after a gap, so that no run follows
      // the previous one in memory.
      std::vector<std::vector<unsigned char>> copies;
      std::vector<ByteRun> runs;
      for (size_t at = 0; at < n || runs.empty();) {
        const size_t len =
            std::min<size_t>(n - at, rng() % (trial % 3 == 0 ? 40 : 9000));
        copies.emplace_back(bytes.begin() + at, bytes.begin() + at + len);
        copies.back().insert(copies.back().begin(), 3, 0);
        runs.push_back({copies.back().data() + 3, len});
        at += len;
        if (n == 0) break;
      }
      ASSERT_EQ(impl.runs_fn(runs.data(), runs.size()),
                impl.fn(bytes.data(), n))
          << impl.name << ": " << n << " bytes in " << runs.size() << " runs";
    }
  }
  const ByteRun whole{bytes.data(), 4096};
  EXPECT_EQ(ChunkChecksumOfRuns(&whole, 1), ChunkChecksum(bytes.data(), 4096));
}

// One pass gives both values: the checksum is ChunkChecksum's for every
// length (the low half of the content hash above 240 bytes, computed apart
// below), and the content hash is ChunkContentHash's.
TEST(ChecksumTest, DigestGivesTheChecksumAndContentHashOfEveryLength) {
  std::mt19937_64 rng(13);
  std::vector<unsigned char> bytes((size_t{1} << 20) + 64);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (size_t n : {4095, 65536, 524287, 524288, 1048576}) lengths.push_back(n);
  for (size_t n : lengths) {
    for (size_t shift : {0, 5}) {
      const unsigned char* p = bytes.data() + shift;
      const ChunkDigest digest = ChunkChecksumAndContentHash(p, n);
      ASSERT_EQ(digest.checksum, ChunkChecksum(p, n)) << n << " bytes";
      ASSERT_EQ(digest.content, ChunkContentHash(p, n)) << n << " bytes";
    }
  }
}

// Hashed block by block, a chunk gets the same checksum (and content hash)
// as in one piece, and the sink sees every byte once, in order, in blocks of
// kDigestBlockBytes; a sink that stops the walk gets no digest.
TEST(ChecksumTest, DigestInBlocksHandsOnEveryByteAndHashesAsOnePiece) {
  std::mt19937_64 rng(14);
  std::vector<unsigned char> bytes(3 * kDigestBlockBytes + 64);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{240}, size_t{241}, size_t{4096},
                   kDigestBlockBytes - 1, kDigestBlockBytes,
                   kDigestBlockBytes + 1, 3 * kDigestBlockBytes + 17}) {
    for (bool content : {false, true}) {
      const char* p = reinterpret_cast<const char*>(bytes.data()) + 3;
      std::vector<char> seen;
      size_t blocks = 0;
      auto sink = [&](const char* block, size_t size) {
        EXPECT_LE(size, kDigestBlockBytes);
        seen.insert(seen.end(), block, block + size);
        ++blocks;
        return true;
      };
      const std::optional<ChunkDigest> digest =
          DigestInBlocks(p, n, content, sink);
      ASSERT_TRUE(digest.has_value());
      EXPECT_EQ(digest->checksum, ChunkChecksum(p, n)) << n << " bytes";
      if (content) {
        EXPECT_EQ(digest->content, ChunkContentHash(p, n)) << n << " bytes";
      }
      EXPECT_EQ(seen, std::vector<char>(p, p + n)) << n << " bytes";
      EXPECT_EQ(blocks, (n + kDigestBlockBytes - 1) / kDigestBlockBytes);
    }
  }
  size_t calls = 0;
  auto stop = [&](const char*, size_t) { return ++calls < 2; };
  EXPECT_FALSE(DigestInBlocks(bytes.data(), 3 * kDigestBlockBytes, true, stop));
  EXPECT_EQ(calls, 2u);
}

}  // namespace
}  // namespace ckptdb::storage
