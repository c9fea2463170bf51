// A read-only handle on a store whose database description (CURRENT,
// MANIFEST, write-ahead log) is damaged reads through a private rebuild (a
// view): every checkpoint lists and reads back, the store is not written, the
// damage is reported, and the view's directory goes with the handle.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "storage/store.h"
#include "storage/store_testing.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;
using ckptdb::testing::FilesUnder;
using ckptdb::testing::SnapshotDir;
using ckptdb::testing::TempDir;
using testing::Pattern;
using testing::ReadAll;
using testing::SaveBytes;

// Points TMPDIR, where views are made, at a directory of the test's own.
class ViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("TMPDIR");
    if (old) old_tmpdir_ = old;
    had_tmpdir_ = old != nullptr;
    fs::create_directories(tmp());
    ::setenv("TMPDIR", tmp().c_str(), 1);
  }
  void TearDown() override {
    if (had_tmpdir_) {
      ::setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }
  std::string store() const { return dir_.path() + "/store"; }
  std::string tmp() const { return dir_.path() + "/tmp"; }
  std::vector<std::string> Views() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(tmp()))
      out.push_back(e.path().filename().string());
    return out;
  }
  // Three checkpoints: small chunks (in the table files), large ones (in
  // value files), and both over two writers.
  std::vector<CheckpointMetadata> SaveThree() {
    auto db = Store::Open(store(), {});
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    std::vector<CheckpointMetadata> out;
    for (const auto& [bytes, ranks] :
         {std::pair{Pattern(600, 1), 1}, std::pair{Pattern(1 << 20, 2), 2},
          std::pair{Pattern(1600, 3), 2}}) {
      auto saved = SaveBytes(**db, bytes, ranks);
      EXPECT_TRUE(saved.ok()) << saved.status().ToString();
      if (saved.ok()) out.push_back(*saved);
    }
    return out;
  }
  std::string Expected(int i) const {
    return i == 0   ? Pattern(600, 1)
           : i == 1 ? Pattern(1 << 20, 2)
                    : Pattern(1600, 3);
  }
  Result<std::unique_ptr<Store>> OpenReadOnly() {
    StoreOptions ro;
    ro.read_only = true;
    return Store::Open(store(), ro);
  }
  // Every checkpoint of SaveThree lists and reads back through `db`.
  void ExpectAllReadBack(Store& db) {
    auto listed = db.List();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    ASSERT_EQ(listed->size(), 3u);
    for (int i = 0; i < 3; ++i) {
      auto meta = db.GetMetadata((*listed)[i].id);
      ASSERT_TRUE(meta.ok()) << meta.status().ToString();
      EXPECT_EQ(ReadAll(db, *meta), Expected(i)) << "checkpoint " << i;
    }
  }
  std::string Manifest() const {
    for (const auto& e : fs::directory_iterator(store())) {
      if (e.path().filename().string().rfind("MANIFEST-", 0) == 0)
        return e.path().string();
    }
    return "";
  }

  TempDir dir_;
  std::string old_tmpdir_;
  bool had_tmpdir_ = false;
};

void FlipByte(const std::string& path, long at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  f.seekp(at);
  c ^= 0x5a;
  f.write(&c, 1);
}

enum class Damage {
  kCurrentRemoved,
  kCurrentFlipped,
  kManifestFlipped,
  kManifestCut,
  kLogWritten
};

class DamagedDescription : public ViewTest,
                           public ::testing::WithParamInterface<Damage> {
 protected:
  void Damage() {
    const std::string current = store() + "/CURRENT";
    switch (GetParam()) {
      case Damage::kCurrentRemoved:
        fs::remove(current);
        break;
      case Damage::kCurrentFlipped:
        FlipByte(current, 10);
        break;
      case Damage::kManifestFlipped:
        FlipByte(Manifest(), 30);
        break;
      case Damage::kManifestCut:
        fs::resize_file(Manifest(), fs::file_size(Manifest()) / 3);
        break;
      case Damage::kLogWritten:
        for (const auto& log : FilesUnder(store(), {".log"}))
          std::ofstream(log.path, std::ios::app) << "no record";
        break;
    }
  }
};

TEST_P(DamagedDescription,
       AReadOnlyHandleReadsEveryCheckpointAndWritesNothing) {
  SaveThree();
  Damage();
  // Through a view, the chunks are read through the chunk table files, not
  // through the copies of their locations. (A MANIFEST cut short opens
  // without the table files its lost edits added: their chunks are read
  // through those copies.)
  if (GetParam() != Damage::kManifestCut) {
    for (const auto& copy : FilesUnder(store() + "/copies", {".loc"}))
      fs::remove(copy.path);
  }
  const auto before = SnapshotDir(store());
  {
    auto db = OpenReadOnly();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ExpectAllReadBack(**db);
    auto report = (*db)->Check();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    // Besides the copies of the chunk locations removed above: a MANIFEST
    // cut short opens (RocksDB reads what is left) without the records it
    // lost, which their copies stand in for; any other damage, the view.
    const bool opens = GetParam() == Damage::kManifestCut;
    std::vector<std::string> lines;
    for (const std::string& line : report->repairable_metadata) {
      if (line.find(".loc") == std::string::npos) lines.push_back(line);
    }
    ASSERT_EQ(lines.size(), opens ? 3u : 1u);
    for (const std::string& line : lines) {
      EXPECT_NE(line.find(opens ? "a read-write open rewrites"
                                : "a read-write open rebuilds"),
                std::string::npos)
          << line;
    }
    if (!opens) {
      EXPECT_NE(lines[0].find("database description of store '" + store()),
                std::string::npos)
          << lines[0];
    }
    EXPECT_TRUE(report->lost_metadata.empty());
    EXPECT_EQ(Views().size(), opens ? 0u : 1u);
  }
  EXPECT_TRUE(Views().empty()) << "the view outlived its handle";
  EXPECT_EQ(SnapshotDir(store()), before);
  // The read-write open rebuilds the store's own description.
  {
    auto db = Store::Open(store(), {});
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ExpectAllReadBack(**db);
  }
  auto db = OpenReadOnly();
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto report = (*db)->Check();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->repairable_metadata.empty());
  EXPECT_TRUE(Views().empty());
}

INSTANTIATE_TEST_SUITE_P(Damages, DamagedDescription,
                         ::testing::Values(Damage::kCurrentRemoved,
                                           Damage::kCurrentFlipped,
                                           Damage::kManifestFlipped,
                                           Damage::kManifestCut,
                                           Damage::kLogWritten));

TEST_F(ViewTest, AReaderOnAViewSeesTheWritersRebuildAndNewCheckpoints) {
  SaveThree();
  fs::remove(store() + "/CURRENT");
  auto reader = OpenReadOnly();
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_EQ(Views().size(), 1u);
  auto writer = Store::Open(store(), {});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  auto fourth = SaveBytes(**writer, Pattern(5000, 4), 1);
  ASSERT_TRUE(fourth.ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  EXPECT_TRUE(Views().empty()) << "a refresh kept the view of the damage";
  auto listed = (*reader)->List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 4u);
  EXPECT_EQ(ReadAll(**reader, *fourth), Pattern(5000, 4));
}

TEST_F(ViewTest, TwoReadersHaveAViewEachAndOneClosingLeavesTheOther) {
  SaveThree();
  FlipByte(Manifest(), 30);
  auto first = OpenReadOnly();
  auto second = OpenReadOnly();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(Views().size(), 2u);
  // The second view's making left the first's database lock held (another
  // process's clean-up tells a view in use by it).
  for (const std::string& view : Views()) {
    const int fd = ::open((tmp() + "/" + view + "/LOCK").c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << view;
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    ASSERT_EQ(::fcntl(fd, F_OFD_GETLK, &probe), 0);
    EXPECT_NE(probe.l_type, F_UNLCK) << view << " is not locked";
    // (Closing `fd` releases this process's locks on the file: only at the
    // end.)
  }
  first->reset();
  EXPECT_EQ(Views().size(), 1u);
  ExpectAllReadBack(**second);
}

TEST_F(ViewTest, AViewAProcessLeftBehindIsRemovedByTheNextOne) {
  SaveThree();
  fs::remove(store() + "/CURRENT");
  // A view of a process killed while it read: its database lock is free.
  const std::string left = tmp() + "/ckptdb-view-Ab12Cd";
  fs::create_directories(left);
  std::ofstream(left + "/LOCK");
  std::ofstream(left + "/000009.sst") << "x";
  // Not a view: kept.
  fs::create_directories(tmp() + "/other");
  auto db = OpenReadOnly();
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_FALSE(fs::exists(left));
  EXPECT_TRUE(fs::exists(tmp() + "/other"));
  EXPECT_EQ(Views().size(), 2u);  // its own, and the other directory
}

// The table file under `dir` whose bytes hold `bytes`.
std::string TableHolding(const std::string& dir, const std::string& bytes) {
  for (const auto& f : FilesUnder(dir, {".sst"})) {
    std::ifstream in(f.path, std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), {});
    if (all.find(bytes) != std::string::npos) return f.path;
  }
  return "";
}

// Through `db`: checkpoints 1 and 2 of SaveThree and the first chunk of
// checkpoint 3 read back; returns the read of checkpoint 3's second chunk.
Result<ChunkBuffer> ReadAllButThirdsSecondChunk(
    Store& db, const std::vector<CheckpointMetadata>& saved,
    const std::function<std::string(int)>& expected) {
  for (int i = 0; i < 2; ++i) EXPECT_EQ(ReadAll(db, saved[i]), expected(i));
  const auto& chunks = saved[2].tensors.at("w").chunks;
  EXPECT_TRUE(db.ReadChunk(saved[2].info.id, "w", chunks[0]).ok());
  return db.ReadChunk(saved[2].info.id, "w", chunks[1]);
}

TEST_F(ViewTest, AChunkTableThatCannotBeReadFailsOnlyTheReadsOfItsChunks) {
  const auto saved = SaveThree();
  // The table file of checkpoint 3's second writer (small chunks).
  const std::string table = TableHolding(store(), Expected(2).substr(1000, 64));
  ASSERT_FALSE(table.empty());
  fs::resize_file(table, 100);
  fs::remove(store() + "/CURRENT");
  auto db = OpenReadOnly();
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto expected = [&](int i) { return Expected(i); };
  EXPECT_FALSE(ReadAllButThirdsSecondChunk(**db, saved, expected).ok());
  auto report = (*db)->Check();
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->repairable_metadata.size(), 2u);
  EXPECT_NE(report->repairable_metadata[1].find(table), std::string::npos)
      << report->repairable_metadata[1];
}

// An empty table file (a rebuild's or a flush's write cut short by a full
// disk) holds no chunks: every checkpoint reads through the view, and the
// check says so instead of naming loads that fail.
TEST_F(ViewTest, AnEmptyTableFileIsReportedAsHoldingNothing) {
  SaveThree();
  const std::string empty = store() + "/000999.sst";
  std::ofstream{empty};
  fs::remove(store() + "/CURRENT");
  auto db = OpenReadOnly();
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ExpectAllReadBack(**db);
  auto report = (*db)->Check();
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->repairable_metadata.size(), 2u);
  EXPECT_NE(report->repairable_metadata[1].find(empty + " is empty"),
            std::string::npos)
      << report->repairable_metadata[1];
  EXPECT_EQ(report->repairable_metadata[1].find("fail"), std::string::npos)
      << report->repairable_metadata[1];
}

TEST_F(ViewTest, AChunkWhoseBytesAreDamagedFailsAloneThroughAView) {
  const auto saved = SaveThree();
  const std::string hit = Expected(2).substr(1000, 64);
  const std::string table = TableHolding(store(), hit);
  ASSERT_FALSE(table.empty());
  {
    std::ifstream in(table, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    FlipByte(table, static_cast<long>(bytes.find(hit)));
  }
  fs::remove(store() + "/CURRENT");
  auto db = OpenReadOnly();
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto damaged = ReadAllButThirdsSecondChunk(
      **db, saved, [&](int i) { return Expected(i); });
  ASSERT_FALSE(damaged.ok());
  EXPECT_TRUE(damaged.status().IsCorruption()) << damaged.status().ToString();
}

// This process's views under /tmp.
std::vector<std::string> OwnViewsInTmp() {
  const std::string prefix = "ckptdb-view-" + std::to_string(::getpid()) + "-";
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator("/tmp")) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

TEST_F(ViewTest, AViewIsMadeInTmpWhereTmpdirIsInTheStoreOrNoDirectory) {
  SaveThree();
  fs::remove(store() + "/CURRENT");
  for (const auto& copy : FilesUnder(store() + "/copies", {".loc"}))
    fs::remove(copy.path);
  fs::create_directory_symlink(store(), dir_.path() + "/link");
  std::ofstream(dir_.path() + "/file");
  const auto before = SnapshotDir(store());
  for (const std::string& tmpdir :
       {store(), store() + "/values", dir_.path() + "/link/copies",
        dir_.path() + "/none", dir_.path() + "/file", std::string()}) {
    ::setenv("TMPDIR", tmpdir.c_str(), 1);
    {
      auto db = OpenReadOnly();
      ASSERT_TRUE(db.ok()) << tmpdir << ": " << db.status().ToString();
      EXPECT_EQ(OwnViewsInTmp().size(), 1u) << tmpdir;
      ExpectAllReadBack(**db);
      auto report = (*db)->Check();
      ASSERT_TRUE(report.ok());
      EXPECT_TRUE(report->foreign_entries.empty()) << tmpdir;
      for (const std::string& line : report->repairable_metadata) {
        EXPECT_TRUE(line.find(".loc") != std::string::npos ||
                    line.find("database description") != std::string::npos)
            << tmpdir << ": " << line;
      }
    }
    EXPECT_TRUE(OwnViewsInTmp().empty()) << tmpdir;
    EXPECT_EQ(SnapshotDir(store()), before) << tmpdir;
  }
}

TEST_F(ViewTest, WithoutACopyOfEveryRecordTheOpenFailsSayingWhy) {
  SaveThree();
  fs::remove(store() + "/CURRENT");
  fs::remove(store() + "/copies/2.rec");
  auto db = OpenReadOnly();
  ASSERT_FALSE(db.ok());
  EXPECT_TRUE(db.status().IsCorruption()) << db.status().ToString();
  EXPECT_TRUE(Views().empty());
}

}  // namespace
}  // namespace ckptdb::storage
