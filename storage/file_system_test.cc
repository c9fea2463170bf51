#include "storage/file_system.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::TempDir;

// Deletions are held back only after a failed write: a failed read, or a
// failed open for reading, says nothing of what is on disk.
TEST(StoreFileSystemTest, OnlyFailedWritesHoldBackDeletions) {
  TempDir dir;
  const std::string file = dir.Sub("f");
  std::ofstream(file) << "bytes";
  auto faults = std::make_shared<FaultInjector>();
  StoreFileSystem fs(faults);
  faults->Arm({.nth = 1,
               .from_nth_on = true,
               .ops = FileOpMask(FileOp::kOpen) | FileOpMask(FileOp::kRead)});
  std::unique_ptr<rocksdb::FSRandomAccessFile> random;
  EXPECT_FALSE(
      fs.NewRandomAccessFile(file, rocksdb::FileOptions(), &random, nullptr)
          .ok());
  EXPECT_TRUE(fs.ReadWholeFile(file).status().IsIOError());
  EXPECT_FALSE(fs.CheckRead(file).ok());
  EXPECT_FALSE(fs.write_failed());

  std::unique_ptr<rocksdb::FSWritableFile> writable;
  EXPECT_FALSE(fs.NewWritableFile(dir.Sub("g"), rocksdb::FileOptions(),
                                  &writable, nullptr)
                   .ok());
  EXPECT_TRUE(fs.write_failed());
  faults->Disarm();
  // Held back: the file stays.
  EXPECT_TRUE(fs.Remove(file).ok());
  EXPECT_TRUE(std::filesystem::exists(file));
  // A fresh file system (the store reopens) deletes again.
  StoreFileSystem fresh(faults);
  EXPECT_TRUE(fresh.Remove(file).ok());
  EXPECT_FALSE(std::filesystem::exists(file));
}

// A read that fails once is tried again and succeeds.
TEST(StoreFileSystemTest, AFailedReadIsRetried) {
  TempDir dir;
  const std::string file = dir.Sub("f");
  std::ofstream(file) << "0123456789";
  auto faults = std::make_shared<FaultInjector>();
  StoreFileSystem fs(faults);
  std::unique_ptr<rocksdb::FSRandomAccessFile> random;
  ASSERT_TRUE(
      fs.NewRandomAccessFile(file, rocksdb::FileOptions(), &random, nullptr)
          .ok());
  faults->Arm({.nth = 1, .ops = FileOpMask(FileOp::kRead)});
  char scratch[10];
  rocksdb::Slice got;
  ASSERT_TRUE(
      random->Read(2, 4, rocksdb::IOOptions(), &got, scratch, nullptr).ok());
  EXPECT_EQ(got.ToString(), "2345");
  EXPECT_EQ(faults->injected().size(), 1u);
}

}  // namespace
}  // namespace ckptdb::storage
