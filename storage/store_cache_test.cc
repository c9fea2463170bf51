// What a store handle sizes, starts and keeps around its opens, commits and
// deletes: the `meta` column family's block cache (room for the live records,
// never the blocks of deleted ones), the threads an open loads table files
// with, and the ids and infos of the records, which its listings and saves
// then read without walking every record again.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "storage/column_families.h"
#include "storage/store.h"
#include "storage/store_impl.h"
#include "storage/store_testing.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::FaultInjector;
using ckptdb::testing::TempDir;
using testing::CommitLogLine;
using testing::LiveTableBytes;
using testing::SaveBytes;

// Commits a checkpoint of `count` tensors of 4 bytes, "t0", "t1", ... (one
// chunk each, one writer): records of about 100 bytes a tensor.
Status SaveTensors(Store& store, int count) {
  CKPTDB_ASSIGN_OR_RETURN(int64_t id, store.NextCheckpointId());
  CheckpointMetadata meta;
  meta.info.id = id;
  meta.info.world_size = 1;
  meta.info.num_tensors = count;
  meta.info.nbytes = 4 * count;
  CKPTDB_ASSIGN_OR_RETURN(auto writer, store.NewStagedFile(id, 0, 0));
  std::vector<std::string> keys;
  for (int i = 0; i < count; ++i) keys.push_back("t" + std::to_string(i));
  std::sort(keys.begin(), keys.end());  // staged in key order
  for (const std::string& key : keys) {
    CKPTDB_ASSIGN_OR_RETURN(uint64_t sum, writer->Add(key, {0}, "abcd"));
    meta.tensors[key] =
        TensorMetadata{DType::kUInt8, {4}, {{Box{{0}, {4}}, 0, 4, sum}}};
    meta.flat_mapping[key] = {key};
  }
  CKPTDB_ASSIGN_OR_RETURN(std::string file, writer->Finish());
  return store.Commit(meta, {file});
}

// The metadata cache's size in the LOG line of checkpoint `id`'s commit.
double LoggedMetaCacheMiB(const std::string& dir, int64_t id) {
  const std::string rest = CommitLogLine(dir, id);
  const size_t cache = rest.find("metadata cache ");
  return cache == std::string::npos ? -1 : std::stod(rest.substr(cache + 15));
}

TEST(StoreTest, TheMetadataCacheMakesRoomForRecordsCommittedBeforeTheOpen) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(SaveTensors(**store, 40000).ok());
  }
  // Records of some 4 MB each.
  EXPECT_GT(LoggedMetaCacheMiB(dir.path(), 2), 12.0);
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(SaveBytes(**store, std::string(100, 'x'), 1).ok());
  // This handle committed records of a few hundred bytes; the store's other
  // two checkpoints' records still fit.
  const uint64_t live = LiveTableBytes(dir.path(), "meta");
  EXPECT_GT(live, 2 * 4'000'000u);
  // (The LOG gives a tenth of a MiB.)
  EXPECT_GE(LoggedMetaCacheMiB(dir.path(), 3), live / 1048576.0 - 0.05);
}

// A handle that never commits (here a read-only one) sizes its metadata cache
// at each open, as a committing one does at each commit: to the live records,
// within the least and the most, so that the blocks of record files deleted
// since do not pile up in it.
TEST(StoreTest, EveryOpenSizesTheMetadataCacheToTheLiveRecords) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ASSERT_TRUE(SaveBytes(**writer, "abcd", 1).ok());
  StoreOptions read_only;
  read_only.read_only = true;
  auto reader = Store::Open(dir.path(), read_only);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto& impl = dynamic_cast<StoreImpl&>(**reader);
  EXPECT_EQ(impl.MetaCacheCapacity(), kMinMetaCacheBytes);
  // Three checkpoints of some 4 MB of records each.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SaveTensors(**writer, 40000).ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  const uint64_t live = LiveTableBytes(dir.path(), "meta");
  EXPECT_GT(live, 3 * 4'000'000u);
  EXPECT_GE(impl.MetaCacheCapacity(), live);
  ASSERT_TRUE((*reader)->List().ok());  // their main records, cached
  for (int64_t id = 2; id <= 4; ++id) ASSERT_TRUE((*writer)->Delete(id).ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  EXPECT_EQ(impl.MetaCacheCapacity(), kMinMetaCacheBytes);
  auto listed = (*reader)->List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->size(), 1u);
  // A released handle reports no capacity while it is closed.
  (*reader)->Release();
  EXPECT_EQ(impl.MetaCacheCapacity(), 0u);
}

// A handle's first commit has room for its records in the metadata cache when
// it reads them back, beside the records the open read: a new handle's cache
// is sized for the live records only until then.
TEST(StoreTest, AFirstCommitsRecordsJoinTheCachedOnesWithoutEvictingThem) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(SaveTensors(**store, 40000).ok());
  }
  const uint64_t live_before = LiveTableBytes(dir.path(), "meta");
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto& impl = dynamic_cast<StoreImpl&>(**store);
  ASSERT_TRUE((*store)->List().ok());
  const size_t before = impl.MetaCacheUsage();
  EXPECT_GT(before, live_before / 2);  // the open read every record
  ASSERT_TRUE(SaveTensors(**store, 40000).ok());
  // The new records' blocks (their table file's bytes, less its index and
  // footer) joined the others.
  const uint64_t added = LiveTableBytes(dir.path(), "meta") - live_before;
  EXPECT_GT(impl.MetaCacheUsage(), before + added * 9 / 10)
      << before << " cached before, " << added << " committed";
}

// An open loads table files with a thread for each 4 of the first 16 (the
// most RocksDB loads at an open): a store of a few files starts no thread for
// them, where RocksDB's default started 15 for each column family.
TEST(StoreTest, AnOpenLoadsTableFilesWithAThreadForEachFourOfTheFirstSixteen) {
  EXPECT_EQ(FileOpeningThreads(0), 1);
  EXPECT_EQ(FileOpeningThreads(7), 1);
  EXPECT_EQ(FileOpeningThreads(8), 2);
  EXPECT_EQ(FileOpeningThreads(16), 4);
  EXPECT_EQ(FileOpeningThreads(100000), 4);
  TempDir dir;
  // What the latest open passed to RocksDB, from the options file it wrote
  // (OPTIONS-<number>, the highest number the latest).
  auto options = [&] {
    std::string newest, text;
    for (const auto& file : std::filesystem::directory_iterator(dir.path())) {
      const std::string name = file.path().filename().string();
      if (!name.starts_with("OPTIONS-")) continue;
      const bool later = name.size() != newest.size()
                             ? name.size() > newest.size()
                             : name > newest;
      if (!later) continue;
      newest = name;
      std::ifstream in(file.path());
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    return text;
  };
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_NE(options().find("max_file_opening_threads=1\n"), std::string::npos)
        << options();
    // Three writers' chunk files and a metadata file a checkpoint.
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(SaveBytes(**store, std::string(3000, 'a' + i), 3).ok());
  }
  size_t tables = 0;  // the database's, in the store's directory
  for (const auto& file : std::filesystem::directory_iterator(dir.path()))
    tables += file.path().extension() == ".sst";
  ASSERT_GE(tables, 8u);
  ASSERT_TRUE(Store::Open(dir.path(), {}).ok());
  const std::string threads =
      "max_file_opening_threads=" + std::to_string(FileOpeningThreads(tables)) +
      "\n";
  EXPECT_NE(options().find(threads), std::string::npos)
      << tables << " table files; " << options();
}

TEST(StoreTest, TheMetadataCacheHoldsTheLiveRecordsAndTwoMoreCommits) {
  constexpr size_t kMiB = size_t{1} << 20;
  // Two kept checkpoints of 2.2 MB of records (10,000 tensors), and two more.
  EXPECT_EQ(MetaCacheBytesFor(2 * 2'200'000, 2'200'000), 4 * 2'200'000u);
  // Small records: the least; many or large ones: the most.
  EXPECT_EQ(MetaCacheBytesFor(3000, 1000), kMinMetaCacheBytes);
  EXPECT_EQ(MetaCacheBytesFor(0, 0), kMinMetaCacheBytes);
  EXPECT_EQ(MetaCacheBytesFor(100 * kMiB, 2 * kMiB), kMetaCacheBytes);
  EXPECT_EQ(MetaCacheBytesFor(kMiB, 200 * kMiB), kMetaCacheBytes);
  EXPECT_EQ(MetaCacheBytesFor(UINT64_MAX, SIZE_MAX), kMetaCacheBytes);
  EXPECT_EQ(MetaCacheBytesFor(UINT64_MAX - 1, 1), kMetaCacheBytes);
  EXPECT_EQ(MetaCacheBytesFor(1, SIZE_MAX / 2 + 1), kMetaCacheBytes);
  for (uint64_t live = 0; live < 80 * kMiB; live = live * 3 + 1000) {
    for (size_t bytes = 1000; bytes < 64 * kMiB; bytes *= 3) {
      const size_t cache = MetaCacheBytesFor(live, bytes);
      EXPECT_GE(cache, kMinMetaCacheBytes);
      EXPECT_LE(cache, kMetaCacheBytes);
      // Never less than the live records and two commits when they fit.
      if (live + 2 * bytes <= kMetaCacheBytes) {
        EXPECT_GE(cache, live + 2 * bytes) << live << " live, " << bytes;
      }
    }
  }
}

// The ids (and steps) a listing of `store` gives; "error: ..." when it fails.
std::string Listed(Store& store) {
  Result<std::vector<CheckpointInfo>> all = store.List();
  if (!all.ok()) return "error: " + all.status().ToString();
  std::string out;
  for (const CheckpointInfo& info : *all) {
    out += std::to_string(info.id) + "@" +
           (info.step ? std::to_string(*info.step) : "-") +
           (info.damage.empty() ? "" : " damaged") + " ";
  }
  return out;
}

// What a handle opened now lists: read from the disk, not from what the
// handle under test keeps.
std::string ListedByANewHandle(const std::string& dir) {
  auto reader = Store::Open(dir, {.read_only = true});
  if (!reader.ok()) return "error: " + reader.status().ToString();
  return Listed(**reader);
}

TEST(StoreTest, AHandleWalksTheRecordsOnceThenKeepsTheirIdsAndInfos) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(SaveTensors(**store, 50).ok());
  }
  auto opened = Store::Open(dir.path(), {});
  ASSERT_TRUE(opened.ok());
  auto& store = static_cast<StoreImpl&>(**opened);
  const std::string before = Listed(store);
  EXPECT_EQ(before, ListedByANewHandle(dir.path()));
  const uint64_t walks = store.RecordWalks();
  EXPECT_GE(walks, 1u);
  // Saves (each asks for the next id and commits) and deletes, with listings
  // between them: the handle keeps the ids and infos current itself.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(SaveTensors(store, 50).ok());
    EXPECT_EQ(Listed(store), ListedByANewHandle(dir.path()));
    auto all = store.List();
    ASSERT_TRUE(all.ok());
    ASSERT_TRUE(
        store.Delete(all->front().id, FileRemoval::kBeforeReturning).ok());
    EXPECT_EQ(Listed(store), ListedByANewHandle(dir.path()));
    EXPECT_TRUE(store.NextCheckpointId().ok());
  }
  EXPECT_EQ(store.RecordWalks(), walks);
  EXPECT_NE(Listed(store), before);
}

// A commit or a delete that fails at file operation n (of the first 60 that
// change the disk) leaves the handle listing what a new handle lists.
void ExpectListingsAfterFailures(bool deleting) {
  for (int64_t n = 1; n <= 60; ++n) {
    TempDir dir;
    auto faults = std::make_shared<FaultInjector>();
    auto opened = Store::Open(dir.path(), {.file_system_hooks = faults});
    ASSERT_TRUE(opened.ok());
    Store& store = **opened;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(SaveTensors(store, 20).ok());
    const std::string before = Listed(store);  // the ids and infos are kept
    faults->Arm({.nth = n, .ops = kMutatingFileOps});
    Status s = deleting ? store.Delete(2, FileRemoval::kBeforeReturning)
                        : SaveTensors(store, 20);
    faults->Disarm();
    const std::string truth = ListedByANewHandle(dir.path());
    EXPECT_EQ(Listed(store), truth)
        << (deleting ? "delete" : "commit") << " failing at mutating call " << n
        << ": " << s.ToString() << "; before: " << before;
    // And once more after a save that succeeds.
    if (SaveTensors(store, 20).ok()) {
      EXPECT_EQ(Listed(store), ListedByANewHandle(dir.path())) << n;
    }
  }
}

TEST(StoreTest, ACommitThatFailsAnywhereLeavesTheListingAsOnDisk) {
  ExpectListingsAfterFailures(false);
}

TEST(StoreTest, ADeleteThatFailsAnywhereLeavesTheListingAsOnDisk) {
  ExpectListingsAfterFailures(true);
}

}  // namespace
}  // namespace ckptdb::storage
