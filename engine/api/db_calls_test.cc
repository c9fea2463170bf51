// Calls on one handle beside each other: an asynchronous save and the calls
// that follow it, and calls from several threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/db.h"
#include "engine/api/db_testing.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::Buf;
using testing::FaultInjector;
using testing::OpenOrDie;
using testing::TempDir;
using testing::WithHooks;

// SaveAsync returns once the bytes are copied: overwriting the tensors right
// after it leaves the checkpoint with the old values, whatever the snapshot
// budget (one chunk: the call waits for writes; none: the whole state).
TEST(DBTest, SaveAsyncSnapshotsTheStateBeforeReturning) {
  for (size_t budget : {size_t{0}, size_t{1}, size_t{3} << 16}) {
    TempDir dir;
    Options options;
    options.max_chunk_bytes = 64 << 10;
    options.snapshot_bytes = budget;
    options.io_threads = 3;
    auto db = OpenOrDie(dir.path(), options);
    std::vector<Buf> bufs;
    for (uint32_t i = 0; i < 5; ++i)
      bufs.emplace_back(DType::kFloat32, Shape{97, 1031}, i);
    const std::vector<Buf> original = bufs;
    StateDict sd;
    for (size_t i = 0; i < bufs.size(); ++i)
      sd.Set(std::string("t").append(std::to_string(i)), bufs[i].Whole());
    auto pending = db->SaveAsync(sd, {.step = 1});
    ASSERT_TRUE(pending.ok()) << pending.status().ToString();
    for (Buf& b : bufs) std::fill(b.bytes.begin(), b.bytes.end(), 0xAB);
    auto info = (*pending)->Wait();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_TRUE((*pending)->Done());
    EXPECT_EQ(info->step, 1);
    EXPECT_TRUE((*pending)->Wait().ok());  // again: the same outcome
    ASSERT_TRUE(db->Load(sd, CheckpointSelector::Step(1), {}).ok());
    for (size_t i = 0; i < bufs.size(); ++i)
      EXPECT_EQ(bufs[i].bytes, original[i].bytes)
          << "budget " << budget << " t" << i;
  }
}

// A store of a state of one tensor, on a disk that fills up on demand.
struct StoreOnAFillingDisk {
  TempDir dir;
  std::shared_ptr<FaultInjector> faults = std::make_shared<FaultInjector>();
  std::unique_ptr<DB> db = OpenOrDie(dir.path(), WithHooks(faults));
  Buf w{DType::kFloat32, {300, 500}};
  StateDict sd;

  StoreOnAFillingDisk() { sd.Set("w", w.Whole()); }
  // Every write and sync from now on fails with ENOSPC, until Disarm.
  void FillTheDisk() {
    faults->Arm({.nth = 1,
                 .from_nth_on = true,
                 .ops = FileOpMask(FileOp::kWrite) | FileOpMask(FileOp::kSync),
                 .error = ENOSPC});
  }
};

// Every other collective call waits for the pending save first; invalid
// input fails at once; a background failure (a full disk) comes from Wait and
// leaves the store as it was.
TEST(DBTest, SaveAsyncWithOtherCallsAndFailures) {
  StoreOnAFillingDisk store;
  auto& [dir, faults, db, w, sd] = store;
  auto a = db->SaveAsync(sd, {.step = 1});
  ASSERT_TRUE(a.ok());
  auto b = db->Save(sd, {.step = 2});  // waits for the first
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*a)->Done());
  EXPECT_LT((*a)->Wait()->id, b->id);
  auto c = db->SaveAsync(sd, {.step = 3});
  ASSERT_TRUE(c.ok());
  auto loaded = db->Load(sd, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE((*c)->Done());
  auto d = db->SaveAsync(sd, {.step = 4});
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(db->Delete(CheckpointSelector::Step(1)).ok());
  EXPECT_TRUE((*d)->Done());
  // Invalid input: at once, nothing pending.
  auto dup = db->SaveAsync(sd, {.tag = std::string("x")});
  ASSERT_TRUE(dup.ok());
  auto again = db->SaveAsync(sd, {.tag = std::string("x")});
  EXPECT_TRUE(again.status().IsInvalidArgument()) << again.status().ToString();
  ASSERT_TRUE((*dup)->Wait().ok());
  // A full disk during the background write.
  store.FillTheDisk();
  auto full = db->SaveAsync(sd, {.step = 5});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  auto failed = (*full)->Wait();
  EXPECT_FALSE(failed.ok());
  faults->Disarm();
  auto list = db->ListCheckpoints();
  ASSERT_TRUE(list.ok());
  std::vector<int64_t> steps;
  for (const auto& info : *list) steps.push_back(info.step.value_or(-1));
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 3, 4, -1}));
  ASSERT_TRUE(db->Verify(CheckpointSelector::Latest()).ok());
  // The handle works on: the next asynchronous save commits, and Close waits.
  auto next = db->SaveAsync(sd, {.step = 6});
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(db->Close().ok());
  EXPECT_TRUE((*next)->Done());
  EXPECT_TRUE((*next)->Wait().ok());
  // Closing again does nothing; every other call fails.
  EXPECT_TRUE(db->Close().ok());
  EXPECT_EQ(db->ListCheckpoints().status().code(),
            StatusCode::kFailedPrecondition);
}

// A background failure no Wait() has returned is returned by the next
// collective call instead of its own work (Save, SaveAsync, Load, Delete),
// once, naming the save; Close closes and returns it; a failure that Wait()
// returned is not returned again.
TEST(DBTest, AnAsynchronousSavesFailureNoWaitReportedIsTheNextCallsError) {
  StoreOnAFillingDisk store;
  auto& [dir, faults, db, w, sd] = store;
  ASSERT_TRUE(db->Save(sd, {.step = 1}).ok());
  using Call = std::function<Status()>;
  const std::vector<std::pair<std::string, Call>> calls = {
      {"Save", [&] { return db->Save(sd, {.step = 9}).status(); }},
      {"SaveAsync",
       [&] {
         auto saving = db->SaveAsync(sd, {.step = 9});
         return saving.ok() ? (*saving)->Wait().status() : saving.status();
       }},
      {"Load",
       [&] { return db->Load(sd, CheckpointSelector::Latest(), {}).status(); }},
      {"Delete", [&] { return db->Delete(CheckpointSelector::Step(1)); }},
  };
  int64_t step = 10;
  for (const auto& [name, call] : calls) {
    // A save that succeeds first: the reserve a failed one used is back.
    ASSERT_TRUE(db->Save(sd, {.step = 1}).ok()) << name;
    store.FillTheDisk();
    auto failing = db->SaveAsync(sd, {.step = step});
    ASSERT_TRUE(failing.ok()) << name << ": " << failing.status().ToString();
    while (!(*failing)->Done()) std::this_thread::yield();
    faults->Disarm();
    const auto before = db->ListCheckpoints();
    ASSERT_TRUE(before.ok());
    const Status reported = call();
    EXPECT_TRUE(reported.IsIOError()) << name << ": " << reported.ToString();
    EXPECT_NE(reported.message().find("asynchronous save of step " +
                                      std::to_string(step) + " failed"),
              std::string::npos)
        << name << ": " << reported.ToString();
    // It did nothing else: no checkpoint saved or deleted.
    const auto after = db->ListCheckpoints();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->size(), before->size()) << name;
    // Once: the same call now does its work.
    EXPECT_TRUE(call().ok()) << name;
    EXPECT_FALSE((*failing)->Wait().ok()) << name;  // the handle still has it
    ++step;
  }
  // Returned by Wait(): not the next call's.
  store.FillTheDisk();
  auto waited = db->SaveAsync(sd, {.step = 20});
  ASSERT_TRUE(waited.ok());
  EXPECT_FALSE((*waited)->Wait().ok());
  faults->Disarm();
  EXPECT_TRUE(db->Save(sd, {.step = 21}).ok());
  // Close closes and returns it; closing again is OK.
  store.FillTheDisk();
  auto last = db->SaveAsync(sd, {.step = 22, .tag = std::string("last")});
  ASSERT_TRUE(last.ok());
  const Status closed = db->Close();
  faults->Disarm();
  EXPECT_TRUE(closed.IsIOError()) << closed.ToString();
  EXPECT_NE(closed.message().find("save of tag 'last' (step 22) failed"),
            std::string::npos)
      << closed.ToString();
  EXPECT_EQ(db->ListCheckpoints().status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(db->Close().ok());
}

// Collective calls of one handle from several threads run one after
// another: every save gets its own checkpoint, and each loads what it saved.
TEST(DBTest, SavesAndLoadsFromSeveralThreadsOfOneHandleRunOneAtATime) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  constexpr int kThreads = 3, kSaves = 5;
  constexpr size_t kFloats = 70000;  // larger than a small chunk
  std::mutex mu;
  std::map<int64_t, float> saved;  // checkpoint id -> the value saved
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> w(kFloats);
      for (int i = 0; i < kSaves; ++i) {
        const float value = static_cast<float>(t * 100 + i);
        std::fill(w.begin(), w.end(), value);
        StateDict sd;
        sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32,
                                      {static_cast<int64_t>(kFloats)}));
        auto info = db->Save(sd, {.step = t * 100 + i});
        ASSERT_TRUE(info.ok()) << info.status().ToString();
        std::vector<float> back(kFloats);
        StateDict target;
        target.Set("w", TensorView::Whole(back.data(), DType::kFloat32,
                                          {static_cast<int64_t>(kFloats)}));
        ASSERT_TRUE(
            db->Load(target, CheckpointSelector::Id(info->id), {}).ok());
        std::lock_guard lock(mu);
        EXPECT_TRUE(saved.emplace(info->id, value).second) << info->id;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto listed = db->ListCheckpoints();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), static_cast<size_t>(kThreads * kSaves));
  std::vector<float> back(kFloats);
  for (const CheckpointInfo& info : *listed) {
    StateDict target;
    target.Set("w", TensorView::Whole(back.data(), DType::kFloat32,
                                      {static_cast<int64_t>(kFloats)}));
    auto loaded = db->Load(target, CheckpointSelector::Id(info.id), {});
    ASSERT_TRUE(loaded.ok()) << info.id << ": " << loaded.status().ToString();
    EXPECT_EQ(back.front(), saved.at(info.id));
    EXPECT_EQ(back.back(), saved.at(info.id));
  }
}

}  // namespace
}  // namespace ckptdb
