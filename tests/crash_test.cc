// Kills a child process with SIGKILL at random points while it saves (and
// deletes) checkpoints, then checks that every committed checkpoint loads
// bit-exactly, that no partial one is listed and that the leftovers of the
// interrupted save are gone.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "ckptdb/db.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

// The state saved at `step`: sizes and bytes depend only on the step. `b`
// changes every 4 steps only: saves in between refer to its stored chunks
// (incremental saves), and deletes meet shared chunks.
struct StepState {
  std::vector<uint8_t> a, b;
  std::vector<int64_t> c;
  explicit StepState(int64_t step) {
    std::mt19937_64 rng(static_cast<uint64_t>(step));
    std::mt19937_64 rng_b(static_cast<uint64_t>(1'000'003 + step / 4));
    a.resize(200'000 + (step % 7) * 50'000);
    b.resize(600'000 + ((step / 4) % 3) * 100'000);
    c.resize(1000 + static_cast<size_t>(step % 5));
    for (auto& x : a) x = static_cast<uint8_t>(rng());
    for (auto& x : b) x = static_cast<uint8_t>(rng_b());
    for (auto& x : c) x = static_cast<int64_t>(rng());
  }
  StateDict Dict() {
    StateDict sd;
    sd.Child("model").Set("a",
                          TensorView::Whole(a.data(), DType::kUInt8,
                                            {static_cast<int64_t>(a.size())}));
    sd.Child("model").Set(
        "b", TensorView::Whole(b.data(), DType::kInt16,
                               {static_cast<int64_t>(b.size() / 2)}));
    sd.Child("optimizer")
        .Set("c", TensorView::Whole(c.data(), DType::kInt64,
                                    {static_cast<int64_t>(c.size())}));
    return sd;
  }
};

// The largest StepState's bytes.
constexpr uint64_t kMostStateBytes =
    (200'000 + 6 * 50'000) + (600'000 + 2 * 100'000) + (1000 + 4) * 8;

Options StoreOptions() {
  Options options;
  options.max_chunk_bytes = 128 << 10;
  return options;
}

constexpr char kChildFlag[] = "--save-forever";

// Child: save forever, deleting old checkpoints now and then, writing one byte
// to `progress_fd` after each commit. With `async`, saves are SaveAsync with
// retention (keep_last 3) in the background, and the state is overwritten as
// soon as the call returns, as training would. Never returns.
[[noreturn]] void SaveForever(const std::string& path, int64_t first_step,
                              int progress_fd, bool async) {
  Options options = StoreOptions();
  if (async) options.keep_last = 3;
  auto db = DB::Open(options, path);
  if (!db.ok()) _exit(2);
  for (int64_t step = first_step;; ++step) {
    StepState state(step);
    if (async) {
      auto pending = (*db)->SaveAsync(state.Dict(), {.step = step});
      if (!pending.ok()) _exit(3);
      std::fill(state.a.begin(), state.a.end(), 0xEE);
      std::fill(state.b.begin(), state.b.end(), 0xEE);
      if (!(*pending)->Wait().ok()) _exit(3);
    } else if (!(*db)->Save(state.Dict(), {.step = step}).ok()) {
      _exit(3);
    }
    if (write(progress_fd, "s", 1) != 1) _exit(6);
    if (!async && step % 3 == 0) {
      auto list = (*db)->ListCheckpoints();
      if (list.ok() && list->size() > 3) {
        if (!(*db)->Delete(CheckpointSelector::Id(list->front().id)).ok())
          _exit(4);
      }
    }
  }
}

// Waits up to 30 s for `n` progress bytes; false on timeout or end of file.
bool AwaitCommits(int fd, int n) {
  for (int i = 0; i < n; ++i) {
    pollfd p{fd, POLLIN, 0};
    char byte;
    if (poll(&p, 1, 30000) != 1 || read(fd, &byte, 1) != 1) return false;
  }
  return true;
}

uint64_t SstBytes(const std::string& dir) {
  return ckptdb::testing::BytesUnder(dir, {".sst", ".val"});
}

// Checkpoint `info` loads as the state of its step.
void ExpectLoadsExactly(DB& db, const CheckpointInfo& info) {
  StepState expected(*info.step);
  StepState loaded(*info.step);
  std::fill(loaded.a.begin(), loaded.a.end(), 0);
  std::fill(loaded.b.begin(), loaded.b.end(), 0);
  std::fill(loaded.c.begin(), loaded.c.end(), 0);
  StateDict target = loaded.Dict();
  auto result = db.Load(target, CheckpointSelector::Id(info.id), {});
  ASSERT_TRUE(result.ok()) << "checkpoint " << info.id << ": "
                           << result.status().ToString();
  ASSERT_EQ(loaded.a, expected.a);
  ASSERT_EQ(loaded.b, expected.b);
  ASSERT_EQ(loaded.c, expected.c);
}

// Runs a child saving forever into `path` from `next_step` and kills it.
void RunAndKill(const std::string& path, int64_t next_step, bool async,
                std::mt19937& rng) {
  // A fresh process (fork + exec of this binary): RocksDB's background
  // threads of this one would not exist in a forked child.
  // It reports each commit; the kill comes after 0 to 3 of them plus a random
  // delay, so it lands anywhere in a save (or a delete), never only in Open.
  int progress[2];
  ASSERT_EQ(pipe(progress), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(progress[0]);
    const std::string step = std::to_string(next_step);
    const std::string fd = std::to_string(progress[1]);
    execl("/proc/self/exe", "crash_test", kChildFlag, path.c_str(),
          step.c_str(), fd.c_str(), async ? "async" : "sync",
          static_cast<char*>(nullptr));
    _exit(5);
  }
  close(progress[1]);
  const bool progressed =
      AwaitCommits(progress[0], static_cast<int>(rng() % 4));
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
  kill(pid, SIGKILL);
  close(progress[0]);
  ASSERT_TRUE(progressed) << "the child made no progress";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status))
      << "child exited with " << WEXITSTATUS(status);
}

// 24 rounds of: a child saving forever (asynchronously with `async`), killed
// at a random point; the store is then checked.
void KillRounds(bool async) {
  testing::TempDir dir;
  // CKPTDB_CRASH_SEED varies the kill points for exploratory runs.
  const char* seed = std::getenv("CKPTDB_CRASH_SEED");
  std::mt19937 rng(seed ? static_cast<unsigned>(std::stoul(seed)) : 2024u);
  int64_t next_step = 1;
  int killed_with_commits = 0;
  int64_t max_id = 0;
  size_t listed = 0;
  int incremental = 0;
  for (int round = 0; round < 24; ++round) {
    ASSERT_NO_FATAL_FAILURE(RunAndKill(dir.path(), next_step, async, rng));

    auto db = DB::Open(StoreOptions(), dir.path());
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    auto list = (*db)->ListCheckpoints();
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    // What the store may hold: the bytes each listed checkpoint wrote, and
    // the chunk file of each deleted checkpoint a listed one still refers to
    // (kept whole while any of its chunks is used), at most a whole state.
    uint64_t committed_bytes = 0;
    std::set<int64_t> ids, holders;
    for (const CheckpointInfo& info : *list) {
      ASSERT_TRUE(info.step.has_value());
      next_step = std::max(next_step, *info.step + 1);
      ASSERT_NO_FATAL_FAILURE(ExpectLoadsExactly(**db, info));
      committed_bytes += static_cast<uint64_t>(info.nbytes_written);
      if (info.nbytes_written < info.nbytes) ++incremental;
      ids.insert(info.id);
      holders.insert(info.references.begin(), info.references.end());
    }
    for (int64_t holder : holders) {
      if (!ids.contains(holder)) committed_bytes += kMostStateBytes;
    }
    if (!list->empty()) ++killed_with_commits;
    for (const CheckpointInfo& info : *list) max_id = std::max(max_id, info.id);
    listed = list->size();
    // Leftovers of the killed save are gone: no staged files, no uncommitted
    // chunk files.
    EXPECT_FALSE(std::filesystem::exists(dir.Sub("staging")));
    EXPECT_LE(SstBytes(dir.path()),
              committed_bytes + committed_bytes / 10 + (64 << 10));
    next_step += 1000;  // a killed save's step is never reused, so its bytes
                        // cannot be mistaken
  }
  EXPECT_GT(killed_with_commits, 10);
  EXPECT_GT(incremental, 0) << "no checkpoint shared chunks";
  // The children also deleted checkpoints (ids that are no longer listed).
  EXPECT_GT(max_id, static_cast<int64_t>(listed));
  std::printf(
      "%s: %lld checkpoints committed over 24 kills, %zu listed at the end; "
      "%d listings of incremental checkpoints\n",
      async ? "async saves" : "saves", static_cast<long long>(max_id), listed,
      incremental);
}

TEST(CrashTest, KilledSavesNeverLeavePartialCheckpoints) { KillRounds(false); }

// Kill points inside asynchronous saves: during the snapshot, the background
// write, the commit and retention's deletions.
TEST(CrashTest, KilledAsyncSavesNeverLeavePartialCheckpoints) {
  KillRounds(true);
}

}  // namespace
}  // namespace ckptdb

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == ckptdb::kChildFlag) {
    ckptdb::SaveForever(argv[2], std::stoll(argv[3]), std::stoi(argv[4]),
                        std::string(argv[5]) == "async");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
