// The second copies of a store's metadata: their codec, and the chunk
// locations they keep, which must find every chunk value without RocksDB.
#include "storage/record_copies.h"

#include <gtest/gtest.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "core/checksum.h"
#include "core/little_endian.h"
#include "storage/chunk_files.h"
#include "storage/keys.h"
#include "storage/store.h"
#include "storage/store_impl.h"
#include "storage/value_files.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

TEST(RecordCopies, AnEncoderKeptFromCopyToCopyEncodesEachAsAFreshOne) {
  std::mt19937_64 random(7);
  CopyEncoder kept;
  for (int copy = 0; copy < 6; ++copy) {
    // Entries of every size up to several of the compressor's blocks, some
    // repetitive and some not; none at all in the first copy.
    CopyEntries entries;
    for (int i = 0; i < copy * 40; ++i) {
      std::string value(random() % (copy * 20000 + 1), '\0');
      for (size_t b = 0; b < value.size(); b += 1 + i % 5)
        value[b] = static_cast<char>(random());
      entries.emplace_back("key" + std::to_string(i), std::move(value));
    }
    const CopyKind kind = copy % 2 ? CopyKind::kLocators : CopyKind::kRecords;
    const std::string bytes = kept.Encode(kind, entries);
    EXPECT_EQ(bytes, EncodeCopy(kind, entries)) << "copy " << copy;
    auto decoded = DecodeCopy(kind, bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, entries) << "copy " << copy;
  }
}

TEST(RecordCopies, RoundTripAndEveryFlippedByteOrCutIsCorruption) {
  const CopyEntries entries = {
      {"a", std::string(300, 'x')}, {std::string("\0key", 4), ""}, {"", "v"}};
  const std::string bytes = EncodeCopy(CopyKind::kRecords, entries);
  auto decoded = DecodeCopy(CopyKind::kRecords, bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, entries);
  EXPECT_TRUE(DecodeCopy(CopyKind::kLocators, bytes).status().IsCorruption());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x01);
    EXPECT_TRUE(DecodeCopy(CopyKind::kRecords, flipped).status().IsCorruption())
        << "byte " << i;
    EXPECT_TRUE(DecodeCopy(CopyKind::kRecords, bytes.substr(0, i))
                    .status()
                    .IsCorruption())
        << "cut at " << i;
  }
}

// The layout of copies written with uncompressed entries: the magic
// CKPTCOPY, the kind, the entry count, each entry as two length-prefixed
// strings, the checksum.
std::string UncompressedCopy(CopyKind kind, const CopyEntries& entries) {
  std::string out = "CKPTCOPY";
  out.push_back(static_cast<char>(kind));
  PutLittleEndian(&out, static_cast<uint32_t>(entries.size()));
  for (const auto& [key, value] : entries) {
    PutLittleEndian(&out, static_cast<uint32_t>(key.size()));
    out += key;
    PutLittleEndian(&out, static_cast<uint32_t>(value.size()));
    out += value;
  }
  PutLittleEndian(&out, ChunkChecksum(out.data(), out.size()));
  return out;
}

TEST(RecordCopies, CopiesOfUncompressedEntriesAreRead) {
  const CopyEntries entries = {{"k", std::string(40, '\0')}, {"", ""}};
  const std::string bytes = UncompressedCopy(CopyKind::kLocators, entries);
  auto decoded = DecodeCopy(CopyKind::kLocators, bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, entries);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x10);
    EXPECT_TRUE(
        DecodeCopy(CopyKind::kLocators, flipped).status().IsCorruption())
        << "byte " << i;
  }
}

TEST(RecordCopies, RecordsAreStoredCompressed) {
  // Records are mostly zero padding and small integers.
  CopyEntries entries;
  for (int i = 0; i < 100; ++i) {
    std::string value(200, '\0');
    value[i % 200] = static_cast<char>(i);
    entries.emplace_back("tensor." + std::to_string(i), value);
  }
  size_t raw = 0;
  for (const auto& [key, value] : entries) raw += key.size() + value.size();
  const std::string bytes = EncodeCopy(CopyKind::kRecords, entries);
  EXPECT_LT(bytes.size(), raw / 4);
  EXPECT_EQ(*DecodeCopy(CopyKind::kRecords, bytes), entries);
}

// Inputs with a valid checksum reach the inner decoding: whatever it is given,
// it returns entries or Corruption, and never reads outside the input.
TEST(RecordCopies, RandomBytesWithAValidChecksumDecodeOrAreCorruption) {
  std::mt19937_64 rng(11);
  const CopyEntries entries = {{"a", "xyz"}, {"bb", std::string(64, 'q')}};
  const std::string valid = EncodeCopy(CopyKind::kRecords, entries);
  const std::string legacy = UncompressedCopy(CopyKind::kRecords, entries);
  for (int round = 0; round < 4000; ++round) {
    std::string bytes = (round % 2 ? valid : legacy);
    bytes.resize(bytes.size() - 8);
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes.erase(at, 1 + rng() % 8);
          break;
        default:
          bytes.insert(at, 1 + rng() % 8, static_cast<char>(rng()));
      }
    }
    PutLittleEndian(&bytes, ChunkChecksum(bytes.data(), bytes.size()));
    auto decoded = DecodeCopy(CopyKind::kRecords, bytes);
    if (decoded.ok())
      EXPECT_EQ(*DecodeCopy(CopyKind::kRecords,
                            EncodeCopy(CopyKind::kRecords, *decoded)),
                *decoded);
    else
      EXPECT_TRUE(decoded.status().IsCorruption())
          << decoded.status().ToString();
  }
}

TEST(RecordCopies, NamesOfCopyFiles) {
  int64_t id = 0;
  CopyKind kind;
  EXPECT_TRUE(ParseCopyName("12.rec", &id, &kind));
  EXPECT_EQ(id, 12);
  EXPECT_EQ(kind, CopyKind::kRecords);
  EXPECT_TRUE(ParseCopyName("3.loc", &id, &kind));
  EXPECT_EQ(kind, CopyKind::kLocators);
  for (const char* other : {"12.rec.tmp", ".rec", "0.rec", "a.loc", "12"})
    EXPECT_FALSE(ParseCopyName(other, &id, &kind)) << other;
  EXPECT_EQ(CopyPath("/s", CopyKind::kRecords, 7), "/s/copies/7.rec");
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// Small chunks share data blocks, with keys that share prefixes of every
// length (RocksDB stores each key as a delta of the previous one, restarting
// every 16 entries), and large ones go to the value file: the recorded
// locations find every value's bytes in the files.
TEST(RecordCopies, ChunkLocationsFindEveryValueInItsFile) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("store");
  auto store = Store::Open(dir, StoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::mt19937 rng(5);
  struct Chunk {
    std::string tensor;
    Shape offset;
    std::string bytes;
  };
  std::vector<Chunk> chunks;
  const std::vector<std::string> names = {
      "a", "ab", "abc", "b", "layer.0.w", "layer.0.wb", "layer.1.w"};
  for (const std::string& name : names) {
    for (int64_t i = 0; i < 40; ++i) {
      // Mostly small (sharing blocks), some at or past the value file limit
      // (gathered into the writer's buffer, or from 64 KiB written at once).
      const size_t n = rng() % 7 == 0 ? kExternalValueBytes + rng() % (80 << 10)
                                      : 1 + rng() % (kExternalValueBytes - 1);
      std::string bytes(n, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      chunks.push_back(
          {name, {i * 300, static_cast<int64_t>(rng() % 3)}, bytes});
    }
  }
  std::sort(chunks.begin(), chunks.end(), [](const Chunk& x, const Chunk& y) {
    return EncodeChunkKey(1, 0, x.tensor, x.offset) <
           EncodeChunkKey(1, 0, y.tensor, y.offset);
  });
  auto writer = (*store)->NewStagedFile(1, 0, 0);
  ASSERT_TRUE(writer.ok());
  for (const Chunk& c : chunks)
    ASSERT_TRUE((*writer)->Add(c.tensor, c.offset, c.bytes).ok());
  auto staged = (*writer)->Finish();
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();

  rocksdb::Options options;
  static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
  rocksdb::SstFileReader reader(options);
  ASSERT_TRUE(reader.Open(*staged).ok());
  const std::optional<std::string> blob =
      LocatorBlob(*reader.GetTableProperties());
  ASSERT_TRUE(blob.has_value());
  const std::optional<ChunkLocations> located = ParseLocatorBlob(*blob);
  ASSERT_TRUE(located.has_value());
  ASSERT_FALSE(located->value_file.empty());
  const std::string table = FileBytes(*staged);
  const std::string values =
      FileBytes(ValuesDir(dir) + "/" + located->value_file);
  size_t small = 0, large = 0;
  for (const Chunk& c : chunks) {
    const std::string key = EncodeChunkKey(1, 0, c.tensor, c.offset);
    ASSERT_TRUE(located->Holds(key));
    const auto at = located->Find(key);
    ASSERT_TRUE(at.has_value()) << c.tensor;
    const std::string& file = at->first ? values : table;
    ASSERT_LE(at->second + c.bytes.size(), file.size());
    EXPECT_EQ(file.substr(at->second, c.bytes.size()), c.bytes)
        << c.tensor << " " << ShapeToString(c.offset) << " (" << c.bytes.size()
        << " bytes)";
    (at->first ? large : small) += 1;
  }
  EXPECT_GT(small, 200u);
  EXPECT_GT(large, 10u);
  EXPECT_FALSE(ParseLocatorBlob(blob->substr(0, blob->size() - 1)));
}

}  // namespace
}  // namespace ckptdb::storage
