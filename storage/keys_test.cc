#include "storage/keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "storage/store.h"

namespace ckptdb::storage {
namespace {

TEST(KeysTest, OrderFollowsIdRankKeyOffset) {
  std::vector<std::string> keys = {
      EncodeChunkKey(1, 0, "a", {0, 0}), EncodeChunkKey(1, 0, "a", {0, 5}),
      EncodeChunkKey(1, 0, "a", {3, 0}), EncodeChunkKey(1, 0, "a.b", {0}),
      EncodeChunkKey(1, 0, "ab", {0}),   EncodeChunkKey(1, 1, "a", {0, 0}),
      EncodeChunkKey(2, 0, "", {}),      EncodeChunkKey(256, 0, "a", {0}),
  };
  for (size_t i = 1; i < keys.size(); ++i) EXPECT_LT(keys[i - 1], keys[i]) << i;
}

TEST(KeysTest, KeysWithNulBytesStayOrderedAndDistinct) {
  std::string with_nul("a\0b", 3);
  EXPECT_LT(EncodeChunkKey(1, 0, "a", {}), EncodeChunkKey(1, 0, with_nul, {}));
  EXPECT_LT(EncodeChunkKey(1, 0, with_nul, {}),
            EncodeChunkKey(1, 0, "a\x01", {}));
}

TEST(KeysTest, ChunkKeyBytesAreTheStoredLayout) {
  // Checkpoint id and writer rank big-endian, the tensor key with each NUL
  // followed by 0xff, NUL and 0x01, then each offset big-endian with its
  // sign bit flipped: the keys stores already hold.
  using namespace std::string_literals;
  EXPECT_EQ(EncodeChunkKey(7, 3, "a\0b"s, {1, 2}),
            "\0\0\0\0\0\0\0\x07"s + "\0\0\0\x03"s +
                "a\0\xff"
                "b"s +
                "\0\x01"s + "\x80\0\0\0\0\0\0\x01"s + "\x80\0\0\0\0\0\0\x02"s);
  EXPECT_EQ(EncodeChunkKey(-1, -2, "w", {}),
            std::string(8, '\xff') + "\xff\xff\xff\xfe" + "w\0\x01"s);
  EXPECT_EQ(EncodeChunkKey(0x0102030405060708, 0x0a0b0c0d, "", {-1}),
            "\x01\x02\x03\x04\x05\x06\x07\x08\x0a\x0b\x0c\x0d\0\x01"s + "\x7f" +
                std::string(7, '\xff'));
}

TEST(KeysTest, WriterRangesDoNotOverlap) {
  const std::string key = EncodeChunkKey(7, 3, "zzz", {1 << 30});
  EXPECT_GE(key, WriterKeyPrefix(7, 3));
  EXPECT_LT(key, WriterKeyPrefix(7, 4));
  EXPECT_LT(key, CheckpointKeyPrefix(8));
  EXPECT_LT(EncodeChunkKey(7, INT32_MAX, "\xff\xff", {INT64_MAX}),
            CheckpointKeyEnd(7));
  EXPECT_LT(CheckpointKeyEnd(7), CheckpointKeyPrefix(8));
  int64_t id = 0;
  ASSERT_TRUE(DecodeCheckpointId(key, &id));
  EXPECT_EQ(id, 7);
  ASSERT_TRUE(DecodeCheckpointId(CheckpointKeyEnd(9), &id));
  EXPECT_EQ(id, 9);
}

TEST(KeysTest, ChunksAreWrittenInTheOrderOfTheirStorageKeys) {
  const std::string nul("a\0b", 3);
  const Shape o1{1}, o2{2}, o10{10}, o256{256};
  // By key: "a" ends before "a\0b" (its terminator sorts first), which sorts
  // before "ab"; offsets compare as numbers, 2 before 10 before 256.
  const std::vector<ChunkToWrite> chunks{
      {"ab", &o1}, {"a", &o10}, {nul, &o1}, {"a", &o2}, {"a", &o256}};
  EXPECT_EQ(ChunkWriteOrder(chunks), (std::vector<size_t>{3, 1, 4, 2, 0}));
  EXPECT_TRUE(ChunkWriteOrder({}).empty());
}

// The order ChunkWriteOrder finds from tensor keys and offsets is that of the
// encoded keys, for keys made of the bytes that escaping and terminators
// involve and offsets of every size.
TEST(KeysTest, TheWriteOrderIsTheOrderOfTheEncodedKeys) {
  std::mt19937_64 rng(21);
  const std::string bytes(
      "\0\x01\xff"
      "a",
      4);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> names(1 + rng() % 12);
    std::vector<Shape> origins(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      for (size_t n = rng() % 4; n > 0; --n) names[i] += bytes[rng() % 4];
      origins[i].assign(1 + rng() % 2, 0);
      if (rng() % 8 == 0) origins[i].clear();  // a 0-d tensor's chunk
      for (int64_t& o : origins[i]) {
        o = static_cast<int64_t>(rng() >> (rng() % 64));
        if (rng() % 2) o = static_cast<int64_t>(rng() % 3) - 1;
      }
    }
    std::vector<ChunkToWrite> chunks(names.size());
    for (size_t i = 0; i < names.size(); ++i)
      chunks[i] = {names[i], &origins[i]};
    const std::vector<size_t> order = ChunkWriteOrder(chunks);
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      ASSERT_EQ(sorted[i], i) << "round " << round << ": not a permutation";
    for (size_t k = 1; k < order.size(); ++k) {
      EXPECT_LE(
          EncodeChunkKey(7, 3, names[order[k - 1]], origins[order[k - 1]]),
          EncodeChunkKey(7, 3, names[order[k]], origins[order[k]]))
          << "round " << round << ", position " << k;
    }
  }
}

TEST(KeysTest, MetaKeys) {
  int64_t id = 0;
  EXPECT_TRUE(DecodeMetaKey(MetaKey(42), &id));
  EXPECT_EQ(id, 42);
  EXPECT_FALSE(DecodeMetaKey(kNextIdKey, &id));
  EXPECT_FALSE(DecodeMetaKey(kStoreMarkerKey, &id));
  EXPECT_LT(MetaKey(INT64_MAX), std::string(kNextIdKey));
}

TEST(KeysTest, TensorRecordKeysSortRightAfterTheirMainRecord) {
  int64_t id = 0;
  std::string_view key;
  const std::string a = TensorRecordKey(42, "");
  const std::string b = TensorRecordKey(42, std::string("a\0b", 3));
  const std::string c = TensorRecordKey(42, "\xff\xff");
  EXPECT_LT(MetaKey(42), a);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  // The small tensors' record after every tensor record, inside the range.
  const std::string small = SmallTensorsKey(42);
  EXPECT_LT(c, small);
  EXPECT_LT(small, MetaRangeEnd(42));
  EXPECT_LT(MetaRangeEnd(42), MetaKey(43));
  ASSERT_TRUE(DecodeSmallTensorsKey(small, &id));
  EXPECT_EQ(id, 42);
  EXPECT_FALSE(DecodeSmallTensorsKey(MetaKey(42), &id));
  EXPECT_FALSE(DecodeSmallTensorsKey(c, &id));
  EXPECT_FALSE(DecodeTensorRecordKey(small, &id, &key));
  EXPECT_FALSE(DecodeMetaKey(small, &id));
  EXPECT_LT(TensorRecordKey(INT64_MAX, "\xff"), std::string(kNextIdKey));
  // Only the main record is a checkpoint.
  EXPECT_FALSE(DecodeMetaKey(b, &id));
  EXPECT_FALSE(DecodeTensorRecordKey(MetaKey(42), &id, &key));
  EXPECT_FALSE(DecodeTensorRecordKey(kNextIdKey, &id, &key));
  ASSERT_TRUE(DecodeTensorRecordKey(b, &id, &key));
  EXPECT_EQ(id, 42);
  EXPECT_EQ(key, std::string_view("a\0b", 3));
}

}  // namespace
}  // namespace ckptdb::storage
