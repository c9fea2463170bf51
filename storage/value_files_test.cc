#include "storage/value_files.h"

#include <gtest/gtest.h>
#include <rocksdb/table_properties.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "storage/chunk_files.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

TEST(ValuePointerTest, RoundTripsAndRejectsEverythingElse) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    ValuePointer p{static_cast<int32_t>(rng() % 100000),
                   static_cast<uint32_t>(rng() % 64),
                   static_cast<uint32_t>(rng()), rng() >> 2, rng() >> 2};
    const std::string bytes = EncodeValuePointer(p);
    ASSERT_EQ(bytes.size(), kValuePointerBytes);
    auto back = DecodeValuePointer(bytes);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->rank, p.rank);
    EXPECT_EQ(back->part, p.part);
    EXPECT_EQ(back->nonce, p.nonce);
    EXPECT_EQ(back->offset, p.offset);
    EXPECT_EQ(back->nbytes, p.nbytes);
    // Any single flipped bit of the magic, a shorter or longer value: not a
    // pointer.
    for (size_t at : {0, 1, 2, 3}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ (1 << (rng() % 8)));
      EXPECT_FALSE(DecodeValuePointer(bad).has_value()) << at;
    }
    EXPECT_FALSE(DecodeValuePointer(bytes.substr(1)).has_value());
    EXPECT_FALSE(DecodeValuePointer(bytes + '\0').has_value());
  }
  // A negative rank, or an end past 2^64.
  EXPECT_FALSE(DecodeValuePointer(EncodeValuePointer({-1, 0, 0, 0, 1})));
  EXPECT_FALSE(
      DecodeValuePointer(EncodeValuePointer({0, 0, 0, ~uint64_t{0}, 2})));
}

TEST(ValueFileNamesTest, DirectoriesAreCheckpointIds) {
  int64_t id = 0;
  EXPECT_TRUE(ParseValueDirName("42", &id));
  EXPECT_EQ(id, 42);
  for (const char* bad : {"", "0", "-1", "4a", "..", "42.tmp",
                          "1234567890123456789", "99999999999999999999"}) {
    EXPECT_FALSE(ParseValueDirName(bad, &id)) << bad;
  }
  EXPECT_EQ(ValueFileName(7, {3, 1, 0xbeef}), "7/3-1-0000beef.val");
  EXPECT_EQ(ValueFilePath("/s", 7, {3, 1, 0xbeef}),
            "/s/values/7/3-1-0000beef.val");
}

// The value file a table file names comes from the store, which may come
// from anywhere: only a name of the form <id>/<rank>-<part>.val is used.
TEST(ValueFileNamesTest, ATableFileNamesOnlyAValueFileInsideTheStore) {
  auto named = [](const std::string& name) {
    rocksdb::TableProperties props;
    std::string value = name;
    value.push_back('\0');
    value.append(8, '\x01');
    props.user_collected_properties["ckptdb.chunk-value-file"] = value;
    return ValueFileOf(props);
  };
  auto ok = named("12/3-0-00c0ffee.val");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->name, "12/3-0-00c0ffee.val");
  EXPECT_EQ(ok->end, 0x0101010101010101u);
  for (const char* bad : {"../../etc/passwd", "12/../../x.val", "/12/3-0.val",
                          "12/3-0.sst", "3-0.val", "1/2/3-0.val", ""}) {
    EXPECT_FALSE(named(bad).has_value()) << bad;
  }
  EXPECT_FALSE(ValueFileOf(rocksdb::TableProperties()).has_value());
}

// Two attempts at the same checkpoint id (a failed save's id is given out
// again) write different files: a writer left over from the first (a process
// of a job that died) can neither truncate nor remove the second's.
TEST(ValueFileWriterTest, AttemptsAtOneIdNeverShareAFile) {
  ckptdb::testing::TempDir dir;
  auto fs = std::make_shared<StoreFileSystem>(nullptr);
  ValueFileWriter old_attempt(fs, dir.path(), 5, 1, 0);
  ValueFileWriter new_attempt(fs, dir.path(), 5, 1, 0);
  EXPECT_NE(old_attempt.path(), new_attempt.path());
  const std::string bytes(128 << 10, 'n');
  ASSERT_TRUE(new_attempt.Append(bytes).ok());
  ASSERT_TRUE(new_attempt.Finish().ok());
  ASSERT_TRUE(old_attempt.Append(std::string(64 << 10, 'o')).ok());
  old_attempt.Abandon();
  EXPECT_FALSE(std::filesystem::exists(old_attempt.path()));
  std::ifstream in(new_attempt.path(), std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(got == bytes);
}

}  // namespace
}  // namespace ckptdb::storage
