#include "storage/info_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;

// What RocksDB logs for one save (a flush, an ingestion, their table
// files): about 9 KB in lines of a few hundred bytes.
void LogOneSave(rocksdb::Logger& log, int save) {
  for (int line = 0; line < 40; ++line) {
    rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, &log,
                 "[chunks] save %d line %d: %0200d", save, line, 0);
  }
}

TEST(InfoLog, StaysBoundedOverTenThousandSaves) {
  testing::TempDir tmp;
  auto fs = std::make_shared<StoreFileSystem>(nullptr, false, tmp.path());
  const std::string log = tmp.Sub("LOG");
  std::shared_ptr<rocksdb::Logger> logger = NewInfoLog(fs, tmp.path());
  const uint64_t bound = kInfoLogBytes + 1024;  // a line past the limit
  for (int save = 1; save <= 10000; ++save) {
    LogOneSave(*logger, save);
    if (save % 500 != 0) continue;
    ASSERT_LE(fs::file_size(log), bound) << "after " << save << " saves";
    if (fs::exists(log + ".old")) {
      ASSERT_LE(fs::file_size(log + ".old"), bound) << "after " << save;
    }
  }
  EXPECT_TRUE(fs::exists(log + ".old"));  // it rotated
  // The newest lines are in LOG; nothing else is kept.
  logger.reset();
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  EXPECT_NE(last.find("save 10000 line 39"), std::string::npos) << last;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(tmp.path()))
    files += entry.path().filename().string().rfind("LOG", 0) == 0;
  EXPECT_EQ(files, 2);
}

TEST(InfoLog, AnOpenStartsANewLogOnceTheLastOneIsFull) {
  testing::TempDir tmp;
  auto fs = std::make_shared<StoreFileSystem>(nullptr, false, tmp.path());
  const std::string log = tmp.Sub("LOG");
  for (int open = 0; open < 3; ++open) {
    auto logger = NewInfoLog(fs, tmp.path(), /*max_bytes=*/16 << 10);
    for (int save = 0; save < 10; ++save) LogOneSave(*logger, save);
  }
  EXPECT_LE(fs::file_size(log), (16u << 10) + 1024);
  EXPECT_LE(fs::file_size(log + ".old"), (16u << 10) + 1024);
}

}  // namespace
}  // namespace ckptdb::storage
