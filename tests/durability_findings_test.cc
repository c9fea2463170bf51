// The findings of the durability issue, one test each, through the public API
// and the FaultInjector hook. (Findings 6 and 7 are Python tests in
// bindings/python/tests/test_arguments.py; finding 8 is in
// storage/metadata_codec_test.cc.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "ckptdb/db.h"
#include "ckptdb/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class Findings : public ::testing::Test {
 protected:
  Findings() {
    options_.fault_injector = faults_;
    for (int i = 0; i < 3; ++i) {
      values_[i].resize(4096);
      std::iota(values_[i].begin(), values_[i].end(), 1000.0f * i);
    }
  }
  Result<CheckpointInfo> Save(DB& db, int i) {
    StateDict sd;
    sd.Set("w",
           TensorView::Whole(values_[i].data(), DType::kFloat32, {64, 64}));
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
  TempDir tmp_;
  std::shared_ptr<FaultInjector> faults_ = std::make_shared<FaultInjector>();
  Options options_;
  std::vector<float> values_[3];
};

// 1. A failed MANIFEST sync while the staged chunks are ingested made every
// later open fail (the clean-up deleted a file the MANIFEST named).
TEST_F(Findings, AFailedManifestSyncDuringIngestionLosesNothing) {
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
TEST_F(Findings, FailedInfoLogWritesNeverAbort) {
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
TEST_F(Findings, RecordsNeverLiveOnlyInTheWriteAheadLog) {
  const std::string dir = tmp_.Sub("s");
  {
    auto db = DB::Open(options_, dir);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(Save(**db, 0).ok());
    ASSERT_TRUE(Save(**db, 1).ok());
    // Even before the close.
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".log") {
        EXPECT_EQ(e.file_size(), 0u) << e.path();
      }
    }
  }
  // And a write-ahead log with anything in it is refused, not skipped.
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".log")
      std::ofstream(e.path(), std::ios::app) << "garbage that is no record";
  }
  auto db = DB::Open(Options(), dir);
  ASSERT_FALSE(db.ok());
  EXPECT_TRUE(db.status().IsCorruption()) << db.status().ToString();
}

// 5. The save reported an error, yet its checkpoint was committed. Now an
// error after the record reached the disk is found out by reopening: the
// checkpoint is returned, and the handle keeps working.
TEST_F(Findings, AFailureAfterTheRecordIsDurableReturnsTheCheckpoint) {
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

}  // namespace
}  // namespace ckptdb
