#include "storage/chunk_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "core/little_endian.h"
#include "storage/chunk_files.h"
#include "storage/chunks_db_testing.h"
#include "storage/keys.h"
#include "storage/value_files.h"

namespace ckptdb::storage {
namespace {

// 16-byte little-endian (hash, offset) pairs.
std::string Pairs(const std::vector<std::pair<uint64_t, uint64_t>>& pairs) {
  std::string out;
  for (const auto& [hash, offset] : pairs) {
    PutLittleEndian(&out, hash);
    PutLittleEndian(&out, offset);
  }
  return out;
}

TEST(OffsetIndexTest, FindsEveryAddedHashAndNothingElse) {
  std::mt19937_64 rng(11);
  OffsetIndex index;
  std::map<uint64_t, uint64_t> want;
  // Several batches, so that the table grows with pairs in it; hashes that
  // share their low bits too, so that lookups step over taken slots.
  for (int batch = 0; batch < 5; ++batch) {
    std::vector<std::pair<uint64_t, uint64_t>> pairs;
    for (int i = 0; i < 3000; ++i) {
      // Some with equal low bits, some equal high bits (runs of taken
      // slots, around the table's end too).
      const uint64_t hash = i % 3 == 0   ? rng() << 20
                            : i % 3 == 1 ? (rng() >> 20) | 0xFFFFFull << 44
                                         : rng();
      const uint64_t offset = rng() >> 1;
      pairs.emplace_back(hash, offset);
      want.emplace(hash, offset);
    }
    index.AddPairs(Pairs(pairs));
    ASSERT_EQ(index.size(), want.size());
  }
  for (const auto& [hash, offset] : want) {
    ASSERT_EQ(index.Find(hash), std::optional<uint64_t>(offset)) << hash;
    EXPECT_EQ(index.Find(hash + 1), want.contains(hash + 1)
                                        ? std::optional(want.at(hash + 1))
                                        : std::nullopt);
  }
  EXPECT_FALSE(OffsetIndex().Find(0).has_value());
}

TEST(OffsetIndexTest, KeepsTheFirstOfEqualHashesAndSkipsMalformedPairs) {
  OffsetIndex index;
  std::string bytes = Pairs({{7, 100}, {7, 200}, {0, 5}, {9, ~uint64_t{0}}});
  bytes += std::string(15, 'x');  // a partial pair
  index.AddPairs(bytes);
  index.AddPairs(Pairs({{7, 300}, {8, 0}}));
  EXPECT_EQ(index.size(), 3u);
  EXPECT_EQ(index.Find(7), std::optional<uint64_t>(100));
  EXPECT_EQ(index.Find(0), std::optional<uint64_t>(5));
  EXPECT_EQ(index.Find(8), std::optional<uint64_t>(0));
  EXPECT_FALSE(index.Find(9).has_value());
  EXPECT_TRUE(OffsetIndex().empty());
  // A skipped pair does not hide a later one of its hash.
  OffsetIndex damaged;
  damaged.AddPairs(Pairs({{5, ~uint64_t{0}}, {5, 40}}));
  EXPECT_EQ(damaged.Find(5), std::optional<uint64_t>(40));
}

class ChunkReaderTest : public testing::ChunksDbTest {
 protected:
  // Stages and ingests chunks of checkpoint `id` (ChunksDbTest::Stage).
  CheckpointMetadata Saved(int64_t id, const std::vector<int64_t>& sizes,
                           char fill) {
    CheckpointMetadata meta;
    next_origin_ = 0;
    const std::string staged = Stage(id, 0, sizes, fill, &meta);
    EXPECT_TRUE(Ingester().Ingest({staged}, "checkpoint").ok());
    return meta;
  }
  ChunkFileReader Reader() {
    return ChunkFileReader(*db_, handles_[1], fs_,
                           std::make_shared<BufferPool>(size_t{64} << 20),
                           dir_.path());
  }
  static std::string KeyOf(int64_t id, const ChunkMetadata& chunk) {
    return EncodeChunkKey(id, chunk.writer_rank, "w", chunk.box.origin);
  }
};

TEST_F(ChunkReaderTest, ReadsLargeChunksStraightFromValueAndTableFiles) {
  for (bool in_value_files : {true, false}) {
    value_files_ = in_value_files;
    const int64_t id = in_value_files ? 1 : 2;
    const int64_t large = int64_t{kExternalValueBytes} * 2;
    const CheckpointMetadata meta = Saved(id, {large, large}, 'L');
    ChunkFileReader reader = Reader();
    for (const ChunkMetadata& chunk : meta.tensors.at("w").chunks) {
      std::string head(100, '\0'), tail(chunk.nbytes - 100, '\0');
      ASSERT_TRUE(reader.ReadDirect(
          id, KeyOf(id, chunk), chunk.checksum,
          {{head.data(), head.size()}, {tail.data(), tail.size()}}))
          << (in_value_files ? "value file" : "table file");
      EXPECT_EQ(head + tail, std::string(chunk.nbytes, 'L'));
    }
  }
}

// Large pieces whose place in memory lies a few bytes past their place in
// the file, modulo a page, go through a buffer (the kernel's copy is slow
// there): every place a piece can lie at reads back the same bytes, as do
// pieces around it and a failing disk's read.
TEST_F(ChunkReaderTest, LargePiecesReadTheSameBytesAtEveryPlaceInMemory) {
  patterned_ = true;
  const int64_t size = (int64_t{2} << 20) + 4093;  // over two buffers' worth
  const CheckpointMetadata meta = Saved(5, {size}, 0);
  const ChunkMetadata& chunk = meta.tensors.at("w").chunks[0];
  const std::string want = ChunkBytes(0, size, 0);
  ChunkFileReader reader = Reader();
  std::vector<char> memory(size + 8192);
  char* page = memory.data() +
               (4096 - reinterpret_cast<uintptr_t>(memory.data()) % 4096);
  for (int64_t shift = 0; shift < 4096; shift += 7) {
    // A small piece first, then the large one at `shift` into a page.
    std::string head(33, '\0');
    char* rest = page + shift;
    std::fill(rest, rest + size - head.size(), '\0');
    ASSERT_TRUE(
        reader.ReadDirect(5, KeyOf(5, chunk), chunk.checksum,
                          {{head.data(), head.size()},
                           {rest, static_cast<size_t>(size) - head.size()}}))
        << "shift " << shift;
    ASSERT_EQ(head + std::string(rest, size - head.size()), want)
        << "shift " << shift;
  }
  hooks_->suffix = ".val";
  hooks_->reads = 0;
  hooks_->fail_from = 0;
  EXPECT_FALSE(reader.ReadDirect(5, KeyOf(5, chunk), chunk.checksum,
                                 {{page + 16, static_cast<size_t>(size)}}));
}

TEST_F(ChunkReaderTest, LeavesToRocksDBWhatItCannotReadWhole) {
  const CheckpointMetadata meta =
      Saved(3, {100, 200, int64_t{kExternalValueBytes}}, 's');
  const auto& chunks = meta.tensors.at("w").chunks;
  ChunkFileReader reader = Reader();
  std::string bytes(chunks[1].nbytes, '\0');
  // A small chunk inside a block it shares with its neighbours is read
  // straight from its place in the table file.
  EXPECT_TRUE(reader.ReadDirect(3, KeyOf(3, chunks[1]), chunks[1].checksum,
                                {{bytes.data(), bytes.size()}}));
  EXPECT_EQ(bytes, std::string(chunks[1].nbytes, 's'));
  std::string large(chunks[2].nbytes, '\0');
  // A checksum that does not match what the file holds.
  EXPECT_FALSE(reader.ReadDirect(3, KeyOf(3, chunks[2]), chunks[2].checksum + 1,
                                 {{large.data(), large.size()}}));
  // A key no file holds.
  EXPECT_FALSE(reader.ReadDirect(4, KeyOf(4, chunks[2]), chunks[2].checksum,
                                 {{large.data(), large.size()}}));
  // A failing disk.
  hooks_->suffix = ".val";
  hooks_->reads = 0;
  hooks_->fail_from = 0;
  EXPECT_FALSE(reader.ReadDirect(3, KeyOf(3, chunks[2]), chunks[2].checksum,
                                 {{large.data(), large.size()}}));
  hooks_->suffix.clear();
  EXPECT_TRUE(reader.ReadDirect(3, KeyOf(3, chunks[2]), chunks[2].checksum,
                                {{large.data(), large.size()}}));
}

TEST_F(ChunkReaderTest, AValueFileReadIsCheckedAgainstTheFileBeforeAllocating) {
  const std::string path = dir_.Sub("values.bin");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("0123456789", f);
    std::fclose(f);
  }
  ChunkFileReader reader = Reader();
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ValuePointer pointer;
  pointer.offset = 2;
  pointer.nbytes = 5;
  ChunkBuffer buffer;
  ASSERT_TRUE(reader.ReadValueFile(fd, path, "chunk", pointer, &buffer).ok());
  EXPECT_EQ(buffer.bytes(), "23456");
  // Bytes past the end of the file, as a damaged pointer would name.
  pointer.nbytes = uint64_t{1} << 40;
  ChunkBuffer past;
  const Status s = reader.ReadValueFile(fd, path, "chunk", pointer, &past);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("the file ends at byte 10"), std::string::npos)
      << s.message();
  ::close(fd);
  // Not a regular file.
  const int dir_fd = ::open(dir_.path().c_str(), O_RDONLY);
  ASSERT_GE(dir_fd, 0);
  pointer.nbytes = 1;
  const Status not_file =
      reader.ReadValueFile(dir_fd, dir_.path(), "chunk", pointer, &past);
  EXPECT_EQ(not_file.code(), StatusCode::kCorruption);
  EXPECT_NE(not_file.message().find("is not a regular file"), std::string::npos)
      << not_file.message();
  ::close(dir_fd);
}

}  // namespace
}  // namespace ckptdb::storage
