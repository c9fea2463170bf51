// What happens to checkpoints after their save, across ranks: incremental
// saves sharing unchanged chunks, deletes by hand and by the retention policy.
// Built twice, like multirank_scenarios.cc (threads and mpirun).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "ckptdb/db.h"
#include "ckptdb/file_system_hooks.h"
#include "tests/testing/group.h"
#include "tests/testing/ranks.h"

namespace ckptdb {
namespace {

using testing::GlobalTensor;
using testing::MaxRanks;
using testing::OpenRank;
using testing::OwnedShard;
using testing::Part;
using testing::RunRanks;
using testing::ShardOf;
using testing::SharedTempDir;
using testing::TargetOf;

// Incremental saves on 3 ranks: each writer compares its chunks with the
// earlier checkpoints' (rank 0 from its last commits, the others from their
// own chunks of the last saves); every rank gets the same bytes written and
// references, and after the holders are deleted every rank loads the whole
// checkpoint.
TEST(MultiRankTest, IncrementalSavesShareUnchangedChunksOnEveryRank) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {96, 64}, 51);
  const GlobalTensor v1(DType::kFloat32, {96, 64}, 52);
  const GlobalTensor v2(DType::kFloat32, {96, 64}, 53);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    Options options;
    options.max_chunk_bytes = 4096;
    auto db = OpenRank(dir.path(), comm, options);
    ASSERT_NE(db, nullptr);
    auto [b, e] = Part(96, rank, 3);
    OwnedShard ws = ShardOf(w, {b, 0}, {e - b, 64});
    OwnedShard vs1 = ShardOf(v1, {b, 0}, {e - b, 64});
    OwnedShard vs2 = ShardOf(v2, {b, 0}, {e - b, 64});
    for (int step = 1; step <= 3; ++step) {
      StateDict sd;
      sd.Set("w", ws.View(w));
      sd.Set("v", step == 2 ? vs2.View(v2) : vs1.View(v1));
      auto info = db->Save(sd, {.step = step});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      const int64_t tensor_bytes = 96 * 64 * 4;
      // Step 3 has v of step 1 again: it shares step 1's bytes, which the
      // ranks compare with too (Options::incremental_depth).
      EXPECT_EQ(info->nbytes_written, step == 1   ? 2 * tensor_bytes
                                      : step == 2 ? tensor_bytes
                                                  : 0)
          << "rank " << rank << " step " << step;
      EXPECT_EQ(info->references, step == 1   ? std::vector<int64_t>{}
                                  : step == 2 ? std::vector<int64_t>{1}
                                              : std::vector<int64_t>{1})
          << "rank " << rank << " step " << step;
    }
    EXPECT_TRUE(db->Delete(CheckpointSelector::Step(1)).ok());
    EXPECT_TRUE(db->Delete(CheckpointSelector::Step(2)).ok());
    OwnedShard wt = TargetOf(w, {0, 0}, {96, 64});
    OwnedShard vt = TargetOf(v1, {0, 0}, {96, 64});
    StateDict want;
    want.Set("w", wt.View(w));
    want.Set("v", vt.View(v1));
    auto loaded = db->Load(want, CheckpointSelector::Step(3), {});
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(wt.bytes, w.bytes) << "rank " << rank;
    EXPECT_EQ(vt.bytes, v1.bytes) << "rank " << rank;
    EXPECT_TRUE(db->Verify(CheckpointSelector::Step(3)).ok());
  });
}

// Ranks that save other chunks than last time (here: the shards rotate by one
// rank) compare them with the previous record read from the store, whichever
// rank wrote them: an unchanged state writes nothing, on every rank, and loads
// whole after the checkpoint that holds the bytes is deleted.
TEST(MultiRankTest, IncrementalSavesShareChunksThatMovedToAnotherRank) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {96, 64}, 71);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    Options options;
    options.max_chunk_bytes = 4096;
    auto db = OpenRank(dir.path(), comm, options);
    ASSERT_NE(db, nullptr);
    for (int step = 1; step <= 3; ++step) {
      auto [b, e] = Part(96, (rank + step) % 3, 3);
      OwnedShard ws = ShardOf(w, {b, 0}, {e - b, 64});
      StateDict sd;
      sd.Set("w", ws.View(w));
      auto info = db->Save(sd, {.step = step});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(info->nbytes_written, step == 1 ? 96 * 64 * 4 : 0)
          << "rank " << rank << " step " << step;
      EXPECT_EQ(info->references,
                step == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{1})
          << "rank " << rank << " step " << step;
    }
    EXPECT_TRUE(db->Delete(CheckpointSelector::Step(1)).ok());
    OwnedShard wt = TargetOf(w, {0, 0}, {96, 64});
    StateDict want;
    want.Set("w", wt.View(w));
    auto loaded = db->Load(want, CheckpointSelector::Step(3), {});
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(wt.bytes, w.bytes) << "rank " << rank;
    EXPECT_TRUE(db->Verify(CheckpointSelector::Step(3)).ok());
  });
}

// Files under `dir` this process holds open although they were deleted.
int DeletedFilesHeldOpen(const std::string& path) {
  int held = 0;
  std::error_code ec;
  const std::string dir = std::filesystem::canonical(path, ec).string();
  for (const auto& fd :
       std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code link_ec;
    const std::string target =
        std::filesystem::read_symlink(fd, link_ec).string();
    const std::string deleted = " (deleted)";
    if (!link_ec && target.rfind(dir, 0) == 0 &&
        target.size() > deleted.size() &&
        target.compare(target.size() - deleted.size(), deleted.size(),
                       deleted) == 0) {
      ++held;
    }
  }
  return held;
}

// Once a delete (explicit, or by the retention policy after a save, also an
// asynchronous one) returns, no rank holds the deleted checkpoint's files
// open: their space is free, though every rank had read them through its own
// handle, chunks of 128 KiB straight from their files.
TEST(MultiRankTest, NoRankHoldsTheFilesOfDeletedCheckpoints) {
  if (MaxRanks() < 2) GTEST_SKIP() << "needs 2 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {1024, 256}, 61);
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    Options options;
    options.max_chunk_bytes = 128 << 10;
    options.keep_last = 2;
    options.incremental = false;
    auto db = OpenRank(dir.path(), comm, options);
    ASSERT_NE(db, nullptr);
    auto [b, e] = Part(1024, rank, 2);
    OwnedShard ws = ShardOf(w, {b, 0}, {e - b, 256});
    // Every rank reads all of w: its handle opens every table file.
    OwnedShard whole = TargetOf(w, {0, 0}, {1024, 256});
    StateDict want;
    want.Set("w", whole.View(w));
    auto save = [&](int64_t step) {
      StateDict sd;
      sd.Set("w", ws.View(w));
      EXPECT_TRUE(db->Save(sd, {.step = step}).ok()) << "rank " << rank;
    };
    auto read_all = [&](int64_t step) {
      EXPECT_TRUE(db->Load(want, CheckpointSelector::Step(step), {}).ok())
          << "rank " << rank;
    };
    save(1);
    read_all(1);
    save(2);
    read_all(2);
    // keep_last 2: step 1 goes, in the background.
    {
      StateDict sd;
      sd.Set("w", ws.View(w));
      auto pending = db->SaveAsync(sd, {.step = 3});
      EXPECT_TRUE(pending.ok()) << pending.status().ToString();
      if (pending.ok()) {
        EXPECT_TRUE((*pending)->Wait().ok()) << "rank " << rank;
      }
    }
    EXPECT_TRUE(comm->Barrier().ok());
    EXPECT_EQ(DeletedFilesHeldOpen(dir.path()), 0)
        << "rank " << rank << ", after the retention policy deleted step 1";
    EXPECT_TRUE(comm->Barrier().ok());
    read_all(3);
    EXPECT_TRUE(db->Delete(CheckpointSelector::Step(2)).ok());
    EXPECT_TRUE(comm->Barrier().ok());
    EXPECT_EQ(DeletedFilesHeldOpen(dir.path()), 0)
        << "rank " << rank << ", after deleting step 2";
    EXPECT_TRUE(comm->Barrier().ok());
    read_all(3);
    EXPECT_EQ(whole.bytes, w.bytes) << "rank " << rank;
  });
}

// Counts the opens of the store's MANIFEST files: each open of the
// database reads its MANIFEST.
class ManifestOpens : public FileSystemHooks {
 public:
  int BeforeOperation(FileOp op, std::string_view path, uint64_t) override {
    if (op == FileOp::kOpen && path.find("/MANIFEST-") != std::string::npos)
      ++opens_;
    return 0;
  }
  int opens() const { return opens_.load(); }

 private:
  std::atomic<int> opens_{0};
};

// In a loop of saves with a retention policy, the ranks other than 0 let go
// of the deleted checkpoints' files by closing their view of the store, and
// do not open it again on the saves' path: their saves only write staged
// files. A later load opens it again and sees the latest checkpoint.
TEST(MultiRankTest, SavesWithRetentionDoNotReopenTheStoreOnOtherRanks) {
  if (MaxRanks() < 2) GTEST_SKIP() << "needs 2 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {512, 64}, 67);
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto opens = std::make_shared<ManifestOpens>();
    Options options;
    options.keep_last = 1;
    options.file_system_hooks = opens;
    auto db = OpenRank(dir.path(), comm, options);
    ASSERT_NE(db, nullptr);
    auto [b, e] = Part(512, rank, 2);
    OwnedShard ws = ShardOf(w, {b, 0}, {e - b, 64});
    auto save = [&](int64_t step) {
      StateDict sd;
      sd.Set("w", ws.View(w));
      EXPECT_TRUE(db->Save(sd, {.step = step}).ok()) << "rank " << rank;
    };
    save(1);
    save(2);  // the first delete
    const int before = opens->opens();
    for (int64_t step = 3; step <= 6; ++step) save(step);
    if (rank != 0) {
      EXPECT_EQ(opens->opens(), before)
          << "rank " << rank << " opened the store during the saves";
    }
    EXPECT_TRUE(comm->Barrier().ok());
    EXPECT_EQ(DeletedFilesHeldOpen(dir.path()), 0) << "rank " << rank;
    EXPECT_TRUE(comm->Barrier().ok());
    OwnedShard whole = TargetOf(w, {0, 0}, {512, 64});
    StateDict want;
    want.Set("w", whole.View(w));
    auto loaded = db->Load(want, CheckpointSelector::Latest(), {});
    EXPECT_TRUE(loaded.ok())
        << "rank " << rank << ": " << loaded.status().ToString();
    EXPECT_EQ(whole.bytes, w.bytes) << "rank " << rank;
    auto listed = db->ListCheckpoints();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    ASSERT_EQ(listed->size(), 1u) << "rank " << rank;
    EXPECT_EQ(listed->front().step, 6) << "rank " << rank;
  });
}

}  // namespace
}  // namespace ckptdb
