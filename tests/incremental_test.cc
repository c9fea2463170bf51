// Incremental checkpoints: chains of saves that share chunks, deleted in
// every order; the remaining checkpoints load bit-exactly, and the store's
// table files shrink to what they still refer to. Damage to a shared chunk is
// reported for every checkpoint that uses it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "ckptdb/db.h"
#include "engine/save/staged_writes.h"
#include "storage/store.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;
using testing::FaultInjector;
using testing::TempDir;

constexpr int kTensors = 4;
constexpr int64_t kRows = 64;
constexpr int64_t kCols = 1024;  // 256 KiB a tensor, 4 chunks of 64 KiB

// "w<i>" (appended, not `"w" + ...`: GCC 12 warns wrongly of overlapping
// copies there once inlined).
std::string TensorName(int i) {
  std::string name = "w";
  name += std::to_string(i);
  return name;
}

struct State {
  std::vector<std::vector<float>> tensors;

  static State Make(uint32_t seed) {
    std::mt19937 rng(seed);
    State s;
    for (int i = 0; i < kTensors; ++i) {
      s.tensors.emplace_back(kRows * kCols);
      for (auto& v : s.tensors.back()) v = static_cast<float>(rng() % 100003);
    }
    return s;
  }
  // This state with tensor `i` changed in every chunk.
  State With(int i, uint32_t seed) const {
    State s = *this;
    std::mt19937 rng(seed);
    for (auto& v : s.tensors[i]) v = static_cast<float>(rng() % 100003) + 0.5f;
    return s;
  }
  StateDict Dict() {
    StateDict sd;
    for (int i = 0; i < kTensors; ++i) {
      sd.Child("model").Set(
          TensorName(i), TensorView::Whole(tensors[i].data(), DType::kFloat32,
                                           {kRows, kCols}));
    }
    return sd;
  }
};

constexpr uint64_t kTensorBytes = kRows * kCols * sizeof(float);

Options SmallChunks() {
  Options options;
  options.max_chunk_bytes = 64 << 10;
  options.io_threads = 2;
  return options;
}

// Bytes of the store's table and value files (chunks and records).
uint64_t TableBytes(const std::string& dir) {
  return ckptdb::testing::BytesUnder(dir, {".sst", ".val"});
}

void ExpectLoads(DB& db, int64_t id, const State& expected,
                 const std::string& ctx) {
  State got = State::Make(0);
  StateDict sd = got.Dict();
  auto loaded = db.Load(sd, CheckpointSelector::Id(id), {});
  ASSERT_TRUE(loaded.ok()) << ctx << ": " << loaded.status().ToString();
  EXPECT_TRUE(got.tensors == expected.tensors) << ctx << ": checkpoint " << id;
  EXPECT_TRUE(db.Verify(CheckpointSelector::Id(id)).ok()) << ctx;
}

// The store as a whole has no chunk data that no checkpoint accounts for.
void ExpectStoreAccounted(const std::string& dir, const std::string& ctx) {
  auto store = storage::Store::Open(dir, {.read_only = true});
  ASSERT_TRUE(store.ok()) << ctx << ": " << store.status().ToString();
  auto report = (*store)->Check();
  ASSERT_TRUE(report.ok()) << ctx;
  EXPECT_TRUE(report->unaccounted_chunk_ids.empty())
      << ctx << ": unaccounted chunks of id "
      << report->unaccounted_chunk_ids.front();
  EXPECT_TRUE(report->unused_value_ids.empty())
      << ctx << ": value files of id " << report->unused_value_ids.front()
      << " left";
}

class IncrementalChain : public ::testing::Test {
 protected:
  // Checkpoint 1 is states_[0]; 2 changes tensor 0; 3 changes tensor 1 of 2.
  void SetUp() override {
    states_.push_back(State::Make(1));
    states_.push_back(states_[0].With(0, 2));
    states_.push_back(states_[1].With(1, 3));
    auto db = DB::Open(SmallChunks(), templ_.path());
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    empty_bytes_ = TableBytes(templ_.path());
    for (auto& s : states_) {
      StateDict sd = s.Dict();
      auto info = (*db)->Save(sd, {});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      infos_.push_back(*info);
    }
  }

  // Table bytes a store holding `remaining` must keep, at least: the chunks
  // each of them, or a checkpoint it refers to, wrote.
  uint64_t HeldBytes(const std::set<int64_t>& remaining) const {
    std::set<int64_t> held = remaining;
    for (const auto& info : infos_) {
      if (remaining.contains(info.id))
        held.insert(info.references.begin(), info.references.end());
    }
    uint64_t bytes = 0;
    for (const auto& info : infos_) {
      if (held.contains(info.id))
        bytes += static_cast<uint64_t>(info.nbytes_written);
    }
    return bytes;
  }

  TempDir templ_;
  TempDir runs_;
  std::vector<State> states_;
  std::vector<CheckpointInfo> infos_;
  uint64_t empty_bytes_ = 0;
};

TEST_F(IncrementalChain, WritesOnlyChangedChunksAndRecordsReferences) {
  EXPECT_EQ(infos_[0].nbytes_written, infos_[0].nbytes);
  EXPECT_EQ(infos_[0].nbytes, static_cast<int64_t>(kTensors * kTensorBytes));
  EXPECT_TRUE(infos_[0].references.empty());
  EXPECT_EQ(infos_[1].nbytes_written, static_cast<int64_t>(kTensorBytes));
  EXPECT_EQ(infos_[1].references, std::vector<int64_t>{1});
  // Tensor 0 from checkpoint 2, tensors 2 and 3 still from checkpoint 1.
  EXPECT_EQ(infos_[2].nbytes_written, static_cast<int64_t>(kTensorBytes));
  EXPECT_EQ(infos_[2].references, (std::vector<int64_t>{1, 2}));
  auto db = DB::Open(SmallChunks(), templ_.path());
  ASSERT_TRUE(db.ok());
  auto listed = (*db)->ListCheckpoints();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[2].nbytes_written, infos_[2].nbytes_written);
  for (int i = 0; i < 3; ++i) ExpectLoads(**db, i + 1, states_[i], "chain");
  ExpectStoreAccounted(templ_.path(), "chain");
}

TEST_F(IncrementalChain,
       DeletesInEveryOrderKeepWhatIsReferredToAndFreeTheRest) {
  std::vector<int64_t> order = {1, 2, 3};
  do {
    std::string name;
    for (int64_t id : order) name += std::to_string(id);
    const std::string ctx = "order " + name;
    const std::string dir = runs_.Sub(name);
    fs::copy(templ_.path(), dir, fs::copy_options::recursive);
    std::set<int64_t> remaining = {1, 2, 3};
    for (int64_t id : order) {
      {
        auto db = DB::Open(SmallChunks(), dir);
        ASSERT_TRUE(db.ok()) << ctx;
        ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(id)).ok()) << ctx;
        remaining.erase(id);
        const std::string step = ctx + ", after deleting " + std::to_string(id);
        for (int64_t left : remaining)
          ExpectLoads(**db, left, states_[left - 1], step);
        // Reclaimed: at most the bytes still referred to, plus the records'
        // few KiB; never less than those.
        const uint64_t held = HeldBytes(remaining);
        const uint64_t disk = TableBytes(dir);
        EXPECT_GE(disk, held) << step;
        EXPECT_LE(disk, held + empty_bytes_ + (64 << 10)) << step;
      }
      ExpectStoreAccounted(dir, ctx);
      // A reopen (recovery) keeps every remaining checkpoint whole.
      auto db = DB::Open(SmallChunks(), dir);
      ASSERT_TRUE(db.ok()) << ctx;
      for (int64_t left : remaining)
        ExpectLoads(**db, left, states_[left - 1], ctx + " (reopened)");
      ASSERT_TRUE((*db)->Close().ok());
    }
    EXPECT_LE(TableBytes(dir), empty_bytes_ + (64 << 10)) << ctx;
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_F(IncrementalChain, ASaveAfterDeletesStillRefersToTheKeptBytes) {
  auto db = DB::Open(SmallChunks(), templ_.path());
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(1)).ok());
  ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(2)).ok());
  // Checkpoint 4 equals 3 but tensor 3: refers to 1 (deleted, kept for 3),
  // 2 and 3.
  State fourth = states_[2].With(3, 4);
  StateDict sd = fourth.Dict();
  auto info = (*db)->Save(sd, {});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->nbytes_written, static_cast<int64_t>(kTensorBytes));
  EXPECT_EQ(info->references, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(3)).ok());
  ExpectLoads(**db, 4, fourth, "after deleting 3");
  ExpectStoreAccounted(templ_.path(), "after deleting 3");
}

// A tensor trained for two saves and then frozen: the first save that finds
// it unchanged writes its bytes as it hashes them and takes them back, so
// that save writes nothing and its store grows by its record alone; later
// saves hash it first. Every checkpoint loads bit-exactly, the store holds no
// stray or unused value file, and a tensor that changes again is written.
TEST(IncrementalTest, ATensorThatStopsChangingIsWrittenNoMore) {
  TempDir dir;
  auto db = DB::Open(SmallChunks(), dir.path());
  ASSERT_TRUE(db.ok());
  std::vector<State> states = {State::Make(21)};
  states.push_back(states[0].With(0, 22));  // tensor 0 changed
  states.push_back(states[1].With(0, 23));  // and again
  states.push_back(states[2]);              // nothing changed
  states.push_back(states[2]);              // nothing changed
  states.push_back(states[2].With(0, 24));  // tensor 0 changed again
  const std::vector<int64_t> written = {
      kTensors * kTensorBytes, kTensorBytes, kTensorBytes, 0, 0, kTensorBytes};
  for (size_t i = 0; i < states.size(); ++i) {
    const uint64_t before = TableBytes(dir.path());
    StateDict sd = states[i].Dict();
    auto info = (*db)->Save(sd, {});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->nbytes_written, written[i]) << "save " << i + 1;
    if (written[i] == 0) {  // the record's few KiB, no chunk bytes
      EXPECT_LT(TableBytes(dir.path()), before + (32 << 10))
          << "save " << i + 1;
    }
  }
  for (size_t i = 0; i < states.size(); ++i) {
    ExpectLoads(**db, static_cast<int64_t>(i + 1), states[i], "frozen");
  }
  ASSERT_TRUE((*db)->Close().ok());
  ExpectStoreAccounted(dir.path(), "frozen");
  auto store = storage::Store::Open(dir.path(), {.read_only = true});
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->Check()->stray_value_files.empty());
}

TEST(IncrementalTest, OffWritesEveryChunk) {
  TempDir dir;
  Options options = SmallChunks();
  options.incremental = false;
  auto db = DB::Open(options, dir.path());
  ASSERT_TRUE(db.ok());
  State s = State::Make(9);
  for (int i = 0; i < 2; ++i) {
    StateDict sd = s.Dict();
    auto info = (*db)->Save(sd, {});
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->nbytes_written, info->nbytes);
    EXPECT_TRUE(info->references.empty());
  }
  // Turned on later: the first save finds no hashes to compare with (as in a
  // store written before incremental saves), the next one shares.
  ASSERT_TRUE((*db)->Close().ok());
  db = DB::Open(SmallChunks(), dir.path());
  ASSERT_TRUE(db.ok());
  for (int i = 0; i < 2; ++i) {
    StateDict sd = s.Dict();
    auto info = (*db)->Save(sd, {});
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->nbytes_written, i == 0 ? info->nbytes : 0) << i;
  }
  ExpectLoads(**db, 4, s, "off then on");
}

// A value file of checkpoint 1 removed or cut by hand after it was saved: a
// later save that would share its chunks is refused (Corruption naming the
// file, nothing committed) instead of committing a checkpoint that cannot
// load; the checkpoints already kept stay; with incremental saves off, the
// same state saves and loads.
// The caller holds the bytes of a shared chunk whose value file is gone or
// cut short: the next save shares nothing and writes every chunk again, and
// the store's LOG names the lost file.
TEST(IncrementalTest, ASaveWritesAgainTheChunksWhoseValueFileIsGone) {
  for (const bool cut : {false, true}) {
    TempDir dir;
    State s = State::Make(11);
    std::string file;
    auto db = DB::Open(SmallChunks(), dir.path());
    ASSERT_TRUE(db.ok());
    StateDict sd = s.Dict();
    ASSERT_TRUE((*db)->Save(sd, {}).ok());
    for (const auto& found :
         ckptdb::testing::FilesUnder(dir.path() + "/values/1"))
      file = found.path.string();
    ASSERT_FALSE(file.empty());
    if (cut)
      fs::resize_file(file, fs::file_size(file) - 1);
    else
      fs::remove(file);
    State changed = s.With(0, 12);
    StateDict next = changed.Dict();
    auto info = (*db)->Save(next, {});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->nbytes_written, info->nbytes);
    EXPECT_TRUE(info->references.empty());
    ExpectLoads(**db, info->id, changed, cut ? "cut" : "removed");
    // Saves after it share its chunks again.
    auto again = (*db)->Save(next, {});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->nbytes_written, 0);
    std::ifstream log(dir.path() + "/LOG");
    std::stringstream lines;
    lines << log.rdbuf();
    EXPECT_NE(lines.str().find(file), std::string::npos);
  }
}

// A rank other than 0 compares with its own chunks of the last save, kept in
// memory: it reads no record and does not re-open its handle, so a save costs
// it no store access beyond its staged files. Shown by making every re-open of
// rank 1's handle fail after the first save: the next saves still work and
// share every unchanged chunk of both ranks, and one changed tensor is all
// they write. (Before, rank 1 re-read the last record through a re-opened
// handle, and the failed re-open made its save fail.)
TEST(IncrementalTest, RanksOtherThanZeroCompareWithTheirOwnLastChunks) {
  TempDir dir;
  auto faults = std::make_shared<FaultInjector>();
  auto comms = InProcessCommunicators(2);
  State s = State::Make(5);
  State changed = s.With(2, 6);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Options options = SmallChunks();
      if (rank == 1) options.file_system_hooks = faults;
      auto db = DB::Open(options, dir.path(), comms[rank]);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      auto save = [&](State& state, int64_t step) -> Result<CheckpointInfo> {
        StateDict sd;
        for (int i = 0; i < kTensors; ++i) {
          // Each rank holds half of every tensor's rows.
          sd.Child("model").Set(
              TensorName(i),
              TensorView::Shard(
                  state.tensors[i].data() + rank * (kRows / 2) * kCols,
                  DType::kFloat32, {kRows / 2, kCols}, {kRows, kCols},
                  {rank * (kRows / 2), 0}));
        }
        return (*db)->Save(sd, {.step = step});
      };
      auto first = save(s, 1);
      ASSERT_TRUE(first.ok()) << first.status().ToString();
      ASSERT_TRUE(comms[rank]->Barrier().ok());
      if (rank == 1) {
        faults->Arm({.nth = 1,
                     .from_nth_on = true,
                     .ops = FileOpMask(FileOp::kOpen),
                     .path_contains = "MANIFEST"});
      }
      ASSERT_TRUE(comms[rank]->Barrier().ok());
      auto same = save(s, 2);
      ASSERT_TRUE(same.ok())
          << "rank " << rank << ": " << same.status().ToString();
      EXPECT_EQ(same->nbytes_written, 0) << "rank " << rank;
      auto next = save(changed, 3);
      ASSERT_TRUE(next.ok())
          << "rank " << rank << ": " << next.status().ToString();
      EXPECT_EQ(next->nbytes_written, static_cast<int64_t>(kTensorBytes))
          << "rank " << rank;
      // Back to the state of checkpoint 2: every chunk is among what the
      // ranks kept of their last commits.
      auto back = save(s, 4);
      ASSERT_TRUE(back.ok())
          << "rank " << rank << ": " << back.status().ToString();
      EXPECT_EQ(back->nbytes_written, 0) << "rank " << rank;
      ASSERT_TRUE(comms[rank]->Barrier().ok());
      if (rank == 1) faults->Disarm();
    });
  }
  for (auto& t : ranks) t.join();
  auto db = DB::Open(SmallChunks(), dir.path());
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ExpectLoads(**db, 2, s, "unchanged");
  ExpectLoads(**db, 3, changed, "one tensor changed");
  ExpectLoads(**db, 4, s, "changed back");
}

// A state that goes back to an earlier one (A, B, then A again) shares A's
// bytes while A is among the newest Options::incremental_depth checkpoints,
// whether the handle kept A's record or reads it from the store; the shared
// bytes outlive A's deletion.
TEST(IncrementalTest, AStateThatGoesBackSharesTheBytesOfAnEarlierCheckpoint) {
  const State a = State::Make(31);
  const State b = a.With(0, 32).With(1, 33);
  for (const bool reopen : {false, true}) {
    for (const int depth : {1, 2, 4}) {
      const std::string ctx = "depth " + std::to_string(depth) +
                              (reopen ? ", reopened between saves" : "");
      TempDir dir;
      Options options = SmallChunks();
      options.incremental_depth = depth;
      std::vector<CheckpointInfo> infos;
      auto db = DB::Open(options, dir.path());
      ASSERT_TRUE(db.ok()) << ctx;
      for (const State* state : {&a, &b, &a}) {
        if (reopen) {
          ASSERT_TRUE((*db)->Close().ok());
          db = DB::Open(options, dir.path());
          ASSERT_TRUE(db.ok()) << ctx;
        }
        State copy = *state;
        StateDict sd = copy.Dict();
        auto info = (*db)->Save(sd, {});
        ASSERT_TRUE(info.ok()) << ctx << ": " << info.status().ToString();
        infos.push_back(*info);
      }
      // Tensors 0 and 1 went back to checkpoint 1's values.
      const int64_t changed_back = 2 * kTensorBytes;
      EXPECT_EQ(infos[1].nbytes_written, changed_back) << ctx;
      EXPECT_EQ(infos[2].nbytes_written, depth >= 2 ? 0 : changed_back) << ctx;
      // Tensors 2 and 3 never changed: checkpoint 1's bytes either way.
      EXPECT_EQ(infos[2].references, std::vector<int64_t>{1}) << ctx;
      ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(1)).ok()) << ctx;
      ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(2)).ok()) << ctx;
      ExpectLoads(**db, 3, a, ctx);
      ASSERT_TRUE((*db)->Close().ok());
      ExpectStoreAccounted(dir.path(), ctx);
    }
  }
}

TEST(IncrementalTest, AChangedDtypeOrShapeIsWrittenAgain) {
  TempDir dir;
  auto db = DB::Open(SmallChunks(), dir.path());
  ASSERT_TRUE(db.ok());
  std::vector<int32_t> a(kRows * kCols, 7);
  StateDict first;
  first.Set("w", TensorView::Whole(a.data(), DType::kInt32, {kRows, kCols}));
  ASSERT_TRUE((*db)->Save(first, {}).ok());
  // The same bytes as float32, then as another shape.
  StateDict as_float;
  as_float.Set("w",
               TensorView::Whole(a.data(), DType::kFloat32, {kRows, kCols}));
  auto info = (*db)->Save(as_float, {});
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->nbytes_written, info->nbytes);
  StateDict reshaped;
  reshaped.Set("w", TensorView::Whole(a.data(), DType::kFloat32,
                                      {kRows * 2, kCols / 2}));
  info = (*db)->Save(reshaped, {});
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->nbytes_written, info->nbytes);
}

// Flips a byte of every table or value file holding `probe`; true when one
// did.
bool Damage(const std::string& dir, const std::string& probe) {
  return ckptdb::testing::DamageStoredBytes(dir, probe, 10);
}

TEST(IncrementalTest, ADamagedSharedChunkIsReportedForEveryCheckpointUsingIt) {
  TempDir dir;
  State first = State::Make(5);
  State second = first.With(0, 6);
  State third = second.With(1, 7);
  {
    auto db = DB::Open(SmallChunks(), dir.path());
    ASSERT_TRUE(db.ok());
    for (State* s : {&first, &second, &third}) {
      StateDict sd = s->Dict();
      ASSERT_TRUE((*db)->Save(sd, {}).ok());
    }
  }
  // Tensor 2's first chunk: written by checkpoint 1, used by all three.
  const std::string probe(
      reinterpret_cast<const char*>(first.tensors[2].data()) + 1000, 64);
  ASSERT_TRUE(Damage(dir.path(), probe));
  auto db = DB::Open(SmallChunks(), dir.path());
  ASSERT_TRUE(db.ok());
  for (int64_t id = 1; id <= 3; ++id) {
    Status verified = (*db)->Verify(CheckpointSelector::Id(id));
    EXPECT_TRUE(verified.IsCorruption()) << id << ": " << verified.ToString();
    EXPECT_NE(verified.message().find("model.w2"), std::string::npos)
        << verified.ToString();
    State got = State::Make(0);
    StateDict sd = got.Dict();
    auto loaded = (*db)->Load(sd, CheckpointSelector::Id(id), {});
    EXPECT_TRUE(loaded.status().IsCorruption()) << id;
  }
}

// A shared chunk whose stored bytes were damaged after they were written: a
// later save of the same state (same handle, as a training loop would) writes
// that chunk again from memory instead of sharing it, once the handle checks
// it again (within 2 * kRecheckSaves saves), so its checkpoint loads whole;
// the saves after it share the new copy, and the checkpoints that hold or
// share the damaged one report it.
TEST(IncrementalTest, AChunkWhoseStoredBytesWereDamagedIsWrittenAgain) {
  TempDir dir;
  State s = State::Make(5);
  auto db = DB::Open(SmallChunks(), dir.path());
  ASSERT_TRUE(db.ok());
  StateDict sd = s.Dict();
  ASSERT_TRUE((*db)->Save(sd, {}).ok());
  auto shared = (*db)->Save(sd, {});  // checks checkpoint 1's chunks
  ASSERT_TRUE(shared.ok());
  ASSERT_EQ(shared->nbytes_written, 0);
  // Tensor 2's first chunk of 64 KiB, written by checkpoint 1.
  const std::string probe(
      reinterpret_cast<const char*>(s.tensors[2].data()) + 1000, 64);
  ASSERT_TRUE(Damage(dir.path(), probe));
  std::optional<CheckpointInfo> healed;
  std::vector<int64_t> sharing_damage = {1, shared->id};
  for (uint64_t i = 0; i < 2 * engine::CheckedChunks::kRecheckSaves; ++i) {
    auto info = (*db)->Save(sd, {});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    if (info->nbytes_written != 0) {
      EXPECT_EQ(info->nbytes_written, 64 << 10);
      healed = *info;
      break;
    }
    sharing_damage.push_back(info->id);
  }
  ASSERT_TRUE(healed.has_value()) << "the damaged chunk is still shared";
  ExpectLoads(**db, healed->id, s, "after the damage");
  auto next = (*db)->Save(sd, {});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->nbytes_written, 0);
  ExpectLoads(**db, next->id, s, "sharing the rewritten chunk");
  for (const int64_t id : sharing_damage) {
    const Status verified = (*db)->Verify(CheckpointSelector::Id(id));
    EXPECT_TRUE(verified.IsCorruption()) << id << ": " << verified.ToString();
  }
}

// A handle reads the stored bytes of a chunk it shares at the first save that
// shares it, then again only every kRecheckSaves to 2 * kRecheckSaves - 1
// saves: a state that stopped changing is not read whole at every save. A
// new handle checks them at its first save.
TEST(IncrementalTest,
     AHandleChecksTheBytesItSharesAtItsFirstSaveAndSeldomAfter) {
  TempDir dir;
  State s = State::Make(5);
  auto faults = std::make_shared<FaultInjector>();
  Options options = SmallChunks();
  options.file_system_hooks = faults;
  StateDict sd = s.Dict();
  // Reads of checkpoint 1's value files during one save.
  auto reads_of_first = [&](DB& db) {
    faults->Arm({.ops = FileOpMask(FileOp::kOpen) | FileOpMask(FileOp::kRead),
                 .path_contains = "/values/1/"});
    auto info = db.Save(sd, {});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->nbytes_written, 0);
    EXPECT_EQ(info->references, std::vector<int64_t>{1});
    return faults->calls();
  };
  constexpr uint64_t kRecheck = engine::CheckedChunks::kRecheckSaves;
  {
    auto db = DB::Open(options, dir.path());
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Save(sd, {}).ok());
    EXPECT_GT(reads_of_first(**db), 0);
    for (uint64_t i = 1; i < kRecheck; ++i)
      EXPECT_EQ(reads_of_first(**db), 0) << i;
    int64_t rechecks = 0;
    for (uint64_t i = 0; i < kRecheck; ++i) rechecks += reads_of_first(**db);
    EXPECT_GT(rechecks, 0);
  }
  auto db = DB::Open(options, dir.path());
  ASSERT_TRUE(db.ok());
  EXPECT_GT(reads_of_first(**db), 0);
  EXPECT_EQ(reads_of_first(**db), 0);
}

}  // namespace
}  // namespace ckptdb
