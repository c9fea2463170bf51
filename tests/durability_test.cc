// Durability under failed file operations, through the public API and the
// FaultInjector hook: failed syncs and writes lose nothing committed, records
// never live only in the write-ahead log, failed info-log writes never abort,
// and deletions are never held back for good. (Bad arguments are covered by
// bindings/python/tests/test_arguments.py, damaged records by
// storage/metadata_codec_test.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/db.h"
#include "tests/testing/child_process.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;
using testing::FaultInjector;
using testing::TempDir;

class Durability : public ::testing::Test {
 protected:
  Durability() {
    options_.file_system_hooks = faults_;
    for (int i = 0; i < 3; ++i) {
      values_[i].resize(4096);
      std::iota(values_[i].begin(), values_[i].end(), 1000.0f * i);
    }
  }
  Result<CheckpointInfo> Save(DB& db, int i) {
    StateDict sd;
    sd.Set("w",
           TensorView::Whole(values_[i].data(), DType::kFloat32, {64, 64}));
    // A chunk small enough to lie in its chunk table, not a value file.
    sd.Set("b", TensorView::Whole(values_[i].data(), DType::kFloat32, {16}));
    return db.Save(sd, {.step = i});
  }
  // Checkpoint with step `i` loads bit-exactly from a fresh, fault-free open.
  void ExpectIntact(const std::string& dir, std::vector<int> steps) {
    faults_->Disarm();
    for (bool read_only : {true, false}) {
      Options options;
      options.read_only = read_only;
      auto db = DB::Open(options, dir);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      ASSERT_EQ((*db)->ListCheckpoints()->size(), steps.size());
      for (int i : steps) {
        std::vector<float> got(4096);
        StateDict sd;
        sd.Set("w", TensorView::Whole(got.data(), DType::kFloat32, {64, 64}));
        auto loaded = (*db)->Load(sd, CheckpointSelector::Step(i), {});
        ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
        EXPECT_EQ(got, values_[i]);
      }
    }
  }
  // A store of checkpoints with steps 0-2, each in chunk tables of its own,
  // whose CURRENT is gone: a read-write open rebuilds its database.
  void MakeStoreToRebuild(const std::string& dir) {
    Options options;
    options.incremental = false;
    auto db = DB::Open(options, dir);
    ASSERT_TRUE(db.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(Save(**db, i).ok());
    db->reset();
    fs::remove(fs::path(dir) / "CURRENT");
  }
  // Before the read-write open that finishes a rebuild cut short (`what`), a
  // read-only handle reads every checkpoint whole, the small chunks that
  // lie in the chunk tables (some still staged for the rebuild) included, and
  // its check finds only what a read-write open repairs.
  void ExpectReadOnlyReadsEveryCheckpoint(const std::string& dir,
                                          const std::string& what) {
    Options read_only;
    read_only.read_only = true;
    auto db = DB::Open(read_only, dir);
    ASSERT_TRUE(db.ok()) << what << ": " << db.status().ToString();
    ASSERT_EQ((*db)->ListCheckpoints()->size(), 3u) << what;
    for (int i = 0; i < 3; ++i) {
      std::vector<float> got(4096), small(16);
      StateDict sd;
      sd.Set("w", TensorView::Whole(got.data(), DType::kFloat32, {64, 64}));
      sd.Set("b", TensorView::Whole(small.data(), DType::kFloat32, {16}));
      auto loaded = (*db)->Load(sd, CheckpointSelector::Step(i), {});
      ASSERT_TRUE(loaded.ok())
          << what << ", step " << i << ": " << loaded.status().ToString();
      EXPECT_EQ(got, values_[i]) << what;
      EXPECT_TRUE(std::equal(small.begin(), small.end(), values_[i].begin()))
          << what;
      auto verified = (*db)->Verify(CheckpointSelector::Step(i), {});
      ASSERT_TRUE(verified.ok()) << verified.status().ToString();
      EXPECT_TRUE(verified->ok())
          << what << ", step " << i << ": " << verified->problems.front();
    }
    auto check = (*db)->CheckStore();
    ASSERT_TRUE(check.ok()) << what << ": " << check.status().ToString();
    EXPECT_TRUE(check->unaccounted_chunk_ids.empty()) << what;
    EXPECT_TRUE(check->lost_metadata.empty()) << what;
    EXPECT_TRUE(check->damaged_chunk_tables.empty()) << what;
  }
  // After a rebuilding open that did not finish (`what`): the next read-write
  // open does, every checkpoint verifies and loads, and no chunk table is set
  // aside (only the metadata's own tables go there, replaced by the copies; a
  // chunk table holds a 16 KiB chunk).
  void ExpectRebuildFinished(const std::string& dir, const std::string& what) {
    ExpectReadOnlyReadsEveryCheckpoint(dir, what);
    {
      auto reopened = DB::Open(Options(), dir);
      ASSERT_TRUE(reopened.ok())
          << what << ": " << reopened.status().ToString();
      auto check = (*reopened)->CheckStore();
      ASSERT_TRUE(check.ok()) << check.status().ToString();
      EXPECT_TRUE(check->ok()) << what;
      for (int i = 0; i < 3; ++i) {
        auto verified = (*reopened)->Verify(CheckpointSelector::Step(i), {});
        ASSERT_TRUE(verified.ok()) << verified.status().ToString();
        EXPECT_TRUE(verified->ok()) << what << ", step " << i;
      }
    }
    for (const auto& table : testing::FilesUnder(dir + "/damaged", {".sst"}))
      EXPECT_LT(table.size, 16384u) << what << ": " << table.path;
    ExpectIntact(dir, {0, 1, 2});
  }
  TempDir tmp_;
  std::shared_ptr<FaultInjector> faults_ = std::make_shared<FaultInjector>();
  Options options_;
  std::vector<float> values_[3];
};

// 1. A failed MANIFEST sync while the staged chunks are ingested made every
// later open fail (the clean-up deleted a file the MANIFEST named).
TEST_F(Durability, AFailedManifestSyncDuringIngestionLosesNothing) {
  const std::string dir = tmp_.Sub("s");
  auto db = DB::Open(options_, dir);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(Save(**db, 0).ok());
  faults_->Arm({.nth = 1,
                .ops = FileOpMask(FileOp::kSync),
                .path_contains = "MANIFEST"});
  auto failed = Save(**db, 1);
  ASSERT_FALSE(faults_->injected().empty());
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("MANIFEST"), std::string::npos)
      << failed.status().ToString();
  faults_->Disarm();
  ASSERT_TRUE(Save(**db, 2).ok());
  db->reset();
  ExpectIntact(dir, {0, 2});
}

// 2. A failed write to RocksDB's info LOG aborted the process.
TEST_F(Durability, FailedInfoLogWritesNeverAbort) {
  const std::string dir = tmp_.Sub("s");
  faults_->Arm({.nth = 1,
                .from_nth_on = true,
                .ops = FileOpMask(FileOp::kWrite) | FileOpMask(FileOp::kSync),
                .path_contains = "/LOG",
                .error = ENOSPC});
  {
    auto db = DB::Open(options_, dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE(Save(**db, 0).ok());
    ASSERT_TRUE(Save(**db, 1).ok());
    ASSERT_TRUE((*db)->Delete(CheckpointSelector::Step(0)).ok());
  }
  EXPECT_FALSE(faults_->injected().empty());
  ExpectIntact(dir, {1});
}

// 3. After a clean close the commit record lived only in the write-ahead log,
// where one flipped bit dropped it silently.
TEST_F(Durability, RecordsNeverLiveOnlyInTheWriteAheadLog) {
  const std::string dir = tmp_.Sub("s");
  {
    auto db = DB::Open(options_, dir);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(Save(**db, 0).ok());
    ASSERT_TRUE(Save(**db, 1).ok());
    // Even before the close.
    for (const auto& log : ckptdb::testing::FilesUnder(dir, {".log"}))
      EXPECT_EQ(log.size, 0u) << log.path;
  }
  // And a write-ahead log with anything in it is refused, not skipped: a
  // read-only open reads through a rebuild of its own and reports the log; a
  // read-write open rebuilds the database from the copies of the records,
  // keeping the log aside, and loses nothing.
  for (const auto& log : ckptdb::testing::FilesUnder(dir, {".log"}))
    std::ofstream(log.path, std::ios::app) << "garbage that is no record";
  Options read_only;
  read_only.read_only = true;
  {
    auto db = DB::Open(read_only, dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    auto report = (*db)->CheckStore();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ASSERT_EQ(report->repairable_metadata.size(), 1u);
    EXPECT_NE(report->repairable_metadata[0].find("write-ahead log"),
              std::string::npos)
        << report->repairable_metadata[0];
    EXPECT_NE(report->repairable_metadata[0].find("a read-write open rebuilds"),
              std::string::npos)
        << report->repairable_metadata[0];
    for (int i : {0, 1}) {
      std::vector<float> got(4096);
      StateDict sd;
      sd.Set("w", TensorView::Whole(got.data(), DType::kFloat32, {64, 64}));
      ASSERT_TRUE((*db)->Load(sd, CheckpointSelector::Step(i), {}).ok());
      EXPECT_EQ(got, values_[i]);
    }
  }
  {
    auto rebuilt = DB::Open(Options(), dir);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
  }
  ExpectIntact(dir, {0, 1});
  EXPECT_FALSE(ckptdb::testing::FilesUnder(dir + "/damaged", {".log"}).empty());
}

// 5. The save reported an error, yet its checkpoint was committed. Now an
// error after the record reached the disk is found out by reopening: the
// checkpoint is returned, and the handle keeps working.
TEST_F(Durability, AFailureAfterTheRecordIsDurableReturnsTheCheckpoint) {
  const std::string dir = tmp_.Sub("s");
  auto db = DB::Open(options_, dir);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(Save(**db, 0).ok());
  faults_->Arm({.nth = 1, .path_contains = "CKPTDB_JOURNAL"});
  auto saved = Save(**db, 1);
  ASSERT_FALSE(faults_->injected().empty());
  EXPECT_TRUE(saved.ok()) << saved.status().ToString();
  faults_->Disarm();
  auto list = (*db)->ListCheckpoints();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
  ASSERT_TRUE(Save(**db, 2).ok());
  db->reset();
  ExpectIntact(dir, {0, 1, 2});
}

// Bytes of the store's table and value files.
uint64_t TableBytes(const std::string& dir) {
  return ckptdb::testing::BytesUnder(dir, {".sst", ".val"});
}

// A failed sync of a staged file (the save fails) left the handle's file
// system refusing deletions for good: every later save and retention delete
// returned OK while the table files of deleted checkpoints stayed on disk.
TEST_F(Durability, AFailedStagedWriteDoesNotKeepDeletedFilesOnDisk) {
  const std::string dir = tmp_.Sub("s");
  options_.keep_last = 1;
  options_.incremental = false;
  auto db = DB::Open(options_, dir);
  ASSERT_TRUE(db.ok());
  // 4 MiB: the chunk files outweigh the metadata's tables.
  std::vector<float> w(1 << 20, 1.0f);
  StateDict sd;
  sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {1 << 20}));
  ASSERT_TRUE((*db)->Save(sd, {.step = 0}).ok());
  faults_->Arm(
      {.nth = 1, .ops = FileOpMask(FileOp::kSync), .path_contains = "staging"});
  EXPECT_FALSE((*db)->Save(sd, {.step = 1}).ok());
  ASSERT_FALSE(faults_->injected().empty());
  faults_->Disarm();
  for (int step = 1; step <= 5; ++step) {
    ASSERT_TRUE((*db)->Save(sd, {.step = step}).ok());
  }
  EXPECT_EQ((*db)->ListCheckpoints()->size(), 1u);
  // Once the handle is closed (the deleted checkpoints' value files go on the
  // store's thread, which the close waits for): one checkpoint's chunks, and
  // well under a second one's.
  db->reset();
  const uint64_t state = w.size() * sizeof(float);
  EXPECT_LT(TableBytes(dir), state + state / 2)
      << "the table files of deleted checkpoints stayed";
}

// A rank other than 0 whose handle failed to re-open after a retention delete
// (a MANIFEST it could not open) made every later save fail on every rank until
// that rank happened to make a local call: staging a file did not re-open.
TEST_F(Durability, AFailedReopenAfterADeleteDoesNotFailLaterSaves) {
  const std::string dir = tmp_.Sub("s");
  auto comms = InProcessCommunicators(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Options options;
      options.keep_last = 1;
      options.incremental = false;
      // Rank 1's own file operations fail on demand.
      if (rank == 1) options.file_system_hooks = faults_;
      auto db = DB::Open(options, dir, comms[rank]);
      EXPECT_TRUE(db.ok()) << db.status().ToString();
      if (!db.ok()) return;
      std::vector<float> w(64 * 64, 1.0f + rank);
      StateDict sd;
      sd.Set("w", TensorView::Shard(w.data(), DType::kFloat32, {64, 64},
                                    {128, 64}, {64 * rank, 0}));
      auto save = [&](int64_t step) {
        auto saved = (*db)->Save(sd, {.step = step});
        EXPECT_TRUE(saved.ok()) << "rank " << rank << ", step " << step << ": "
                                << saved.status().ToString();
      };
      save(1);
      save(2);
      EXPECT_TRUE(comms[rank]->Barrier().ok());
      if (rank == 1) {
        faults_->Arm({.nth = 1,
                      .from_nth_on = true,
                      .ops = FileOpMask(FileOp::kOpen),
                      .path_contains = "MANIFEST"});
      }
      // Its retention delete re-opens rank 1's handle, which fails.
      save(3);
      if (rank == 1) faults_->Disarm();
      save(4);
      save(5);
    });
  }
  for (auto& t : ranks) t.join();
  faults_->Disarm();
  auto db = DB::Open({}, dir);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto list = (*db)->ListCheckpoints();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().step, 5);
  std::vector<float> got(128 * 64);
  StateDict sd;
  sd.Set("w", TensorView::Whole(got.data(), DType::kFloat32, {128, 64}));
  ASSERT_TRUE((*db)->Load(sd, CheckpointSelector::Step(5), {}).ok());
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got.back(), 2.0f);
}

// The bytes of the file at `path`.
std::string FileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// Tensor `i` of rank `rank` and its key: small ones (their bytes inside the
// rank's chunk table) and a large one (in a value file, the table holding a
// pointer).
std::vector<float> RankTensor(int rank, int i) {
  std::vector<float> v(i < 6 ? 100 : 5000);
  std::iota(v.begin(), v.end(), 1000.0f * rank + 10.0f * i);
  return v;
}
std::string RankKey(int rank, int i) {
  return "r" + std::to_string(rank) + ".t" + std::to_string(i);
}
constexpr int kRankTensors = 7;

// Saves step 1 of the store at `dir` from two in-process ranks, each its own
// RankTensor tensors.
void SaveTwoRanksOfSmallAndLargeTensors(const std::string& dir) {
  auto comms = InProcessCommunicators(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto db = DB::Open({}, dir, comms[rank]);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      std::vector<std::vector<float>> held;
      StateDict sd;
      for (int i = 0; i < kRankTensors; ++i) {
        held.push_back(RankTensor(rank, i));
        sd.Set(RankKey(rank, i),
               TensorView::Whole(held.back().data(), DType::kFloat32,
                                 {static_cast<int64_t>(held.back().size())}));
      }
      ASSERT_TRUE((*db)->Save(sd, {.step = 1}).ok());
    });
  }
  for (auto& t : ranks) t.join();
}

// Two ranks' chunk tables of one checkpoint, both damaged (a rebuild sets them
// aside); a read-write open writes the tables again from the copy of their
// chunk locations. When one of them cannot be written (no room for it), the
// other is, the copy keeps the locations of the one left aside, every tensor
// reads back through them, and the next open writes it.
TEST_F(Durability, AChunkTableThatCannotBeWrittenAgainKeepsItsLocations) {
  const std::string dir = tmp_.Sub("s");
  ASSERT_NO_FATAL_FAILURE(SaveTwoRanksOfSmallAndLargeTensors(dir));
  // Each rank's table: the one holding its first tensor's bytes; a flipped
  // last byte (the footer's magic number) makes it unreadable.
  std::vector<fs::path> tables;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<float> first = RankTensor(rank, 0);
    const std::string needle(reinterpret_cast<const char*>(first.data()),
                             first.size() * sizeof(float));
    for (const auto& file : testing::FilesUnder(dir, {".sst"})) {
      if (FileBytes(file.path).find(needle) != std::string::npos)
        tables.push_back(file.path);
    }
    ASSERT_EQ(tables.size(), static_cast<size_t>(rank + 1));
    std::string bytes = FileBytes(tables.back());
    bytes.back() ^= 0x10;
    std::ofstream(tables.back(), std::ios::binary) << bytes;
  }
  auto expect_reads = [&](const std::string& ctx,
                          std::vector<std::string>* problems) {
    Options read_only;
    read_only.read_only = true;
    auto db = DB::Open(read_only, dir);
    ASSERT_TRUE(db.ok()) << ctx << ": " << db.status().ToString();
    for (int rank = 0; rank < 2; ++rank) {
      for (int i = 0; i < kRankTensors; ++i) {
        auto read = (*db)->Read(RankKey(rank, i), CheckpointSelector::Latest());
        ASSERT_TRUE(read.ok()) << ctx << ": " << read.status().ToString();
        const std::vector<float> want = RankTensor(rank, i);
        EXPECT_EQ(read->data.size(), want.size() * sizeof(float)) << ctx;
        EXPECT_EQ(std::memcmp(
                      read->data.data(), want.data(),
                      std::min(read->data.size(), want.size() * sizeof(float))),
                  0)
            << ctx << ": " << RankKey(rank, i);
      }
    }
    auto report = (*db)->Verify(CheckpointSelector::Latest(), {});
    ASSERT_TRUE(report.ok()) << ctx;
    *problems = report->problems;
  };
  // The second table's new file cannot be made: a full disk.
  faults_->Arm({.nth = 1,
                .from_nth_on = true,
                .ops = FileOpMask(FileOp::kOpen),
                .path_contains = "restored-1-1",
                .error = ENOSPC});
  {
    auto db = DB::Open(options_, dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
  }
  faults_->Disarm();
  EXPECT_NE(FileBytes(fs::path(dir) / "LOG").find("rewriting a chunk table"),
            std::string::npos);
  std::vector<std::string> problems;
  ASSERT_NO_FATAL_FAILURE(expect_reads("one table written again", &problems));
  // Rank 1's chunks read through the copy, rank 0's through the database.
  ASSERT_FALSE(problems.empty());
  for (const std::string& problem : problems) {
    EXPECT_NE(problem.find("'r1."), std::string::npos) << problem;
    EXPECT_NE(problem.find("read back through the copy"), std::string::npos)
        << problem;
  }
  {
    auto db = DB::Open(options_, dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
  }
  ASSERT_NO_FATAL_FAILURE(expect_reads("both written again", &problems));
  EXPECT_TRUE(problems.empty()) << problems.front();
}

// A rebuild of the database (CURRENT lost) cut short by a full disk, at any
// point, is finished by the next read-write open: every checkpoint loads and
// verifies, and no chunk table is set aside as damaged.
TEST_F(Durability, ARebuildCutShortByAFullDiskIsFinishedByTheNextOpen) {
  const std::string templ = tmp_.Sub("template");
  ASSERT_NO_FATAL_FAILURE(MakeStoreToRebuild(templ));
  int cut = 0;
  for (int64_t free = 0; free <= 96'000; free += 4'000) {
    const std::string dir = tmp_.Sub("free" + std::to_string(free));
    fs::copy(templ, dir, fs::copy_options::recursive);
    faults_->Arm({.free_bytes = free});
    const bool rebuilt = DB::Open(options_, dir).ok();
    faults_->Disarm();
    if (rebuilt) continue;  // room enough
    ++cut;
    ExpectRebuildFinished(dir, std::to_string(free) + " bytes free");
  }
  EXPECT_GE(cut, 3) << "too few of the quotas cut the rebuild short";
}

// Ends the process at the store's `nth` file operation (1-based), as a
// kill -9 would: no destructor, no flush.
class DieAt : public FileSystemHooks {
 public:
  explicit DieAt(int64_t nth) : nth_(nth) {}
  int BeforeOperation(FileOp, std::string_view, uint64_t) override {
    if (++count_ == nth_) ::_exit(9);
    return 0;
  }

 private:
  const int64_t nth_;
  std::atomic<int64_t> count_{0};
};

// A rebuild of the database (CURRENT lost) killed at any of its file
// operations is finished by the next read-write open: every checkpoint loads
// and verifies, and no chunk table is set aside as damaged.
TEST_F(Durability, ARebuildKilledAnywhereIsFinishedByTheNextOpen) {
  const std::string templ = tmp_.Sub("template");
  ASSERT_NO_FATAL_FAILURE(MakeStoreToRebuild(templ));
  // Every third operation: each costs two opens and a check (about 0.1 s).
  int killed = 0;
  for (int64_t nth = 1; nth < 3000; nth += 3) {
    const std::string dir = tmp_.Sub("kill" + std::to_string(nth));
    fs::copy(templ, dir, fs::copy_options::recursive);
    const std::optional<int> code = testing::ExitCodeOfChild([&] {
      Options options;
      options.file_system_hooks = std::make_shared<DieAt>(nth);
      return DB::Open(options, dir).ok() ? 0 : 1;
    });
    ASSERT_TRUE(code.has_value()) << nth << ": the open still ran after 60 s";
    if (*code == 0) break;  // the open ran to its end before its nth operation
    ASSERT_EQ(*code, 9) << nth << ": the open failed without being killed";
    ++killed;
    ExpectRebuildFinished(dir, "killed at operation " + std::to_string(nth));
    fs::remove_all(dir);
    if (HasFailure()) break;
  }
  std::printf("the rebuilding open was killed at %d of its operations\n",
              killed);
  EXPECT_GT(killed, 10);
}

}  // namespace
}  // namespace ckptdb
