#include "storage/file_system.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::FaultInjector;
using ckptdb::testing::TempDir;

TEST(ParentDirectoryTest, IsTheDirectoryHoldingTheLastPart) {
  EXPECT_EQ(ParentDirectory("ckpt"), ".");
  EXPECT_EQ(ParentDirectory("ckpt/"), ".");
  EXPECT_EQ(ParentDirectory("ckpt//"), ".");
  EXPECT_EQ(ParentDirectory("runs/ckpt"), "runs");
  EXPECT_EQ(ParentDirectory("runs/ckpt/"), "runs");
  EXPECT_EQ(ParentDirectory("/data/ckpt"), "/data");
  EXPECT_EQ(ParentDirectory("/ckpt"), "/");
  EXPECT_EQ(ParentDirectory("/"), "/");
}

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

// A name in a listing may be gone by the time it is looked at: RocksDB removes
// obsolete table files in the background. Sizes of such names are absent,
// their removal succeeds, and a directory that is not there lists as empty.
TEST(StoreFileSystemTest, ListingsTolerateFilesRemovedMeanwhile) {
  TempDir dir;
  StoreFileSystem fs(nullptr);
  auto missing = fs.ListDir(dir.Sub("none"));
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_TRUE(missing->empty());
  auto no_size = fs.SizeIfPresent(dir.Sub("none"));
  ASSERT_TRUE(no_size.ok()) << no_size.status().ToString();
  EXPECT_FALSE(no_size->has_value());

  std::ofstream(dir.Sub("kept")) << "12345";
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string file = dir.Sub("churn" + std::to_string(i % 8));
      std::ofstream(file) << "x";
      std::error_code ec;
      std::filesystem::remove(file, ec);
    }
  });
  int absent = 0;
  for (int round = 0; round < 2000; ++round) {
    auto names = fs.ListDir(dir.path());
    ASSERT_TRUE(names.ok()) << names.status().ToString();
    bool kept = false;
    for (const std::string& name : *names) {
      EXPECT_NE(name, ".");
      EXPECT_NE(name, "..");
      kept |= name == "kept";
      auto size = fs.SizeIfPresent(dir.Sub(name));
      ASSERT_TRUE(size.ok()) << name << ": " << size.status().ToString();
      absent += !size->has_value();
      if (name != "kept") {
        const Status removed = fs.Remove(dir.Sub(name));
        EXPECT_TRUE(removed.ok()) << removed.ToString();
      }
    }
    EXPECT_TRUE(kept);
  }
  stop = true;
  churn.join();
  auto kept = fs.SizeIfPresent(dir.Sub("kept"));
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ(**kept, 5u);
  std::printf("[ listing ] %d names gone before their stat\n", absent);
}

// ckptdb's own looks at files ask the injector: a failure is an IOError
// naming the operation and the path, not an absent file.
TEST(StoreFileSystemTest, LooksAtFilesReportInjectedFailuresNamingThePath) {
  TempDir dir;
  const std::string file = dir.Sub("f");
  std::ofstream(file) << "12345";
  auto faults = std::make_shared<FaultInjector>();
  StoreFileSystem fs(faults);
  EXPECT_TRUE(*fs.Exists(file));
  EXPECT_FALSE(*fs.Exists(dir.Sub("absent")));
  EXPECT_TRUE(*fs.IsDirectory(dir.path()));
  EXPECT_FALSE(*fs.IsDirectory(file));
  EXPECT_FALSE(*fs.IsDirectory(dir.Sub("absent")));
  auto stamp = fs.StampIfPresent(file);
  ASSERT_TRUE(stamp.ok() && stamp->has_value());
  EXPECT_EQ((*stamp)->size, 5u);
  EXPECT_FALSE(fs.StampIfPresent(dir.Sub("absent"))->has_value());

  faults->Arm(
      {.nth = 1, .from_nth_on = true, .ops = FileOpMask(FileOp::kStat)});
  const Status exists = fs.Exists(file).status();
  EXPECT_TRUE(exists.IsIOError());
  EXPECT_NE(exists.message().find("checking whether " + file + " exists"),
            std::string::npos)
      << exists.ToString();
  EXPECT_TRUE(fs.IsDirectory(dir.path()).status().IsIOError());
  const Status stamped = fs.StampIfPresent(file).status();
  EXPECT_TRUE(stamped.IsIOError());
  EXPECT_NE(stamped.message().find(file), std::string::npos);
  // Looking is not writing: deletions are not held back.
  EXPECT_FALSE(fs.write_failed());
}

// A direct open for reading names the path and what it was for; a missing
// file is NotFound, anything but a regular file Corruption.
TEST(StoreFileSystemTest, DirectOpensForReadingNameThePathAndPurpose) {
  TempDir dir;
  const std::string file = dir.Sub("v");
  std::ofstream(file) << "bytes";
  auto faults = std::make_shared<FaultInjector>();
  StoreFileSystem fs(faults);
  Result<int> fd = fs.OpenForDirectRead(file, " to read chunk c");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  char got[5];
  EXPECT_EQ(::pread(*fd, got, 5, 0), 5);
  EXPECT_EQ(std::string(got, 5), "bytes");
  ::close(*fd);

  const Status missing =
      fs.OpenForDirectRead(dir.Sub("gone"), " to read chunk c").status();
  EXPECT_TRUE(missing.IsNotFound()) << missing.ToString();
  EXPECT_NE(
      missing.message().find("opening " + dir.Sub("gone") + " to read chunk c"),
      std::string::npos);

  ASSERT_EQ(::mkfifo(dir.Sub("fifo").c_str(), 0600), 0);
  const Status fifo = fs.OpenForDirectRead(dir.Sub("fifo")).status();
  EXPECT_TRUE(fifo.IsCorruption()) << fifo.ToString();
  EXPECT_NE(fifo.message().find(dir.Sub("fifo")), std::string::npos);
  const Status directory = fs.OpenForDirectRead(dir.path()).status();
  EXPECT_TRUE(directory.IsCorruption()) << directory.ToString();

  faults->Arm({.nth = 1, .ops = FileOpMask(FileOp::kOpen)});
  const Status injected = fs.OpenForDirectRead(file).status();
  EXPECT_TRUE(injected.IsIOError()) << injected.ToString();
  EXPECT_NE(injected.message().find("opening " + file), std::string::npos);
  EXPECT_FALSE(fs.write_failed());
}

// The test walks of a live store skip what vanishes under them, files and
// whole directories, and never throw.
TEST(StoreFileSystemTest, TestWalksSkipEntriesRemovedMeanwhile) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("kept"));
  std::ofstream(dir.Sub("kept/file.sst")) << "123";
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string sub = dir.Sub("values/" + std::to_string(i % 4));
      std::error_code ec;
      std::filesystem::create_directories(sub, ec);
      std::ofstream(sub + "/0-0.val") << "value";
      std::filesystem::remove_all(sub, ec);
    }
  });
  for (int round = 0; round < 2000; ++round) {
    const auto files = ckptdb::testing::FilesUnder(dir.path(), {".sst"});
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].size, 3u);
    (void)ckptdb::testing::BytesUnder(dir.path());
    (void)ckptdb::testing::SnapshotDir(dir.path());
  }
  stop = true;
  churn.join();
  EXPECT_TRUE(ckptdb::testing::FilesUnder(dir.Sub("gone")).empty());
}

}  // namespace
}  // namespace ckptdb::storage
