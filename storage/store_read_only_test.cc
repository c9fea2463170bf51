// Read-only handles: an open that changes nothing, Refresh to see later
// commits, Release to let go of deleted files (and the reads that open the
// handle again, on any thread), reads of a checkpoint deleted meanwhile.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "storage/store.h"
#include "storage/store_testing.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::FaultInjector;
using ckptdb::testing::FilesUnder;
using ckptdb::testing::SnapshotDir;
using ckptdb::testing::TempDir;
using testing::ReadAll;
using testing::SaveBytes;

TEST(StoreTest, ReadOnlyOpenNeverModifiesTheDirectory) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(SaveBytes(**store, std::string(4096, 'x'), 2).ok());
  }
  const auto before = SnapshotDir(dir.path());
  {
    StoreOptions ro;
    ro.read_only = true;
    auto store = Store::Open(dir.path(), ro);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto meta = (*store)->GetMetadata(1);
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(ReadAll(**store, *meta), std::string(4096, 'x'));
    EXPECT_EQ((*store)->NextCheckpointId().status().code(),
              StatusCode::kFailedPrecondition);
    EXPECT_FALSE((*store)->Delete(1).ok());
    ASSERT_TRUE((*store)->Refresh().ok());
  }
  EXPECT_EQ(SnapshotDir(dir.path()), before);
}

TEST(StoreTest, ReadOnlyHandleSeesCommitsAfterRefresh) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  StoreOptions ro;
  ro.read_only = true;
  auto reader = Store::Open(dir.path(), ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE(SaveBytes(**writer, "abc", 1).ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  auto meta = (*reader)->GetMetadata(1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(ReadAll(**reader, *meta), "abc");
}

// Runs `read` `times` times on each of `threads` threads while another thread
// releases `store` over and over; the number of reads that returned false.
int FailedReadsWhileReleasing(Store& store, int threads, int times,
                              const std::function<bool()>& read) {
  std::atomic<bool> done{false};
  std::thread releaser([&] {
    while (!done) store.Release();
  });
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < threads; ++t) {
    readers.emplace_back([&] {
      for (int i = 0; i < times; ++i) failures += read() ? 0 : 1;
    });
  }
  for (auto& t : readers) t.join();
  done = true;
  releaser.join();
  return failures.load();
}

// Release closes a read-only handle's view; every listing and metadata read
// opens it again, also while another thread releases it over and over.
TEST(StoreTest, AReleasedReadOnlyHandleReopensForReadsOnAnyThread) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(SaveBytes(**writer, std::string(10000, 'r'), 2).ok());
  auto reader = Store::Open(dir.path(), {.read_only = true});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(FailedReadsWhileReleasing(**reader, 3, 150,
                                      [&] {
                                        auto listed = (*reader)->List();
                                        auto meta = (*reader)->GetMetadata(1);
                                        return listed.ok() &&
                                               listed->size() == 1 &&
                                               meta.ok() &&
                                               meta->tensors.size() == 1;
                                      }),
            0);
}

// A chunk read through RocksDB (small chunks, which share blocks) owns its
// bytes: the buffer outlives the read's lock, and a Release on another thread
// closes the database whose block cache a pinned value would point into.
TEST(StoreTest, ChunksReadWhileAnotherThreadReleasesTheHandleStayValid) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  const std::string bytes(6000, 'c');
  ASSERT_TRUE(SaveBytes(**writer, bytes, 3).ok());  // chunks of 2,000 bytes
  auto reader = Store::Open(dir.path(), {.read_only = true});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto meta = (*reader)->GetMetadata(1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(
      FailedReadsWhileReleasing(
          **reader, 2, 300, [&] { return ReadAll(**reader, *meta) == bytes; }),
      0);
}

// After a failed write the file system holds every deletion back until the
// store opens again: a Release then opens at once, so that the staged files
// abandoned later are removed, as after a Refresh.
TEST(StoreTest, AReleaseAfterAFailedWriteLetsLaterStagedFilesBeRemoved) {
  TempDir dir;
  {
    auto writer = Store::Open(dir.path(), {});
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(SaveBytes(**writer, "abc", 1).ok());
  }
  auto faults = std::make_shared<FaultInjector>();
  auto reader =
      Store::Open(dir.path(), {.file_system_hooks = faults, .read_only = true});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const std::string staging = dir.path() + "/staging";
  faults->Arm({.nth = 1,
               .from_nth_on = true,
               .ops = FileOpMask(FileOp::kWrite) | FileOpMask(FileOp::kSync),
               .path_contains = "staging"});
  {
    auto staged = (*reader)->NewStagedFile(2, 1, 0);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    (void)(*staged)->Add("w", Shape{0}, std::string(100, 'x'), std::nullopt);
    EXPECT_FALSE((*staged)->Finish().ok());
  }
  faults->Disarm();
  (*reader)->Release();
  {
    auto staged = (*reader)->NewStagedFile(2, 1, 0);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    ASSERT_TRUE((*staged)
                    ->Add("w", Shape{0}, std::string(100, 'y'), std::nullopt)
                    .ok());
    (*staged)->Abandon();
  }
  EXPECT_TRUE(FilesUnder(staging).empty())
      << "abandoned staged files left in " << staging;
}

TEST(StoreTest, ARefreshThatCannotLookAtTheWritersFilesIsAnIOError) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  auto faults = std::make_shared<FaultInjector>();
  StoreOptions ro;
  ro.read_only = true;
  ro.file_system_hooks = faults;
  auto reader = Store::Open(dir.path(), ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE(SaveBytes(**writer, "abc", 1).ok());
  faults->Arm({.nth = 1,
               .from_nth_on = true,
               .ops = FileOpMask(FileOp::kStat),
               .path_contains = "CKPTDB_JOURNAL"});
  const Status refreshed = (*reader)->Refresh();
  EXPECT_TRUE(refreshed.IsIOError()) << refreshed.ToString();
  EXPECT_NE(refreshed.message().find("reading the size and time of " +
                                     dir.path() + "/CKPTDB_JOURNAL"),
            std::string::npos)
      << refreshed.ToString();
  faults->Disarm();
  ASSERT_TRUE((*reader)->Refresh().ok());
  auto meta = (*reader)->GetMetadata(1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(ReadAll(**reader, *meta), "abc");
}

// A reader that learned a checkpoint's chunks before another handle deleted
// it, then re-opened, is told the checkpoint is gone (NotFound), not that the
// store is damaged. A chunk missing under a checkpoint that is still listed
// stays Corruption.
TEST(StoreTest, ReadingACheckpointDeletedMeanwhileIsNotFound) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(SaveBytes(**writer, "abcdef", 2).ok());
  StoreOptions ro;
  ro.read_only = true;
  auto reader = Store::Open(dir.path(), ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto meta = (*reader)->GetMetadata(1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  ASSERT_TRUE((*writer)->Delete(1).ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  const ChunkMetadata& chunk = meta->tensors.at("w").chunks[0];
  auto read = (*reader)->ReadChunk(1, "w", chunk);
  EXPECT_TRUE(read.status().IsNotFound()) << read.status().ToString();
  EXPECT_NE(read.status().message().find("was deleted while it was read"),
            std::string::npos)
      << read.status().ToString();

  // A listed checkpoint whose chunk is not where its record says: damage.
  auto kept = SaveBytes(**writer, "ghijkl", 2);
  ASSERT_TRUE(kept.ok());
  ChunkMetadata elsewhere = kept->tensors.at("w").chunks[0];
  elsewhere.box.origin = {1};
  ASSERT_TRUE((*reader)->Refresh().ok());
  auto missing = (*reader)->ReadChunk(kept->info.id, "w", elsewhere);
  EXPECT_TRUE(missing.status().IsCorruption()) << missing.status().ToString();
}

}  // namespace
}  // namespace ckptdb::storage
