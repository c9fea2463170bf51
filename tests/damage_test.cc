// The damage matrix: every file of a store of incremental checkpoints (which
// share unchanged chunks) with value files, damaged one way at a time (a byte
// flipped at its start, middle or end, the file cut short, the file
// removed), then checked read-only, opened read-write once, and checked
// again. Per case it counts the (checkpoint, tensor) pairs lost: after the
// read-write open, none for a file that holds no tensor bytes, and for a
// flipped byte inside a chunk's bytes only that tensor in the checkpoints
// that share the chunk. Never a shorter listing or wrong bytes without an
// error, and a failed open deletes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "ckptdb/db.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::vector<float> Values(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng() % 100000) / 3.0f;
  return v;
}

constexpr int kCheckpoints = 5;
// "w" and "frozen" (16 KiB each) are stored in table files, "big" and
// "frozen_big" (128 KiB each) in value files with a pointer in the table
// file. "w" and "big" change with every checkpoint; the frozen ones never do,
// so every checkpoint shares the first one's chunks of them.
struct TensorSpec {
  const char* key;
  Shape shape;
  bool changes;
};
// Tensors of 512 bytes (in their chunk table file, under 1 KiB) and larger
// ones (in value files).
const std::vector<TensorSpec> kTensors = {{"w", {64, 64}, true},
                                          {"big", {128, 256}, true},
                                          {"bias", {128}, true},
                                          {"frozen", {64, 64}, false},
                                          {"frozen_big", {128, 256}, false},
                                          {"frozen_bias", {128}, false}};

size_t Elements(const Shape& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// Every checkpoint's tensors, by checkpoint id (1...) and key.
using Saved = std::map<int64_t, std::map<std::string, std::vector<float>>>;
using Pair = std::pair<int64_t, std::string>;  // (checkpoint id, tensor)

std::string FileKind(const fs::path& relative, const fs::path& file) {
  const std::string name = relative.filename().string();
  if (relative.begin()->string() == "copies")
    return name.ends_with(".rec") ? "records copy" : "locations copy";
  if (name.ends_with(".sst")) {
    // A chunk table file names the collector of its value offsets among its
    // properties; a metadata table file holds records.
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    return bytes.find("ckptdb.ValueOffsetCollector") != std::string::npos
               ? "chunk table"
               : "metadata table";
  }
  if (name.ends_with(".val")) return "value file";
  if (name.rfind("MANIFEST-", 0) == 0) return "MANIFEST";
  if (name.rfind("OPTIONS-", 0) == 0) return "OPTIONS";
  if (name.rfind("CKPTDB_JOURNAL", 0) == 0) return "journal";
  if (name.ends_with(".log")) return "write-ahead log";
  if (name.rfind("LOG", 0) == 0) return "LOG";
  return name;
}

// The kinds of file that hold tensor bytes.
bool HoldsTensorBytes(const std::string& kind) {
  return kind == "chunk table" || kind == "value file";
}

struct Damage {
  std::string how;  // flip, cut, remove
  // flip: the position class.
  std::string where;
};

// Applies `damage`; false when it does not apply (an empty file). `at`
// receives the flipped byte's offset.
bool Apply(const fs::path& file, const Damage& damage, uint64_t* at) {
  const auto size = fs::file_size(file);
  if (damage.how == "remove") return fs::remove(file);
  if (size == 0) return false;
  if (damage.how == "cut") {
    fs::resize_file(file, size / 2);
    return true;
  }
  *at = damage.where == "start"    ? 0
        : damage.where == "middle" ? size / 2
                                   : size - 1;
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(*at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(*at));
  f.write(&c, 1);
  return true;
}

// Where each saved tensor's bytes lie in `file` (an unchanged tensor's
// bytes, which checkpoints share, count for each of them).
std::map<Pair, std::pair<uint64_t, uint64_t>> TensorBytesIn(
    const fs::path& file, const Saved& saved) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::map<Pair, std::pair<uint64_t, uint64_t>> out;
  for (const auto& [id, tensors] : saved) {
    for (const auto& [key, values] : tensors) {
      const std::string_view needle(
          reinterpret_cast<const char*>(values.data()),
          values.size() * sizeof(float));
      const size_t found = std::string_view(bytes).find(needle);
      if (found != std::string_view::npos)
        out[{id, key}] = {found, found + needle.size()};
    }
  }
  return out;
}

struct Outcome {
  bool open_failed = false;
  bool detected = false;  // an error, or verify reporting damage
  std::set<Pair> lost;    // not read back bit-exactly
  std::string error;
};

// Opens `dir`, lists it and reads every tensor of every checkpoint; with
// `verify`, also runs DB::Verify on each checkpoint and DB::CheckStore.
// Wrong bytes or a shorter listing without an error fail the test.
Outcome Examine(const std::string& dir, bool read_only, bool verify,
                const Saved& saved, const std::string& ctx) {
  Options options;
  options.read_only = read_only;
  options.create_if_missing = false;
  Outcome out;
  auto all_lost = [&] {
    for (const auto& [id, tensors] : saved) {
      for (const auto& [key, values] : tensors) out.lost.insert({id, key});
    }
  };
  auto db = DB::Open(options, dir);
  if (!db.ok()) {
    out.detected = out.open_failed = true;
    out.error = db.status().ToString();
    EXPECT_NE(out.error.find(dir), std::string::npos)
        << ctx << ": the error names no file: " << out.error;
    // Damage is never mistaken for "not a store" or a bad argument.
    EXPECT_FALSE(db.status().IsInvalidArgument()) << ctx << ": " << out.error;
    all_lost();
    return out;
  }
  auto list = (*db)->ListCheckpoints();
  EXPECT_TRUE(list.ok()) << ctx << ": the listing failed as a whole: "
                         << list.status().ToString();
  if (!list.ok()) {
    out.detected = true;
    all_lost();
    return out;
  }
  std::set<int64_t> listed;
  for (const auto& info : *list) {
    listed.insert(info.id);
    if (!info.damage.empty()) out.detected = true;
  }
  EXPECT_EQ(listed.size(), saved.size()) << ctx << ": a shorter listing";
  for (const auto& [id, tensors] : saved) {
    for (const auto& [key, values] : tensors) {
      if (!listed.contains(id)) {
        out.lost.insert({id, key});
        continue;
      }
      auto read = (*db)->Read(key, CheckpointSelector::Id(id));
      if (!read.ok()) {
        EXPECT_TRUE(read.status().IsCorruption() || read.status().IsIOError())
            << ctx << ": " << read.status().ToString();
        out.detected = true;
        out.error = read.status().ToString();
        out.lost.insert({id, key});
        continue;
      }
      const bool same =
          read->data.size() == values.size() * sizeof(float) &&
          std::memcmp(read->data.data(), values.data(), read->data.size()) == 0;
      EXPECT_TRUE(same) << ctx << ": checkpoint " << id << " tensor " << key
                        << " reads wrong bytes without an error";
      if (!same) out.lost.insert({id, key});
    }
  }
  if (verify) {
    for (int64_t id : listed) {
      auto report = (*db)->Verify(CheckpointSelector::Id(id), {});
      if (!report.ok() || !report->ok()) {
        out.detected = true;
        if (out.error.empty())
          out.error = report.ok() ? report->problems.front()
                                  : report.status().ToString();
      }
    }
    auto store = (*db)->CheckStore();
    if (!store.ok() || !store->ok()) {
      out.detected = true;
      if (out.error.empty())
        out.error = store.ok() ? "CheckStore reports damage"
                               : store.status().ToString();
    }
  }
  return out;
}

// Per file kind: cases, and (checkpoint, tensor) pairs lost after the
// read-write open.
struct Tally {
  int cases = 0, detected = 0, lossless = 0;
  size_t lost = 0;
  int worst_checkpoints = 0;

  // Counts one case: what the read-only check found first, and what was lost
  // after the read-write open.
  void Add(const Outcome& first, const Outcome& after) {
    ++cases;
    detected += first.detected ? 1 : 0;
    lossless += after.lost.empty() ? 1 : 0;
    lost += after.lost.size();
    std::set<int64_t> hit;
    for (const Pair& pair : after.lost) hit.insert(pair.first);
    worst_checkpoints =
        std::max(worst_checkpoints, static_cast<int>(hit.size()));
  }
};

// Saves kCheckpoints checkpoints of kTensors into `dir` (each later one
// writes only the changing tensors), into `saved` by id.
void SaveCheckpoints(const std::string& dir, Saved* saved) {
  auto db = DB::Open(Options(), dir);
  ASSERT_TRUE(db.ok());
  for (int i = 0; i < kCheckpoints; ++i) {
    std::map<std::string, std::vector<float>> tensors;
    StateDict sd;
    for (size_t t = 0; t < kTensors.size(); ++t) {
      const TensorSpec& spec = kTensors[t];
      const uint32_t seed = static_cast<uint32_t>(
          100 * t + (spec.changes ? static_cast<uint32_t>(i) : 0u));
      tensors[spec.key] = Values(seed, Elements(spec.shape));
    }
    for (auto& [key, values] : tensors) {
      for (const TensorSpec& spec : kTensors) {
        if (key == spec.key)
          sd.Set(key,
                 TensorView::Whole(values.data(), DType::kFloat32, spec.shape));
      }
    }
    auto info = (*db)->Save(sd, {});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    if (i > 0) {
      ASSERT_LT(info->nbytes_written, info->nbytes);
    }
    (*saved)[info->id] = std::move(tensors);
  }
}

void PrintMatrix(int cases, const std::map<std::string, Tally>& by_kind) {
  std::printf("damage matrix: %d cases (%d checkpoints x %zu tensors)\n", cases,
              kCheckpoints, kTensors.size());
  std::printf("  %-28s %5s %8s %8s %11s %16s\n", "damage, file kind", "cases",
              "detected", "lossless", "pairs lost", "worst checkpoints");
  for (const auto& [what, t] : by_kind) {
    std::printf("  %-28s %5d %8d %8d %11zu %16d\n", what.c_str(), t.cases,
                t.detected, t.lossless, t.lost, t.worst_checkpoints);
  }
}

// A store whose open failed (with `error`) keeps every file it had
// (`before`, SnapshotDir), RocksDB's text log aside.
void ExpectFilesKept(const std::string& dir,
                     const std::map<std::string, std::string>& before,
                     const std::string& error, const std::string& ctx) {
  for (const auto& [file, desc] : before) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / file) || file.rfind("LOG", 0) == 0)
        << ctx << ": " << file << " was deleted; the open failed with "
        << error;
  }
}

// The (checkpoint, tensor) pairs of `lost` beyond what `damage` at offset
// `at` of a file holding the tensor bytes `in_file` may cost: nothing in a
// file without tensor bytes; the tensors whose bytes it hit (a flip) or held
// (cut, removed).
std::set<Pair> LostBeyond(
    const std::set<Pair>& lost,
    const std::map<Pair, std::pair<uint64_t, uint64_t>>& in_file,
    const Damage& damage, uint64_t at) {
  std::set<Pair> allowed;
  for (const auto& [pair, range] : in_file) {
    if (damage.how != "flip" || (range.first <= at && at < range.second))
      allowed.insert(pair);
  }
  std::set<Pair> excess;
  std::set_difference(lost.begin(), lost.end(), allowed.begin(), allowed.end(),
                      std::inserter(excess, excess.begin()));
  return excess;
}

TEST(DamageMatrix, OneDamagedFileCostsAtMostTheTensorBytesItHit) {
  TempDir tmp(fs::is_directory("/dev/shm") ? "/dev/shm" : "");
  const std::string templ = tmp.Sub("template");
  Saved saved;
  ASSERT_NO_FATAL_FAILURE(SaveCheckpoints(templ, &saved));
  std::vector<fs::path> files;
  std::set<std::string> kinds;
  for (const auto& file : ckptdb::testing::FilesUnder(templ)) {
    files.push_back(fs::relative(file.path, templ));
    kinds.insert(FileKind(files.back(), file.path));
  }
  for (const char* kind :
       {"chunk table", "metadata table", "value file", "records copy",
        "locations copy", "MANIFEST", "CURRENT", "journal"})
    ASSERT_TRUE(kinds.contains(kind)) << kind;
  const std::vector<Damage> damages = {{"flip", "start"},
                                       {"flip", "middle"},
                                       {"flip", "end"},
                                       {"cut", ""},
                                       {"remove", ""}};
  std::map<std::string, Tally> by_kind;  // "<how> <kind>"
  int cases = 0;
  for (const auto& name : files) {
    const std::string kind = FileKind(name, fs::path(templ) / name);
    const auto in_file = TensorBytesIn(fs::path(templ) / name, saved);
    EXPECT_TRUE(HoldsTensorBytes(kind) || in_file.empty()) << name;
    for (const Damage& damage : damages) {
      const std::string dir = tmp.Sub("case" + std::to_string(cases));
      fs::copy(templ, dir, fs::copy_options::recursive);
      uint64_t at = 0;
      if (!Apply(fs::path(dir) / name, damage, &at)) {
        fs::remove_all(dir);
        continue;
      }
      ++cases;
      const std::string ctx = damage.how + " " + damage.where + " " +
                              name.string() + " (" + kind + ")";
      const auto before = testing::SnapshotDir(dir);
      const Outcome first = Examine(dir, /*read_only=*/true, /*verify=*/true,
                                    saved, ctx + ", read-only");
      const Outcome opened =
          Examine(dir, /*read_only=*/false,
                  /*verify=*/false, saved, ctx + ", read-write");
      if (opened.open_failed) ExpectFilesKept(dir, before, opened.error, ctx);
      const Outcome after = Examine(dir, /*read_only=*/true, /*verify=*/true,
                                    saved, ctx + ", after the read-write open");
      const std::set<Pair> excess = LostBeyond(after.lost, in_file, damage, at);
      EXPECT_TRUE(excess.empty())
          << ctx << ": lost " << excess.size() << " (checkpoint, tensor) "
          << "pairs beyond the tensor bytes it hit, e.g. checkpoint "
          << excess.begin()->first << " " << excess.begin()->second << ": "
          << after.error;
      // Tensor bytes stay lost; every other damage is found before the
      // repair, by the check or the open, and repaired by the open: then
      // neither a read nor a check finds anything.
      if (!after.lost.empty()) {
        EXPECT_TRUE(after.detected) << ctx;
      } else {
        EXPECT_FALSE(after.detected)
            << ctx << ": nothing was lost, but after the read-write open "
            << after.error;
      }
      // RocksDB's info LOG is free text, LOCK is empty. (An OPTIONS file's
      // comments are not read, but its bytes are compared with the checksum
      // the store recorded.)
      if (kind != "LOG" && kind != "LOCK" && damage.how == "flip") {
        EXPECT_TRUE(first.detected || !first.lost.empty())
            << ctx << ": the read-only check saw nothing";
      }
      by_kind[damage.how + " " + kind].Add(first, after);
      if (!after.lost.empty() || first.detected)
        std::printf("  %-55s lost %zu; %s\n", ctx.c_str(), after.lost.size(),
                    (first.error.empty() ? after.error : first.error)
                        .substr(0, 140)
                        .c_str());
      fs::remove_all(dir);
    }
  }
  PrintMatrix(cases, by_kind);
}

// Whether CheckStore of the store at `dir` names `file` among the repairable
// metadata; `report` gets its first such line.
bool ReportsFile(const std::string& dir, const std::string& file,
                 std::string* report) {
  Options read_only;
  read_only.read_only = true;
  auto db = DB::Open(read_only, dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  if (!db.ok()) return false;
  auto checked = (*db)->CheckStore();
  EXPECT_TRUE(checked.ok()) << checked.status().ToString();
  if (!checked.ok()) return false;
  for (const std::string& line : checked->repairable_metadata) {
    if (line.find(file) == std::string::npos) continue;
    *report = line;
    return true;
  }
  return false;
}

// The database never reads RocksDB's options files, and most flips in one
// still parse (a comment, a digit of a number, a space in a value); the
// store's checksum of each finds them all. A read-write open removes the
// damaged file and RocksDB writes a new one, which the next check passes.
TEST(DamageMatrix, EveryFlipOfAnOptionsFileIsReportedAndAnOpenReplacesIt) {
  TempDir tmp;
  const std::string dir = tmp.Sub("store");
  std::vector<float> w = Values(3, 64);
  {
    auto db = DB::Open(Options(), dir);
    ASSERT_TRUE(db.ok());
    StateDict sd;
    sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {64}));
    ASSERT_TRUE((*db)->Save(sd, {.step = 1}).ok());
  }
  std::vector<std::string> options_files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename();
    if (name.starts_with("OPTIONS-")) options_files.push_back(name);
  }
  ASSERT_EQ(options_files.size(), 2u);
  std::string report;
  for (const std::string& name : options_files)
    EXPECT_FALSE(ReportsFile(dir, name, &report)) << report;
  std::sort(options_files.begin(), options_files.end());
  const std::string newest = options_files.back();
  const auto size = fs::file_size(fs::path(dir) / newest);
  constexpr int kFlips = 40;
  for (int i = 0; i < kFlips; ++i) {
    const uint64_t at = size * i / kFlips;
    const std::string copy = tmp.Sub("flip" + std::to_string(i));
    fs::copy(dir, copy, fs::copy_options::recursive);
    {
      std::fstream f(fs::path(copy) / newest,
                     std::ios::binary | std::ios::in | std::ios::out);
      f.seekg(static_cast<std::streamoff>(at));
      const char c = static_cast<char>(f.get() ^ 0x10);
      f.seekp(static_cast<std::streamoff>(at));
      f.put(c);
    }
    ASSERT_TRUE(ReportsFile(copy, newest, &report))
        << "a flip at byte " << at << " of " << newest << " went unreported";
    EXPECT_NE(report.find("a read-write open removes it"), std::string::npos)
        << report;
    {
      auto db = DB::Open(Options(), copy);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
    }
    EXPECT_FALSE(fs::exists(fs::path(copy) / newest)) << at;
    for (const auto& entry : fs::directory_iterator(copy)) {
      const std::string name = entry.path().filename();
      if (name.starts_with("OPTIONS-")) {
        EXPECT_FALSE(ReportsFile(copy, name, &report)) << report;
      }
    }
    fs::remove_all(copy);
  }
}

TEST(DamageMatrix, AStrayCreatingMarkerChangesNothing) {
  TempDir tmp;
  const std::string dir = tmp.Sub("store");
  std::vector<float> w = Values(7, 64 * 64);
  {
    auto db = DB::Open(Options(), dir);
    ASSERT_TRUE(db.ok());
    for (int i = 0; i < 2; ++i) {
      StateDict sd;
      sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {64, 64}));
      ASSERT_TRUE((*db)->Save(sd, {}).ok());
    }
  }
  for (bool create : {false, true}) {
    std::ofstream(dir + "/CKPTDB_CREATING").flush();
    Options options;
    options.create_if_missing = create;
    auto db = DB::Open(options, dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    EXPECT_EQ((*db)->ListCheckpoints()->size(), 2u);
  }
}

// Newer records shadow older ones, so reads skip some blocks of the older
// metadata table files; a compaction reads them all. A read-write open checks
// every block first: a damaged file is set aside (and the database rebuilt
// from the copies) before anything compacts it, so the saves that follow,
// which compact the metadata, succeed.
TEST(DamageMatrix, AMetadataBlockThatReadsSkipIsFoundBeforeACompactionReadsIt) {
  TempDir tmp(fs::is_directory("/dev/shm") ? "/dev/shm" : "");
  const std::string dir = tmp.Sub("store");
  Saved saved;
  auto save = [&](DB& db, int64_t step) {
    std::vector<float> w = Values(static_cast<uint32_t>(step), 64 * 64);
    StateDict sd;
    sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {64, 64}));
    auto info = db.Save(sd, {});
    ASSERT_TRUE(info.ok()) << "step " << step << ": "
                           << info.status().ToString();
    saved[info->id]["w"] = std::move(w);
  };
  {
    auto db = DB::Open(Options(), dir);
    ASSERT_TRUE(db.ok());
    ASSERT_NO_FATAL_FAILURE(save(**db, 1));
  }
  // The oldest metadata table file (a chunk table holds 16 KiB of "w").
  std::string oldest;
  for (const auto& file : ckptdb::testing::FilesUnder(dir, {".sst"})) {
    const std::string name = file.path.filename().string();
    if (file.path.parent_path() == fs::path(dir) && file.size < (12 << 10) &&
        (oldest.empty() || name < oldest))
      oldest = name;
  }
  ASSERT_FALSE(oldest.empty());
  uint64_t at = 0;
  ASSERT_TRUE(Apply(fs::path(dir) / oldest, {"flip", "start"}, &at));
  {
    auto db = DB::Open(Options(), dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    // Enough commits for the metadata to be compacted more than once.
    for (int64_t step = 2; step <= 10; ++step)
      ASSERT_NO_FATAL_FAILURE(save(**db, step));
  }
  bool set_aside = false;
  for (const auto& file : ckptdb::testing::FilesUnder(dir))
    set_aside |= file.path.filename() == oldest &&
                 file.path.string().find("/damaged/") != std::string::npos;
  EXPECT_TRUE(set_aside) << oldest << " is not kept under damaged/";
  const Outcome after =
      Examine(dir, /*read_only=*/true, /*verify=*/true, saved, "after");
  EXPECT_TRUE(after.lost.empty()) << after.error;
  EXPECT_FALSE(after.detected) << after.error;
}

}  // namespace
}  // namespace ckptdb
