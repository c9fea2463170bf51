// Asynchronous and incremental saves of states that change between saves, as
// a training loop's do: every tensor (an optimizer step), a tenth (a mostly
// frozen model) or none.
#include "engine/save/async_save.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/db.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::TempDir;

constexpr size_t kTensors = 10;
const Shape kShape{64, 1031};  // float32: 258 KiB, chunks of 64 KiB

struct Case {
  double changed;  // share of the tensors changed before each save
  size_t snapshot_bytes;
  bool incremental;
  // Options::writers_beside_snapshot.
  std::optional<bool> writers_beside = std::nullopt;
};

std::string Name(const Case& c) {
  std::string name("changed ");
  name.append(std::to_string(c.changed))
      .append(", snapshot_bytes ")
      .append(std::to_string(c.snapshot_bytes))
      .append(c.incremental ? ", incremental" : ", incremental off")
      .append(!c.writers_beside   ? ""
              : *c.writers_beside ? ", writers beside the copy"
                                  : ", writers after the copy");
  return name;
}

using State = std::vector<std::vector<uint8_t>>;

StateDict Dict(State& state) {
  StateDict sd;
  for (size_t i = 0; i < state.size(); ++i)
    sd.Set(std::string("t").append(std::to_string(i)),
           TensorView::Whole(state[i].data(), DType::kFloat32, kShape));
  return sd;
}

// Each save: the share's tensors changed in every byte, SaveAsync, the
// caller's tensors scribbled over at once (the snapshot must hold the bytes
// of the call), then Wait. Every checkpoint then loads as it was saved, also
// once the ones before it are deleted; bytes written are those that changed
// (all of them with incremental saves off).
void RunChain(const Case& c) {
  SCOPED_TRACE(Name(c));
  TempDir dir;
  Options options;
  options.max_chunk_bytes = 64 << 10;
  options.snapshot_bytes = c.snapshot_bytes;
  options.incremental = c.incremental;
  options.io_threads = 3;
  options.writers_beside_snapshot = c.writers_beside;
  auto db = DB::Open(options, dir.path());
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  const size_t tensor_bytes = static_cast<size_t>(NumElements(kShape)) * 4;
  std::mt19937 rng(7);
  State state(kTensors, std::vector<uint8_t>(tensor_bytes));
  for (auto& t : state)
    for (auto& b : t) b = static_cast<uint8_t>(rng());
  const size_t changed = static_cast<size_t>(std::ceil(c.changed * kTensors));
  std::vector<State> saved;
  constexpr int kSaves = 4;
  for (int step = 0; step < kSaves; ++step) {
    if (step > 0) {
      for (size_t t = 0; t < changed; ++t)
        for (auto& b : state[t]) b = static_cast<uint8_t>(b + 1 + rng() % 200);
    }
    saved.push_back(state);
    StateDict sd = Dict(state);
    auto pending = (*db)->SaveAsync(sd, {.step = step});
    ASSERT_TRUE(pending.ok()) << pending.status().ToString();
    for (auto& t : state) std::fill(t.begin(), t.end(), 0xAB);
    auto info = (*pending)->Wait();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    state = saved.back();
    const uint64_t expect_written = step == 0 || !c.incremental
                                        ? kTensors * tensor_bytes
                                        : changed * tensor_bytes;
    EXPECT_EQ(static_cast<uint64_t>(info->nbytes_written), expect_written)
        << "step " << step;
    EXPECT_EQ(static_cast<uint64_t>(info->nbytes), kTensors * tensor_bytes);
  }
  auto check = [&](int step) {
    State target(kTensors, std::vector<uint8_t>(tensor_bytes, 0));
    StateDict sd = Dict(target);
    auto loaded = (*db)->Load(sd, CheckpointSelector::Step(step), {});
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    for (size_t t = 0; t < kTensors; ++t)
      EXPECT_EQ(target[t], saved[step][t]) << "step " << step << " t" << t;
  };
  for (int step = 0; step < kSaves; ++step) check(step);
  for (int step = 0; step + 1 < kSaves; ++step)
    ASSERT_TRUE((*db)->Delete(CheckpointSelector::Step(step)).ok());
  check(kSaves - 1);
  auto report = (*db)->Verify(CheckpointSelector::Step(kSaves - 1), {});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
}

TEST(AsyncSaveTest, ChangingStatesSnapshotAndChainAtEveryChangedShare) {
  for (double changed : {1.0, 0.1, 0.0}) {
    // 0: the ring holds the state, set up in the first call; 64 KiB: one
    // chunk at a time; 8 MiB: more than the state, set up at open.
    for (size_t snapshot : {size_t{0}, size_t{64} << 10, size_t{8} << 20}) {
      for (bool incremental : {true, false}) {
        for (bool beside : {true, false})
          RunChain({changed, snapshot, incremental, beside});
      }
    }
  }
}

// A process's cores are its binding or its share of the machine: with as
// many processes on the host as cores it has none to spare, and its writers
// start after the snapshot's copy. Either way the snapshot keeps its bytes.
TEST(AsyncSaveTest, ProcessesSharingTheHostShareItsCores) {
  const unsigned machine = std::max(1u, std::thread::hardware_concurrency());
  const char* before = std::getenv("LOCAL_WORLD_SIZE");
  const std::string kept = before ? before : "";
  ASSERT_EQ(::setenv("LOCAL_WORLD_SIZE", std::to_string(machine).c_str(), 1),
            0);
  const int bound_or_one = engine::CoresOfThisProcess();
  ASSERT_EQ(::setenv("LOCAL_WORLD_SIZE", "1", 1), 0);
  const int alone = engine::CoresOfThisProcess();
  EXPECT_GE(alone, bound_or_one);
  EXPECT_GE(bound_or_one, 1);
  for (const char* processes : {"1", "100000"}) {
    ASSERT_EQ(::setenv("LOCAL_WORLD_SIZE", processes, 1), 0);
    SCOPED_TRACE(std::string("LOCAL_WORLD_SIZE=") + processes);
    if (std::string(processes) != "1") {
      EXPECT_EQ(engine::CoresOfThisProcess(), bound_or_one);
      EXPECT_FALSE(engine::HasASpareCore());
    }
    RunChain({1.0, 0, true});  // the automatic choice
    RunChain({0.1, 0, false});
  }
  if (before) {
    ::setenv("LOCAL_WORLD_SIZE", kept.c_str(), 1);
  } else {
    ::unsetenv("LOCAL_WORLD_SIZE");
  }
}

// The value directories under `store`'s values/.
int ValueDirs(const std::string& store) {
  int n = 0;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(store + "/values", ec))
    n += entry.is_directory() ? 1 : 0;
  return n;
}

// Background saves with keep_last 1: each commit's retention leaves the
// deleted checkpoint's files to the store's thread, started from the save's
// background thread; the next save waits for them before it writes, so no
// more than the kept checkpoint's and the one being removed are ever there,
// and after the close only the kept one's.
TEST(AsyncSaveTest, RetentionOfBackgroundSavesFreesTheDeletedFiles) {
  TempDir dir;
  Options options;
  options.keep_last = 1;
  options.incremental = false;
  State state(2, std::vector<uint8_t>(kShape[0] * kShape[1] * 4));
  {
    auto db = DB::Open(options, dir.path());
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    for (int step = 0; step < 6; ++step) {
      for (auto& t : state) std::fill(t.begin(), t.end(), uint8_t(step + 1));
      StateDict sd = Dict(state);
      auto pending = (*db)->SaveAsync(sd, {.step = step});
      ASSERT_TRUE(pending.ok()) << pending.status().ToString();
      ASSERT_TRUE((*pending)->Wait().ok());
      EXPECT_LE(ValueDirs(dir.path()), 2) << "after step " << step;
    }
    auto list = (*db)->ListCheckpoints();
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ(list->front().step, 5);
  }
  EXPECT_EQ(ValueDirs(dir.path()), 1);
}

}  // namespace
}  // namespace ckptdb
