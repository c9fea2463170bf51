#include "storage/file_checksums.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace ckptdb::storage {
namespace {

std::string ChecksumOf(rocksdb::FileChecksumGenFactory& factory,
                       const std::string& bytes,
                       const std::vector<size_t>& pieces) {
  rocksdb::FileChecksumGenContext context;
  context.file_name = "000012.sst";
  std::unique_ptr<rocksdb::FileChecksumGenerator> gen =
      factory.CreateFileChecksumGenerator(context);
  EXPECT_STREQ(gen->Name(), rocksdb::kStandardDbFileChecksumFuncName);
  size_t at = 0;
  for (size_t piece : pieces) {
    gen->Update(bytes.data() + at, piece);
    at += piece;
  }
  gen->Update(bytes.data() + at, bytes.size() - at);
  gen->Finalize();
  return gen->GetChecksum();
}

TEST(FileChecksumsTest, Crc32cOfTheStandardCheckString) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc32c(0, check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, nullptr, 0), 0u);
  // Continued over pieces, the same as at once.
  EXPECT_EQ(Crc32c(Crc32c(0, check.data(), 4), check.data() + 4, 5),
            0xE3069283u);
  EXPECT_EQ(WholeFileChecksum(0xE3069283u), std::string("\xE3\x06\x92\x83"));
}

TEST(FileChecksumsTest, TheSameChecksumsAsRocksDBsStandardFactory) {
  const auto ours = NewWholeFileChecksumFactory();
  const auto standard = rocksdb::GetFileChecksumGenCrc32cFactory();
  EXPECT_STREQ(ours->Name(), standard->Name());
  std::mt19937_64 rng(7);
  for (size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{63}, size_t{1000},
                      size_t{4096}, size_t{1} << 20}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    // At once, and in uneven pieces, as a table writer hands them over.
    for (const std::vector<size_t>& pieces :
         {std::vector<size_t>{}, std::vector<size_t>{size / 3, size / 5}}) {
      SCOPED_TRACE("size " + std::to_string(size));
      EXPECT_EQ(ChecksumOf(*ours, bytes, pieces),
                ChecksumOf(*standard, bytes, pieces));
    }
  }
}

TEST(FileChecksumsTest, AnotherRequestedFunctionGetsNoGenerator) {
  const auto ours = NewWholeFileChecksumFactory();
  rocksdb::FileChecksumGenContext context;
  context.requested_checksum_func_name = "SomeOtherChecksum";
  EXPECT_EQ(ours->CreateFileChecksumGenerator(context), nullptr);
  context.requested_checksum_func_name =
      rocksdb::kStandardDbFileChecksumFuncName;
  EXPECT_NE(ours->CreateFileChecksumGenerator(context), nullptr);
}

}  // namespace
}  // namespace ckptdb::storage
