// Deletes whose files go in the background: the delete returns with the
// checkpoint gone, the files follow, a failed removal is collected later, and
// each freed byte is reported once.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "storage/store.h"
#include "storage/store_testing.h"
#include "storage/value_files.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;
using ckptdb::testing::FaultInjector;
using ckptdb::testing::TempDir;
using testing::FilesWith;
using testing::Pattern;
using testing::ReadAll;
using testing::SaveBytes;

// A store at `dir` with `hooks`, holding two checkpoints of 256 KiB (a value
// file each) of Pattern(..., seed) and Pattern(..., seed + 1).
struct TwoCheckpoints {
  std::unique_ptr<Store> store;
  CheckpointMetadata first, second;
};
TwoCheckpoints OpenWithTwo(const std::string& dir,
                           std::shared_ptr<FileSystemHooks> hooks,
                           uint32_t seed) {
  TwoCheckpoints out;
  auto store = Store::Open(dir, {.file_system_hooks = std::move(hooks)});
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return out;
  out.store = std::move(*store);
  auto first = SaveBytes(*out.store, Pattern(256 << 10, seed), 1);
  auto second = SaveBytes(*out.store, Pattern(256 << 10, seed + 1), 1);
  EXPECT_TRUE(first.ok() && second.ok());
  if (!first.ok() || !second.ok()) {
    out.store.reset();
    return out;
  }
  out.first = std::move(*first);
  out.second = std::move(*second);
  return out;
}

// Holds each removal of a value file, or of a link to a deleted table file,
// until Release (or 30 s pass).
class HeldRemovals : public FileSystemHooks {
 public:
  int BeforeOperation(FileOp op, std::string_view path, uint64_t) override {
    if (op != FileOp::kDelete ||
        (!path.ends_with(".val") && path.find("/deleted-") == path.npos))
      return 0;
    std::unique_lock lock(mu_);
    ++held_;
    changed_.notify_all();
    changed_.wait_for(lock, std::chrono::seconds(30),
                      [&] { return released_; });
    return 0;
  }
  // Whether a removal reached the hooks within 30 s.
  bool WaitUntilHeld() {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(30),
                             [&] { return held_ > 0; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int held_ = 0;
  bool released_ = false;
};

// A delete with its files removed in the background returns with the
// checkpoint gone and its files still there (the value file, and the chunk
// table file under a name in the staging directory); the next save's start
// (NextCheckpointId) waits for them to go.
TEST(BackgroundDeleteTest, ABackgroundDeleteReturnsBeforeItsFilesGo) {
  TempDir dir;
  auto held = std::make_shared<HeldRemovals>();
  auto [store, first, second] = OpenWithTwo(dir.path(), held, 14);
  ASSERT_TRUE(store);
  const std::string values = ValueDirOf(dir.path(), first.info.id);
  ASSERT_EQ(FilesWith(values, ".val").first, 1);
  ASSERT_TRUE(store->Delete(first.info.id, FileRemoval::kInBackground).ok());
  ASSERT_TRUE(held->WaitUntilHeld());
  EXPECT_EQ(FilesWith(values, ".val").first, 1);
  const std::string staging = StagingDir(dir.path());
  EXPECT_GE(FilesWith(staging, ".sst").first, 1);
  auto listed = store->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().id, second.info.id);
  held->Release();
  ASSERT_TRUE(store->NextCheckpointId().ok());
  EXPECT_FALSE(fs::exists(values));
  EXPECT_EQ(FilesWith(staging, ".sst").first, 0);
  EXPECT_TRUE(store->Check()->unused_value_ids.empty());
  EXPECT_TRUE(ReadAll(*store, second) == Pattern(256 << 10, 15));
}

// A background removal that fails leaves the value files, which Check reports
// (once the removal is over) and the next save's start removes; so does a
// link to a deleted table file whose removal failed, and a read-write open
// after the handle's close (which waits for a removal under way).
TEST(BackgroundDeleteTest, AFailedBackgroundRemovalIsCollectedByTheNextSave) {
  TempDir dir;
  auto faults = std::make_shared<FaultInjector>();
  auto [store, first, second] = OpenWithTwo(dir.path(), faults, 16);
  ASSERT_TRUE(store);
  faults->Arm(
      {.nth = 1, .ops = FileOpMask(FileOp::kDelete), .path_contains = ".val"});
  ASSERT_TRUE(store->Delete(first.info.id, FileRemoval::kInBackground).ok());
  auto report = store->Check();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(faults->injected().size(), 1u);
  EXPECT_EQ(report->unused_value_ids, std::vector<int64_t>{first.info.id});
  faults->Disarm();
  ASSERT_TRUE(store->NextCheckpointId().ok());
  EXPECT_FALSE(fs::exists(ValueDirOf(dir.path(), first.info.id)));

  // A save (which makes the staging directory), then a delete of the
  // checkpoint before it whose link stays: collected by the next save's
  // start, and then by a read-write open.
  const std::string staging = StagingDir(dir.path());
  int64_t doomed = second.info.id;
  for (const bool by_open : {false, true}) {
    const std::string ctx = by_open ? "by the open" : "by the next save";
    auto saved = SaveBytes(*store, Pattern(256 << 10, by_open ? 19 : 18), 1);
    ASSERT_TRUE(saved.ok()) << ctx;
    faults->Arm({.nth = 1,
                 .ops = FileOpMask(FileOp::kDelete),
                 .path_contains = "/deleted-"});
    ASSERT_TRUE(store->Delete(doomed, FileRemoval::kInBackground).ok());
    ASSERT_TRUE(store->Check().ok()) << ctx;  // once the removal is over
    EXPECT_EQ(faults->injected().size(), 1u) << ctx;
    EXPECT_EQ(FilesWith(staging, ".sst").first, 1) << ctx;
    faults->Disarm();
    if (by_open) {
      store.reset();
      auto reopened = Store::Open(dir.path(), {});
      ASSERT_TRUE(reopened.ok());
      store = std::move(*reopened);
      EXPECT_FALSE(fs::exists(staging));
    } else {
      ASSERT_TRUE(store->NextCheckpointId().ok());
      EXPECT_EQ(FilesWith(staging, ".sst").first, 0) << ctx;
    }
    EXPECT_FALSE(fs::exists(ValueDirOf(dir.path(), doomed))) << ctx;
    doomed = saved->info.id;
  }
  EXPECT_EQ(store->List()->size(), 1u);
}

// Records the bytes each deletion reports freeing, by file name.
class FreedBytes : public FileSystemHooks {
 public:
  int BeforeOperation(FileOp, std::string_view, uint64_t) override { return 0; }
  void Freeing(std::string_view path, uint64_t bytes) override {
    std::lock_guard lock(mu_);
    const std::string name = fs::path(std::string(path)).filename().string();
    freed_[name] += bytes;
  }
  std::map<std::string, uint64_t> freed() {
    std::lock_guard lock(mu_);
    return freed_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, uint64_t> freed_;
};

// A background delete reports each byte it frees once: a chunk table file
// under its own name (RocksDB's unlink drops a second name, 0 bytes) and its
// link under staging/ (the last name, its size), and the value file.
TEST(BackgroundDeleteTest, ABackgroundDeleteReportsEachFreedByteOnce) {
  TempDir dir;
  auto freed = std::make_shared<FreedBytes>();
  auto [store, first, second] = OpenWithTwo(dir.path(), freed, 20);
  ASSERT_TRUE(store);
  std::map<std::string, uint64_t> sizes;  // the first checkpoint's files
  const std::set<std::string> before = [&] {
    std::set<std::string> names;
    for (const auto& f : ckptdb::testing::FilesUnder(dir.path(), {".sst"}))
      names.insert(fs::path(f.path).filename().string());
    return names;
  }();
  for (const auto& f : ckptdb::testing::FilesUnder(
           ValueDirOf(dir.path(), first.info.id), {".val"}))
    sizes[fs::path(f.path).filename().string()] = f.size;
  ASSERT_EQ(sizes.size(), 1u);
  const auto freed_before = freed->freed();
  ASSERT_TRUE(store->Delete(first.info.id, FileRemoval::kInBackground).ok());
  ASSERT_TRUE(store->NextCheckpointId().ok());
  std::map<std::string, uint64_t> by_delete = freed->freed();
  for (const auto& [name, bytes] : freed_before) by_delete[name] -= bytes;
  // The value file: its size, once.
  for (const auto& [name, size] : sizes) EXPECT_EQ(by_delete[name], size);
  // Each table the delete linked: 0 under its own name, its size (more than
  // 0) under the link's.
  int linked = 0;
  for (const auto& [name, bytes] : by_delete) {
    if (!name.starts_with(kDeletedTablePrefix)) continue;
    ++linked;
    const std::string table = name.substr(std::strlen(kDeletedTablePrefix));
    EXPECT_TRUE(before.contains(table)) << name;
    EXPECT_GT(bytes, 0u) << name;
    EXPECT_EQ(by_delete[table], 0u) << table;
  }
  EXPECT_GE(linked, 1);
}

}  // namespace
}  // namespace ckptdb::storage
