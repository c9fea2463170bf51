// The damage matrix: every file kind of a store, damaged three ways (a flipped
// byte, a cut tail, deleted), then opened read-only and read-write. Each case
// ends either harmless (every checkpoint lists and loads bit-exactly) or
// detected (an error naming the damaged file or chunk); never a shorter
// listing or wrong bytes without an error, and a failed open deletes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

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

constexpr int kCheckpoints = 3;
// Tensor "w" (16 KiB) is stored in its table file; tensor "big" (128 KiB) in
// a value file, with a pointer in the table file.
constexpr size_t kElements = 64 * 64;
constexpr size_t kBigElements = 128 * 256;

// One checkpoint's tensors.
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

std::string FileKind(const fs::path& file) {
  const std::string name = file.filename().string();
  if (name.ends_with(".sst")) {
    // A checkpoint's 16 KiB tensor, or a few hundred bytes of records.
    return fs::file_size(file) > (8 << 10) ? "chunk table" : "metadata table";
  }
  if (name.ends_with(".val")) return "value file";
  if (name.rfind("MANIFEST-", 0) == 0) return "MANIFEST";
  if (name.rfind("OPTIONS-", 0) == 0) return "OPTIONS";
  if (name.ends_with(".log")) return "write-ahead log";
  return name;
}

// Applies one kind of damage; false when it does not apply (an empty file).
bool Damage(const fs::path& file, const std::string& how) {
  const auto size = fs::file_size(file);
  if (how == "delete") return fs::remove(file);
  if (size == 0) return false;
  if (how == "truncate") {
    fs::resize_file(file, size - 1);
    return true;
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(size / 2));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(size / 2));
  f.write(&c, 1);
  return true;
}

struct Outcome {
  bool detected = false;
  bool open_failed = false;
  // A checkpoint missing from the listing, or wrong bytes, without an error.
  bool silent = false;
  std::string error;
};

// Opens `dir` and loads every checkpoint. Silent loss fails the test.
Outcome Examine(const std::string& dir, bool read_only,
                std::vector<Saved>& expected, const std::string& ctx) {
  Options options;
  options.read_only = read_only;
  options.create_if_missing = false;
  Outcome out;
  auto db = DB::Open(options, dir);
  if (!db.ok()) {
    out.detected = true;
    out.open_failed = true;
    out.error = db.status().ToString();
    EXPECT_NE(out.error.find(dir), std::string::npos)
        << ctx << ": the error names no file: " << out.error;
    // Damage is never mistaken for "not a store" or a bad argument.
    EXPECT_FALSE(db.status().IsInvalidArgument()) << ctx << ": " << out.error;
    return out;
  }
  auto list = (*db)->ListCheckpoints();
  if (!list.ok()) return {.detected = true, .error = list.status().ToString()};
  out.silent = list->size() != static_cast<size_t>(kCheckpoints);
  EXPECT_FALSE(out.silent) << ctx << ": a shorter listing without an error";
  for (const auto& info : *list) {
    Saved got{std::vector<float>(kElements), std::vector<float>(kBigElements)};
    StateDict sd = got.Dict();
    auto loaded = (*db)->Load(sd, CheckpointSelector::Id(info.id), {});
    Status verified = (*db)->Verify(CheckpointSelector::Id(info.id));
    if (!loaded.ok() || !verified.ok()) {
      const Status& s = loaded.ok() ? verified : loaded.status();
      EXPECT_TRUE(s.IsCorruption() || s.IsIOError() || s.IsNotFound())
          << ctx << ": " << s.ToString();
      out.detected = true;
      out.error = s.ToString();
      continue;
    }
    out.silent |= got != expected[info.id - 1];
    EXPECT_TRUE(got == expected[info.id - 1])
        << ctx << ": checkpoint " << info.id << " loads wrong bytes";
  }
  return out;
}

TEST(DamageMatrix, EveryFileKindFlippedCutAndDeleted) {
  TempDir tmp(fs::is_directory("/dev/shm") ? "/dev/shm" : "");
  const std::string templ = tmp.Sub("template");
  std::vector<Saved> states;
  {
    auto db = DB::Open(Options(), templ);
    ASSERT_TRUE(db.ok());
    for (int i = 0; i < kCheckpoints; ++i) {
      states.push_back(
          {Values(i + 1, kElements), Values(100 + i, kBigElements)});
      ASSERT_TRUE((*db)->Save(states.back().Dict(), {}).ok());
    }
  }
  std::vector<fs::path> files;
  bool value_files = false;
  for (const auto& file : ckptdb::testing::FilesUnder(templ)) {
    files.push_back(fs::relative(file.path, templ));
    value_files |= file.path.extension() == ".val";
  }
  ASSERT_TRUE(value_files);
  int cases = 0, detected = 0, harmless = 0, silent = 0;
  for (const auto& name : files) {
    for (const std::string how : {"flip", "truncate", "delete"}) {
      const std::string dir = tmp.Sub("case" + std::to_string(cases));
      fs::copy(templ, dir, fs::copy_options::recursive);
      const std::string kind = FileKind(fs::path(dir) / name);
      if (!Damage(fs::path(dir) / name, how)) {
        fs::remove_all(dir);
        continue;
      }
      ++cases;
      const std::string ctx = how + " " + name.string() + " (" + kind + ")";
      bool seen = false, lost = false;
      for (bool read_only : {true, false}) {
        auto before = testing::SnapshotDir(dir);
        Outcome o = Examine(dir, read_only, states,
                            ctx + (read_only ? ", read-only" : ", read-write"));
        seen |= o.detected;
        lost |= o.silent;
        if (!o.detected) continue;
        // A store that fails to open keeps every file it had.
        for (const auto& [file, desc] : before) {
          EXPECT_TRUE(!o.open_failed || fs::exists(fs::path(dir) / file) ||
                      file.rfind("LOG", 0) == 0)
              << ctx << ": " << file << " was deleted";
        }
        std::printf("  %-40s detected: %s\n", ctx.c_str(),
                    o.error.substr(0, 150).c_str());
      }
      if (lost)
        ++silent;
      else if (seen)
        ++detected;
      else
        ++harmless;
      fs::remove_all(dir);
    }
  }
  std::printf("damage matrix: %d cases, %d detected, %d harmless, %d silent\n",
              cases, detected, harmless, silent);
  EXPECT_GT(detected, 0);
}

TEST(DamageMatrix, AStrayCreatingMarkerChangesNothing) {
  TempDir tmp;
  const std::string dir = tmp.Sub("store");
  std::vector<float> w = Values(7, kElements);
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

}  // namespace
}  // namespace ckptdb
