// Fault sweeps: every file operation of a save, a delete, an open and a load
// is failed in turn (EIO once, EIO from then on, ENOSPC from then on), then
// the store is reopened without faults and checked: every checkpoint committed
// before the fault loads bit-exactly, the one under way is absent or whole, the
// process did not abort, and the error named the operation and the path.
//
// CKPTDB_FAULT_SWEEP_SEEDS=n (default 1) repeats the sweeps over n different
// states (shapes, chunk sizes and contents).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>

#include "ckptdb/db.h"
#include "storage/store.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;
using testing::FaultInjector;
using testing::FaultRule;
using testing::TempDir;

// One state dict's tensors, owned.
struct State {
  std::vector<std::vector<float>> tensors;
  std::vector<Shape> shapes;

  // With `multi_block`, one more tensor of 512 KiB in chunks of 64 KiB: its
  // staged file spans several table blocks (an ingestion's scan of the file's
  // key range reads more than one), and loads read its chunks straight from
  // the table file (direct reads).
  static State Make(uint32_t seed, bool multi_block = false) {
    std::mt19937 rng(seed);
    State s;
    if (multi_block) {
      s.shapes.push_back({128, 1024});
      s.tensors.emplace_back(128 * 1024);
      for (auto& v : s.tensors.back()) v = static_cast<float>(rng() % 977);
    }
    const int n = 2 + static_cast<int>(rng() % 2);
    for (int i = 0; i < n; ++i) {
      Shape shape = {static_cast<int64_t>(8 + rng() % 24),
                     static_cast<int64_t>(16 + rng() % 32)};
      std::vector<float> values(static_cast<size_t>(shape[0] * shape[1]));
      for (auto& v : values) v = static_cast<float>(rng() % 1000) / 7.0f;
      s.shapes.push_back(shape);
      s.tensors.push_back(std::move(values));
    }
    return s;
  }
  StateDict Dict() {
    StateDict sd;
    for (size_t i = 0; i < tensors.size(); ++i) {
      sd.Child("model").Set(
          std::string("w").append(std::to_string(i)),
          TensorView::Whole(tensors[i].data(), DType::kFloat32, shapes[i]));
    }
    return sd;
  }
  // A zeroed state of the same layout.
  State Empty() const {
    State s = *this;
    for (auto& t : s.tensors) std::fill(t.begin(), t.end(), 0.0f);
    return s;
  }
};

// `s` with tensor `i` changed throughout: an incremental save of it writes
// that tensor and refers to the others.
State Changed(const State& s, size_t i) {
  State out = s;
  for (auto& v : out.tensors[i]) v += 1.0f;
  return out;
}

// No chunk data in `dir` that no checkpoint accounts for (the chunks of a
// deleted checkpoint that a remaining one shares are accounted for).
void ExpectAccounted(const std::string& dir, const std::string& ctx) {
  auto store = storage::Store::Open(dir, {.read_only = true});
  ASSERT_TRUE(store.ok()) << ctx << ": " << store.status().ToString();
  auto report = (*store)->Check();
  ASSERT_TRUE(report.ok()) << ctx << ": " << report.status().ToString();
  EXPECT_TRUE(report->unaccounted_chunk_ids.empty())
      << ctx << ": chunks of id " << report->unaccounted_chunk_ids.front()
      << " unaccounted";
  EXPECT_TRUE(report->unused_value_ids.empty())
      << ctx << ": value files of id " << report->unused_value_ids.front()
      << " left";
}

int Seeds() {
  const char* env = std::getenv("CKPTDB_FAULT_SWEEP_SEEDS");
  return env ? std::max(1, std::atoi(env)) : 1;
}

struct Mode {
  const char* name;
  FaultRule rule;
};

std::vector<Mode> Modes() {
  return {
      {"EIO once", {.error = EIO}},
      {"EIO from then on", {.from_nth_on = true, .error = EIO}},
      {"ENOSPC on every write from then on",
       {.from_nth_on = true,
        .ops = FileOpMask(FileOp::kWrite) | FileOpMask(FileOp::kSync),
        .error = ENOSPC}},
  };
}

class FaultSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.max_chunk_bytes = 64 << 10;
    options_.io_threads = 1;
    options_.file_system_hooks = faults_;
  }

  // A store at `dir` holding `states` (ids 1, 2, ...), written without faults.
  void Build(const std::string& dir, std::vector<State>& states) {
    faults_->Disarm();
    auto db = DB::Open(options_, dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    for (auto& s : states) {
      StateDict sd = s.Dict();
      ASSERT_TRUE((*db)->Save(sd, {}).ok());
    }
  }

  // Every call of saving `next` (step 2) onto a store holding `before`
  // (step 1): step 1 stays whole; the faulted save is absent or whole, and an
  // error after its commit says it may have taken effect; a later save of
  // `after` (step 3), on the same handle or a reopened store, works; no chunk
  // data is left that no checkpoint accounts for. `incremental`: `next` and
  // `after` change part of the state, and both saves write less than all of
  // it.
  void SweepSave(const std::string& what, int seed, std::vector<State>& before,
                 State& next, State& after, bool incremental) {
    const std::string templ = tmp_.Sub("template" + std::to_string(seed));
    Build(templ, before);
    Sweep(
        templ, what.c_str(),
        [&](DB* db, const std::string&) {
          StateDict sd = next.Dict();
          return db->Save(sd, {.step = 2}).status();
        },
        [&](DB* db, const std::string& dir, const Status& s,
            const std::string& ctx, bool same_handle) {
          if (same_handle) {
            // A later save on the same handle works, whatever happened.
            StateDict sd = after.Dict();
            auto saved = db->Save(sd, {.step = 3});
            EXPECT_TRUE(saved.ok())
                << ctx << ": next save: " << saved.status().ToString();
            return;
          }
          Verify(dir, {{1, &before[0]}}, {}, ctx);
          auto db2 = DB::Open(options_, dir);
          ASSERT_TRUE(db2.ok());
          auto list = (*db2)->ListCheckpoints();
          ASSERT_TRUE(list.ok());
          std::optional<CheckpointInfo> faulted, later;
          for (const auto& info : *list) {
            if (info.step == 2) faulted = info;
            if (info.step == 3) later = info;
          }
          EXPECT_TRUE(!s.ok() || faulted) << ctx << ": returned OK but absent";
          if (!s.ok() && faulted) {
            EXPECT_NE(s.message().find("may have taken effect"),
                      std::string::npos)
                << ctx << ": failed, yet committed: " << s.ToString();
          }
          if (faulted) {
            if (incremental) {
              EXPECT_LT(faulted->nbytes_written, faulted->nbytes) << ctx;
            }
            ExpectLoads(**db2, faulted->id, next, ctx);
          }
          ASSERT_TRUE(later) << ctx << ": the next save is missing";
          if (incremental) {
            EXPECT_LT(later->nbytes_written, later->nbytes) << ctx;
          }
          ExpectLoads(**db2, later->id, after, ctx + " (the next save)");
          ASSERT_TRUE((*db2)->Close().ok());
          ExpectAccounted(dir, ctx);
        });
  }

  // Copies the template store to a fresh directory.
  std::string Fresh(const std::string& from) {
    const std::string to = tmp_.Sub("run" + std::to_string(++runs_));
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
  }

  // Checks, without faults, that checkpoint `id` holds `expected` exactly.
  void ExpectLoads(DB& db, int64_t id, State& expected,
                   const std::string& ctx) {
    State got = expected.Empty();
    StateDict sd = got.Dict();
    auto loaded = db.Load(sd, CheckpointSelector::Id(id), {});
    ASSERT_TRUE(loaded.ok()) << ctx << ": " << loaded.status().ToString();
    EXPECT_EQ(got.tensors, expected.tensors) << ctx << ": checkpoint " << id;
  }

  // Reopens `dir` without faults; checks that `committed` (id -> state) load
  // exactly and that `maybe` is absent or loads exactly. Returns the ids.
  std::vector<int64_t> Verify(const std::string& dir,
                              std::map<int64_t, State*> committed,
                              std::map<int64_t, State*> maybe,
                              const std::string& ctx) {
    faults_->Disarm();
    auto db = DB::Open(options_, dir);
    EXPECT_TRUE(db.ok()) << ctx << ": reopen: " << db.status().ToString();
    if (!db.ok()) return {};
    auto list = (*db)->ListCheckpoints();
    EXPECT_TRUE(list.ok()) << ctx;
    std::vector<int64_t> ids;
    for (const auto& info : *list) ids.push_back(info.id);
    for (auto& [id, state] : committed) {
      EXPECT_TRUE(std::count(ids.begin(), ids.end(), id))
          << ctx << ": lost " << id;
      ExpectLoads(**db, id, *state, ctx);
    }
    for (auto& [id, state] : maybe) {
      if (std::count(ids.begin(), ids.end(), id))
        ExpectLoads(**db, id, *state, ctx + " (partly done)");
    }
    EXPECT_TRUE((*db)->Verify(CheckpointSelector::Latest()).ok() || ids.empty())
        << ctx;
    return ids;
  }

  // An error from an injected fault names the store's path (every file is in
  // it) and, when it may have taken effect, says so.
  void ExpectNamed(const Status& s, const std::string& dir,
                   const std::string& ctx) {
    if (s.ok() || faults_->injected().empty()) return;
    EXPECT_NE(s.message().find(dir), std::string::npos)
        << ctx << ": error does not name the path: " << s.ToString();
  }

  // Runs `op` once per file operation it makes, failing that operation under
  // each mode; `check` inspects the store afterwards.
  template <typename Op, typename Check>
  void Sweep(const std::string& templ, const char* what, Op&& op,
             Check&& check) {
    // Count the operation's calls.
    {
      const std::string dir = Fresh(templ);
      faults_->Disarm();
      auto db = DB::Open(options_, dir);
      ASSERT_TRUE(db.ok());
      faults_->Arm({});
      ASSERT_TRUE(op(db->get(), dir).ok());
      calls_ = faults_->calls();
      faults_->Disarm();
    }
    ASSERT_GT(calls_, 0);
    for (const Mode& mode : Modes()) {
      for (int64_t n = 1; n <= calls_; ++n) {
        const std::string dir = Fresh(templ);
        std::string ctx = std::string(what) + ", " + mode.name + " at call " +
                          std::to_string(n) + " of " + std::to_string(calls_);
        Status s;
        if (std::getenv("CKPTDB_FAULT_SWEEP_VERBOSE"))
          std::fprintf(stderr, "%s\n", ctx.c_str());
        {
          faults_->Disarm();
          auto db = DB::Open(options_, dir);
          ASSERT_TRUE(db.ok()) << ctx;
          FaultRule rule = mode.rule;
          rule.nth = n;
          faults_->Arm(rule);
          s = op(db->get(), dir);
          for (const auto& f : faults_->injected()) {
            ctx += std::string(" [") + FileOpName(f.op) + " " +
                   f.path.substr(dir.size()) + "]";
          }
          ++injected_runs_;
          injected_faults_ += static_cast<int64_t>(faults_->injected().size());
          ExpectNamed(s, dir, ctx);
          if (!s.ok()) ctx += ": " + s.ToString();
          faults_->Disarm();
          // The handle stays usable.
          check(db->get(), dir, s, ctx, /*same_handle=*/true);
        }
        check(nullptr, dir, s, ctx, /*same_handle=*/false);
        fs::remove_all(dir);
        if (HasFatalFailure()) return;
      }
    }
  }

  void TearDown() override {
    std::printf("fault sweep: %lld runs, %lld faults injected\n",
                static_cast<long long>(injected_runs_),
                static_cast<long long>(injected_faults_));
  }

  // On tmpfs where there is one: the sweeps sync thousands of times.
  TempDir tmp_{std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : ""};
  std::shared_ptr<FaultInjector> faults_ = std::make_shared<FaultInjector>();
  Options options_;
  int runs_ = 0;
  int64_t calls_ = 0;
  int64_t injected_runs_ = 0;
  int64_t injected_faults_ = 0;
};

TEST_F(FaultSweep, EveryCallOfASave) {
  for (int seed = 1; seed <= Seeds(); ++seed) {
    std::vector<State> before = {State::Make(seed)};
    State next = State::Make(1000 + seed, /*multi_block=*/true);
    State after = State::Make(2000 + seed);
    SweepSave("save", seed, before, next, after, /*incremental=*/false);
  }
}

// A save whose retention deletes an older checkpoint: the kept ones stay
// whole whatever fails, the deleted one is gone or whole, an error after the
// commit says the checkpoint is committed, and no chunk data is left once the
// store is opened again. The handle is closed inside the swept operation:
// the deleted checkpoint's value files go on the store's thread after the
// save returns, and the close waits for them, so that every call is counted
// and failed in one order.
TEST_F(FaultSweep, EveryCallOfASaveWithRetention) {
  for (int seed = 1; seed <= Seeds(); ++seed) {
    // Steps 1, 2 (tagged), 3; the save of step 4 with keep_last 2 deletes
    // step 1 only.
    // Step 1 has value files: retention removes them on the store's thread.
    std::vector<State> states = {State::Make(seed, /*multi_block=*/true),
                                 State::Make(100 + seed),
                                 State::Make(200 + seed)};
    State next = State::Make(300 + seed);
    const std::string templ = tmp_.Sub("template" + std::to_string(seed));
    {
      auto db = DB::Open(options_, templ);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      for (int i = 0; i < 3; ++i) {
        StateDict sd = states[i].Dict();
        SaveOptions so{.step = i + 1};
        if (i == 1) so.tag = "kept";
        ASSERT_TRUE((*db)->Save(sd, so).ok());
      }
    }
    options_.keep_last = 2;
    Sweep(
        templ, "save with retention",
        [&](DB* db, const std::string&) {
          StateDict sd = next.Dict();
          Status saved = db->Save(sd, {.step = 4}).status();
          (void)db->Close();
          return saved;
        },
        [&](DB*, const std::string& dir, const Status& s,
            const std::string& ctx, bool same_handle) {
          if (same_handle) return;
          auto ids = Verify(dir, {{2, &states[1]}, {3, &states[2]}},
                            {{1, &states[0]}, {4, &next}}, ctx);
          ExpectAccounted(dir, ctx);
          const bool has1 = std::count(ids.begin(), ids.end(), 1) > 0;
          const bool has4 = std::count(ids.begin(), ids.end(), 4) > 0;
          if (s.ok()) {
            EXPECT_TRUE(has4 && !has1) << ctx;
          } else if (has4) {
            EXPECT_TRUE(s.message().find("is committed") != std::string::npos ||
                        s.message().find("may have taken effect") !=
                            std::string::npos)
                << ctx << ": failed, yet committed: " << s.ToString();
          }
        });
  }
}

TEST_F(FaultSweep, EveryCallOfADelete) {
  for (int seed = 1; seed <= Seeds(); ++seed) {
    std::vector<State> states = {State::Make(seed), State::Make(100 + seed)};
    const std::string templ = tmp_.Sub("template" + std::to_string(seed));
    Build(templ, states);
    Sweep(
        templ, "delete",
        [&](DB* db, const std::string&) {
          return db->Delete(CheckpointSelector::Id(1));
        },
        [&](DB* db, const std::string& dir, const Status& s,
            const std::string& ctx, bool same_handle) {
          if (same_handle) {
            // Deleting again on the same handle finishes the job.
            auto list = db->ListCheckpoints();
            ASSERT_TRUE(list.ok()) << ctx << ": " << list.status().ToString();
            if (!list->empty() && list->front().id == 1) {
              EXPECT_FALSE(s.ok()) << ctx << ": returned OK but still listed";
              Status again = db->Delete(CheckpointSelector::Id(1));
              EXPECT_TRUE(again.ok()) << ctx << ": " << again.ToString();
            }
            return;
          }
          auto ids = Verify(dir, {{2, &states[1]}}, {}, ctx);
          EXPECT_EQ(ids, std::vector<int64_t>{2}) << ctx;
        });
  }
}

TEST_F(FaultSweep, EveryCallOfAnIncrementalSave) {
  for (int seed = 1; seed <= Seeds(); ++seed) {
    std::vector<State> before = {State::Make(seed, /*multi_block=*/true)};
    // Writes tensor 1 only; refers to checkpoint 1 for the rest.
    State next = Changed(before[0], 1);
    State after = Changed(next, 2);
    SweepSave("incremental save", seed, before, next, after,
              /*incremental=*/true);
  }
}

// Deletes of checkpoints that share chunks: the one holding the bytes, the
// one referring to them, and the last one referring to a deleted holder.
TEST_F(FaultSweep, EveryCallOfAnIncrementalDelete) {
  for (int seed = 1; seed <= Seeds(); ++seed) {
    State first = State::Make(seed, /*multi_block=*/true);
    std::vector<State> states = {first, Changed(first, 1)};
    const std::string templ = tmp_.Sub("template" + std::to_string(seed));
    Build(templ, states);
    const std::string held = tmp_.Sub("held" + std::to_string(seed));
    fs::copy(templ, held, fs::copy_options::recursive);
    {
      auto db = DB::Open(options_, held);
      ASSERT_TRUE(db.ok());
      ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(1)).ok());
    }
    struct Case {
      std::string from;
      int64_t id;
      std::map<int64_t, State*> left;
    };
    const Case cases[] = {{templ, 1, {{2, &states[1]}}},
                          {templ, 2, {{1, &states[0]}}},
                          {held, 2, {}}};
    for (const Case& c : cases) {
      const std::string what = "incremental delete of " + std::to_string(c.id) +
                               (c.from == held ? " (its holder deleted)" : "");
      Sweep(
          c.from, what.c_str(),
          [&](DB* db, const std::string&) {
            return db->Delete(CheckpointSelector::Id(c.id));
          },
          [&](DB* db, const std::string& dir, const Status& s,
              const std::string& ctx, bool same_handle) {
            if (same_handle) {
              auto list = db->ListCheckpoints();
              ASSERT_TRUE(list.ok()) << ctx << ": " << list.status().ToString();
              for (const auto& info : *list) {
                if (info.id != c.id) continue;
                EXPECT_FALSE(s.ok()) << ctx << ": returned OK but listed";
                Status again = db->Delete(CheckpointSelector::Id(c.id));
                EXPECT_TRUE(again.ok()) << ctx << ": " << again.ToString();
              }
              return;
            }
            std::vector<int64_t> expected;
            for (const auto& [id, state] : c.left) expected.push_back(id);
            auto ids = Verify(dir, c.left, {}, ctx);
            EXPECT_EQ(ids, expected) << ctx;
            ExpectAccounted(dir, ctx);
          });
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(FaultSweep, EveryCallOfAnOpenAndALoad) {
  for (int seed = 1; seed <= Seeds(); ++seed) {
    std::vector<State> states = {State::Make(seed),
                                 State::Make(100 + seed, /*multi_block=*/true)};
    const std::string templ = tmp_.Sub("template" + std::to_string(seed));
    Build(templ, states);
    State target = states[1].Empty();
    Sweep(
        templ, "open and load",
        [&](DB* db, const std::string& dir) {
          // Closing the sweep's own handle first: the open under test is a
          // fresh read-write one.
          CKPTDB_RETURN_IF_ERROR(db->Close());
          auto reopened = DB::Open(options_, dir);
          CKPTDB_RETURN_IF_ERROR(reopened.status());
          StateDict sd = target.Dict();
          return (*reopened)
              ->Load(sd, CheckpointSelector::Latest(), {})
              .status();
        },
        [&](DB*, const std::string& dir, const Status& s,
            const std::string& ctx, bool same_handle) {
          if (same_handle) return;
          if (s.ok()) {
            EXPECT_EQ(target.tensors, states[1].tensors) << ctx;
          }
          Verify(dir, {{1, &states[0]}, {2, &states[1]}}, {}, ctx);
        });
  }
}

TEST_F(FaultSweep, AFullDiskStillOpensDeletesAndFailsSavesCleanly) {
  // Checkpoints of 1 MiB, so that deleting one frees more than it writes.
  options_.max_chunk_bytes = 256 << 10;
  // Different contents: an incremental save of equal ones would share every
  // chunk, and deleting one would free nothing.
  std::vector<State> states = {State::Make(1), State::Make(2), State::Make(3)};
  for (size_t i = 0; i < states.size(); ++i) {
    State& s = states[i];
    s.shapes = {{512, 512}};
    s.tensors = {std::vector<float>(512 * 512)};
    std::iota(s.tensors[0].begin(), s.tensors[0].end(),
              static_cast<float>(1 + i * 1000000));
  }
  const std::string dir = tmp_.Sub("full");
  Build(dir, states);
  // The checkpoints' bytes: a delete that frees room also writes the
  // reserve again (4 MiB) where the room allows.
  auto bytes_in = [&] {
    std::error_code ec;
    const uintmax_t reserve =
        std::filesystem::file_size(dir + "/CKPTDB_RESERVE", ec);
    return ckptdb::testing::BytesUnder(dir) - (ec ? 0 : reserve);
  };
  // Not one byte free.
  faults_->Arm({.free_bytes = 0});
  {
    auto db = DB::Open(options_, dir);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    EXPECT_EQ((*db)->ListCheckpoints()->size(), 3u);
    ExpectLoads(**db, 3, states[2], "full disk");
    // Deletes one after another: the second finds the reserve refilled from
    // the space the first freed, and released again.
    for (int64_t id : {1, 2}) {
      const uint64_t before = bytes_in();
      Status deleted = (*db)->Delete(CheckpointSelector::Id(id));
      ASSERT_TRUE(deleted.ok())
          << "checkpoint " << id << ": " << deleted.ToString();
      EXPECT_LT(bytes_in(), before);
    }
    EXPECT_EQ((*db)->ListCheckpoints()->size(), 1u);
    // A save larger than what the delete freed fails, and says why.
    State big;
    big.shapes = {{2048, 1024}};
    big.tensors = {std::vector<float>(2048 * 1024, 1.0f)};
    StateDict sd = big.Dict();
    auto saved = (*db)->Save(sd, {.step = 9});
    ASSERT_FALSE(saved.ok());
    EXPECT_NE(saved.status().message().find("No space"), std::string::npos)
        << saved.status().ToString();
    EXPECT_NE(saved.status().message().find(dir), std::string::npos)
        << saved.status().ToString();
    // The handle still works for what fits.
    EXPECT_EQ((*db)->ListCheckpoints()->size(), 1u);
  }
  auto ids = Verify(dir, {{3, &states[2]}}, {}, "after a full disk");
  EXPECT_EQ(ids, std::vector<int64_t>{3});
}

}  // namespace
}  // namespace ckptdb
