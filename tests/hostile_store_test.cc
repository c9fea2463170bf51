// Hostile store directories: a symbolic link, a FIFO or a directory where a
// store file or directory should be. No operation may reach outside the
// store through a link, hang on a FIFO, or mistake either for damage it can
// repair: each is refused with an error naming it, or harmless.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <sstream>

#include "ckptdb/db.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr int kCheckpoints = 3;
constexpr size_t kElements = 64 * 64;       // 16 KiB: in its table file
constexpr size_t kBigElements = 128 * 256;  // 128 KiB: in a value file

struct Saved {
  std::vector<float> w, big;
  bool operator==(const Saved&) const = default;
  StateDict Dict() {
    StateDict sd;
    sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {64, 64}));
    sd.Set("big", TensorView::Whole(big.data(), DType::kFloat32, {128, 256}));
    return sd;
  }
};

std::vector<float> Values(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng() % 100000) / 3.0f;
  return v;
}

// A store of kCheckpoints checkpoints at `dir`, and their states.
std::vector<Saved> MakeStore(const std::string& dir) {
  std::vector<Saved> states;
  auto db = DB::Open(Options(), dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  for (int i = 0; i < kCheckpoints; ++i) {
    states.push_back({Values(i + 1, kElements), Values(100 + i, kBigElements)});
    EXPECT_TRUE((*db)->Save(states.back().Dict(), {}).ok());
  }
  return states;
}

// Every entry of a store (files and directories, relative), and "staging",
// which exists while a save runs.
std::vector<fs::path> StorePaths(const std::string& dir) {
  std::vector<fs::path> paths{"staging"};
  testing::WalkUnder(dir, [&](const fs::path& path, const fs::file_status&) {
    paths.push_back(fs::relative(path, dir));
  });
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> Contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& file : testing::FilesUnder(dir)) {
    std::ifstream in(file.path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    out[fs::relative(file.path, dir).string()] = bytes.str();
  }
  return out;
}

// What the calls on a hostile store came to.
struct Outcome {
  std::vector<std::string> errors;
  bool wrong_bytes = false;
};

void Note(Outcome* out, const Status& s, const std::string& what) {
  if (!s.ok()) out->errors.push_back(what + ": " + s.ToString());
}

// Opens `dir` read-only and read-write; read-write, also saves, loads every
// checkpoint and deletes the oldest.
Outcome Exercise(const std::string& dir, std::vector<Saved>& states) {
  Outcome out;
  for (bool read_only : {true, false}) {
    Options options;
    options.read_only = read_only;
    options.create_if_missing = false;
    auto db = DB::Open(options, dir);
    Note(&out, db.status(), read_only ? "read-only open" : "read-write open");
    if (!db.ok()) continue;
    auto list = (*db)->ListCheckpoints();
    Note(&out, list.status(), "listing");
    if (!list.ok()) continue;
    for (const CheckpointInfo& info : *list) {
      if (info.id > kCheckpoints) continue;
      Saved got{std::vector<float>(kElements),
                std::vector<float>(kBigElements)};
      StateDict sd = got.Dict();
      auto loaded = (*db)->Load(sd, CheckpointSelector::Id(info.id), {});
      Note(&out, loaded.status(), "loading " + std::to_string(info.id));
      Note(&out, (*db)->Verify(CheckpointSelector::Id(info.id)),
           "verifying " + std::to_string(info.id));
      if (loaded.ok() && got != states[info.id - 1]) out.wrong_bytes = true;
    }
    if (read_only) continue;
    Saved next{Values(77, kElements), Values(78, kBigElements)};
    Note(&out, (*db)->Save(next.Dict(), {}).status(), "saving");
    Note(&out, (*db)->Delete(CheckpointSelector::Id(1)), "deleting 1");
  }
  return out;
}

// Runs `fn` and returns whether it ended within a minute. A call blocked in
// opening the FIFO `fifo` for reading is released by opening it for writing.
template <typename Fn>
bool EndsInTime(Fn fn, const std::string& fifo) {
  auto done = std::async(std::launch::async, fn);
  if (done.wait_for(std::chrono::seconds(60)) == std::future_status::ready)
    return true;
  while (done.wait_for(std::chrono::milliseconds(100)) !=
         std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return false;
}

TEST(HostileStore, ASymlinkAtEveryStorePathChangesNothingOutsideTheStore) {
  TempDir tmp;
  const std::string templ = tmp.Sub("template");
  std::vector<Saved> states = MakeStore(templ);
  int cases = 0, refused = 0;
  for (const fs::path& name : StorePaths(templ)) {
    const std::string dir = tmp.Sub("case" + std::to_string(cases));
    const fs::path outside = tmp.Sub("outside" + std::to_string(cases++));
    fs::copy(templ, dir, fs::copy_options::recursive);
    const fs::path entry = fs::path(dir) / name;
    // The link's target: a copy of what it replaces (an empty directory for
    // staging), beside files of ckptdb's kinds that are not the store's.
    const fs::path target = outside / "target";
    fs::create_directories(outside / "sub");
    for (const char* other : {"other.val", "9-0-0.sst", "sub/other.val"})
      std::ofstream(outside / other) << "not the store's";
    if (fs::exists(entry)) {
      fs::copy(entry, target, fs::copy_options::recursive);
      fs::remove_all(entry);
    } else {
      fs::create_directories(target / "sub");
      std::ofstream(target / "1-0-0.sst") << "not the store's";
      std::ofstream(target / "sub" / "2-0-0.sst") << "not the store's";
    }
    fs::create_symlink(target, entry);
    const auto before = Contents(outside);

    Outcome o = Exercise(dir, states);
    const std::string ctx = "symlink at " + name.string();
    EXPECT_FALSE(o.wrong_bytes) << ctx;
    EXPECT_EQ(Contents(outside), before) << ctx << ": files outside changed";
    EXPECT_TRUE(fs::is_symlink(entry)) << ctx << ": the link was replaced";
    // A refusal names the link.
    for (const std::string& e : o.errors) {
      if (e.find("symbolic link") == std::string::npos) continue;
      ++refused;
      EXPECT_NE(e.find(entry.string()), std::string::npos) << ctx << ": " << e;
    }
    std::printf("  %-36s %s\n", ctx.c_str(),
                o.errors.empty() ? "harmless"
                                 : o.errors.front().substr(0, 160).c_str());
    fs::remove_all(dir);
  }
  EXPECT_GT(refused, 0);
}

TEST(HostileStore, NonRegularFilesAtEveryStorePathAreCorruptionNamingThem) {
  TempDir tmp;
  const std::string templ = tmp.Sub("template");
  std::vector<Saved> states = MakeStore(templ);
  int cases = 0;
  for (const fs::path& name : StorePaths(templ)) {
    if (name == "staging" || name.filename() == "LOCK") continue;
    const bool is_dir = fs::is_directory(fs::path(templ) / name);
    for (const std::string kind : {"FIFO", "directory"}) {
      if (is_dir && kind == "directory") continue;
      const std::string dir = tmp.Sub("case" + std::to_string(cases++));
      fs::copy(templ, dir, fs::copy_options::recursive);
      const fs::path entry = fs::path(dir) / name;
      fs::remove_all(entry);
      if (kind == "FIFO") {
        ASSERT_EQ(::mkfifo(entry.c_str(), 0600), 0);
      } else {
        fs::create_directory(entry);
      }
      const std::string ctx = kind + " at " + name.string();
      Outcome o;
      EXPECT_TRUE(EndsInTime([&] { o = Exercise(dir, states); }, entry))
          << ctx << ": a call hangs";
      EXPECT_FALSE(o.wrong_bytes) << ctx;
      // Never taken for a file that ends early, or for an I/O error.
      for (const std::string& e : o.errors) {
        if (e.find(entry.string()) == std::string::npos) continue;
        EXPECT_EQ(e.find("ends at byte"), std::string::npos)
            << ctx << ": " << e;
        EXPECT_NE(e.find(": Corruption:"), std::string::npos)
            << ctx << ": " << e;
      }
      std::printf("  %-44s %s\n", ctx.c_str(),
                  o.errors.empty() ? "harmless"
                                   : o.errors.front().substr(0, 150).c_str());
      fs::remove_all(dir);
    }
  }
}

// A FIFO or directory in place of a value file: Corruption naming the file
// and what it is, from load, read and verify.
TEST(HostileStore, AValueFileThatIsNotARegularFileIsNamed) {
  TempDir tmp;
  for (const std::string kind : {"FIFO", "directory"}) {
    const std::string dir = tmp.Sub(kind);
    std::vector<Saved> states = MakeStore(dir);
    std::string value_file;
    for (const auto& f : testing::FilesUnder(dir + "/values/2"))
      value_file = f.path.string();
    ASSERT_FALSE(value_file.empty());
    fs::remove(value_file);
    if (kind == "FIFO") {
      ASSERT_EQ(::mkfifo(value_file.c_str(), 0600), 0);
    } else {
      fs::create_directory(value_file);
    }
    auto db = DB::Open(Options(), dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    Status verified, loaded;
    ASSERT_TRUE(EndsInTime(
        [&] {
          verified = (*db)->Verify(CheckpointSelector::Id(2));
          Saved got{std::vector<float>(kElements),
                    std::vector<float>(kBigElements)};
          StateDict sd = got.Dict();
          loaded = (*db)->Load(sd, CheckpointSelector::Id(2), {}).status();
        },
        value_file));
    for (const Status& s : {verified, loaded}) {
      EXPECT_TRUE(s.IsCorruption()) << kind << ": " << s.ToString();
      EXPECT_NE(s.message().find(value_file), std::string::npos)
          << s.ToString();
      EXPECT_NE(s.message().find("regular file"), std::string::npos)
          << s.ToString();
    }
    // The other checkpoints read back.
    for (int id : {1, 3}) {
      Saved got{std::vector<float>(kElements),
                std::vector<float>(kBigElements)};
      StateDict sd = got.Dict();
      ASSERT_TRUE((*db)->Load(sd, CheckpointSelector::Id(id), {}).ok());
      EXPECT_TRUE(got == states[id - 1]);
    }
  }
}

}  // namespace
}  // namespace ckptdb

namespace ckptdb {
namespace {

// Copies of both commit journal copies of `dir` into `to`, or back.
void CopyJournal(const std::string& from, const std::string& to) {
  for (const char* name : {"CKPTDB_JOURNAL.0", "CKPTDB_JOURNAL.1"}) {
    fs::copy_file(fs::path(from) / name, fs::path(to) / name,
                  fs::copy_options::overwrite_existing);
  }
}

std::vector<int64_t> Ids(DB& db) {
  std::vector<int64_t> ids;
  auto list = db.ListCheckpoints();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  if (list.ok()) {
    for (const CheckpointInfo& info : *list) ids.push_back(info.id);
  }
  return ids;
}

// Journal copies put back from a backup taken `deletes` deletes and three
// saves ago: the database's later records prove the journal stale, and both
// opens go on with the database's checkpoints.
TEST(StaleJournal, OlderJournalCopiesOpenWhenTheDatabaseProvesThemStale) {
  for (bool with_delete : {false, true}) {
    TempDir tmp;
    const std::string dir = tmp.Sub("store");
    const std::string backup = tmp.Sub("backup");
    fs::create_directories(backup);
    std::vector<Saved> states;
    {
      auto db = DB::Open(Options(), dir);
      ASSERT_TRUE(db.ok());
      for (int i = 0; i < 5; ++i) {
        if (i == 2) CopyJournal(dir, backup);
        if (i == 3 && with_delete) {
          ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(1)).ok());
        }
        states.push_back(
            {Values(i + 1, kElements), Values(50 + i, kBigElements)});
        ASSERT_TRUE((*db)->Save(states.back().Dict(), {}).ok());
      }
    }
    CopyJournal(backup, dir);
    const std::vector<int64_t> expected =
        with_delete ? std::vector<int64_t>{2, 3, 4, 5}
                    : std::vector<int64_t>{1, 2, 3, 4, 5};
    for (bool read_only : {true, false, true}) {
      Options options;
      options.read_only = read_only;
      auto db = DB::Open(options, dir);
      ASSERT_TRUE(db.ok()) << "with_delete " << with_delete << ": "
                           << db.status().ToString();
      EXPECT_EQ(Ids(**db), expected);
      for (int64_t id : expected) {
        Saved got{std::vector<float>(kElements),
                  std::vector<float>(kBigElements)};
        StateDict sd = got.Dict();
        ASSERT_TRUE((*db)->Load(sd, CheckpointSelector::Id(id), {}).ok());
        EXPECT_TRUE(got == states[id - 1]) << id;
      }
    }
    // The read-write open wrote the journal anew: a later delete and open
    // go on as usual.
    {
      auto db = DB::Open(Options(), dir);
      ASSERT_TRUE(db.ok());
      ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(2)).ok());
    }
    auto db = DB::Open(Options(), dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    EXPECT_EQ(Ids(**db).size(), expected.size() - 1);
  }
}

// Without a later record the database cannot prove the journal stale: the
// open refuses, naming both explanations, and changes nothing.
TEST(StaleJournal, WithoutProofTheOpenRefusesNamingTheJournal) {
  TempDir tmp;
  const std::string dir = tmp.Sub("store");
  const std::string backup = tmp.Sub("backup");
  fs::create_directories(backup);
  {
    auto db = DB::Open(Options(), dir);
    ASSERT_TRUE(db.ok());
    for (int i = 0; i < 3; ++i) {
      Saved s{Values(i + 1, kElements), Values(9 + i, kBigElements)};
      ASSERT_TRUE((*db)->Save(s.Dict(), {}).ok());
    }
    CopyJournal(dir, backup);
    ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(2)).ok());
  }
  CopyJournal(backup, dir);
  const auto before = testing::SnapshotDir(dir);
  for (bool read_only : {true, false}) {
    Options options;
    options.read_only = read_only;
    auto db = DB::Open(options, dir);
    ASSERT_FALSE(db.ok());
    EXPECT_TRUE(db.status().IsCorruption()) << db.status().ToString();
    EXPECT_NE(db.status().message().find("CKPTDB_JOURNAL"), std::string::npos);
    EXPECT_NE(db.status().message().find("older ones put back"),
              std::string::npos)
        << db.status().ToString();
  }
  for (const auto& [file, desc] : before) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / file) || file.rfind("LOG", 0) == 0)
        << file;
  }
}

}  // namespace
}  // namespace ckptdb
