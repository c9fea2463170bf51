// Calls on one handle beside each other: an asynchronous save and the calls
// that follow it, and calls from several threads.
#include <gtest/gtest.h>

#include <algorithm>
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

// Every other collective call waits for the pending save first; invalid
// input fails at once; a background failure (a full disk) comes from Wait and
// leaves the store as it was.
TEST(DBTest, SaveAsyncWithOtherCallsAndFailures) {
  TempDir dir;
  auto faults = std::make_shared<FaultInjector>();
  auto db = OpenOrDie(dir.path(), WithHooks(faults));
  Buf w(DType::kFloat32, {300, 500});
  StateDict sd;
  sd.Set("w", w.Whole());
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
  faults->Arm({.nth = 1,
               .from_nth_on = true,
               .ops = FileOpMask(FileOp::kWrite) | FileOpMask(FileOp::kSync),
               .error = ENOSPC});
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
