// A save or delete whose outcome a rank cannot learn (its communicator fails
// after rank 0 changed the store, or delivers damaged bytes) never reports a
// plain failure for a change that happened.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/db.h"
#include "engine/api/db_testing.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::Buf;
using testing::TempDir;

// How FailingAfter fails a call: an error after the call ran, or its
// received bytes cut short or with one bit flipped (the call "succeeds").
enum class Fault { kError, kCut, kFlip };

// Passes every call to `inner`; once armed, its `fail_at`-th call (counted
// from 1) still runs on `inner` and then fails as `fault` says: the other
// ranks saw the call succeed.
class FailingAfter : public Communicator {
 public:
  explicit FailingAfter(std::shared_ptr<Communicator> inner)
      : inner_(std::move(inner)) {}
  void Arm(int fail_at, Fault fault) {
    calls_ = 0;
    fail_at_ = fail_at;
    fault_ = fault;
  }
  int calls() const { return calls_; }
  bool failed() const { return failed_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status Barrier() override { return After(inner_->Barrier()); }
  Result<std::vector<std::string>> AllGather(std::string_view bytes) override {
    auto all = inner_->AllGather(bytes);
    if (!Fails()) return all;
    if (fault_ == Fault::kError)
      return Status::IOError("injected failure of an all-gather");
    for (std::string& part : *all) Damage(&part);
    return all;
  }
  Status Broadcast(std::string* bytes, int root) override {
    Status s = inner_->Broadcast(bytes, root);
    if (!Fails()) return s;
    if (fault_ == Fault::kError)
      return Status::IOError("injected failure of a broadcast");
    Damage(bytes);
    return s;
  }
  Status Exchange(std::span<const SendBuffer> sends,
                  std::span<const RecvBuffer> recvs) override {
    return After(inner_->Exchange(sends, recvs));
  }

 private:
  bool Fails() {
    const bool fails = fail_at_ > 0 && ++calls_ == fail_at_;
    failed_ = failed_ || fails;
    return fails;
  }
  Status After(Status s) {
    if (Fails()) return Status::IOError("injected failure of an exchange");
    return s;
  }
  void Damage(std::string* bytes) const {
    if (fault_ == Fault::kCut) {
      bytes->resize(bytes->size() / 2);
    } else if (!bytes->empty()) {
      (*bytes)[bytes->size() / 3] ^= 0x04;
    }
  }

  std::shared_ptr<Communicator> inner_;
  int calls_ = 0;
  int fail_at_ = 0;
  Fault fault_ = Fault::kError;
  bool failed_ = false;
};

// Whether a read-only handle of the store at `dir` lists step `step`.
bool Listed(const std::string& dir, int64_t step) {
  Options read_only;
  read_only.read_only = true;
  auto db = DB::Open(read_only, dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  if (!db.ok()) return false;
  auto all = (*db)->ListCheckpoints();
  EXPECT_TRUE(all.ok()) << all.status().ToString();
  for (const CheckpointInfo& info :
       all.ok() ? *all : std::vector<CheckpointInfo>{})
    if (info.step == step) return true;
  return false;
}

bool Mentions(const Status& s, std::string_view what) {
  return s.message().find(what) != std::string::npos;
}

// One process: each collective call of a save and of a delete fails in turn
// (after the call ran), or hands back damaged bytes. Whenever the checkpoint
// turns out committed (or deleted), the error says so; an error that says
// nothing of it leaves the store as it was.
TEST(DBOutcomeTest, ASaveOrDeleteWhoseOutcomeCannotBeSharedSaysWhatHappened) {
  Buf w(DType::kFloat32, {64});
  StateDict state;
  state.Set("w", w.Whole());
  int saying_committed = 0;
  int saying_deleted = 0;
  for (const Fault fault : {Fault::kError, Fault::kCut, Fault::kFlip}) {
    for (int fail_at = 1;; ++fail_at) {
      TempDir dir;
      auto comm = std::make_shared<FailingAfter>(SingleProcessCommunicator());
      auto db = DB::Open({}, dir.path(), comm);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      ASSERT_TRUE((*db)->Save(state, {.step = 1}).ok());
      comm->Arm(fail_at, fault);
      auto saved = (*db)->Save(state, {.step = 2});
      const bool save_failed = comm->failed();
      comm->Arm(0, Fault::kError);
      if (saved.ok()) {
        // What a rank returns is what rank 0 committed, never bytes altered
        // on the way.
        EXPECT_EQ(saved->id, 2) << fail_at;
        EXPECT_EQ(saved->nbytes, 256) << fail_at;
        EXPECT_TRUE(Listed(dir.path(), 2)) << fail_at;
      } else if (Listed(dir.path(), 2)) {
        EXPECT_TRUE(Mentions(saved.status(), "checkpoint id 2 is committed"))
            << "call " << fail_at << ": " << saved.status().ToString();
        ++saying_committed;
      }
      // The delete of step 1, failing at the same call.
      comm->Arm(fail_at, fault);
      const Status deleted = (*db)->Delete(CheckpointSelector::Step(1));
      const bool delete_failed = comm->failed();
      comm->Arm(0, Fault::kError);
      if (!deleted.ok() && !Listed(dir.path(), 1)) {
        EXPECT_TRUE(Mentions(deleted, "checkpoint id 1 is deleted"))
            << "call " << fail_at << ": " << deleted.ToString();
        ++saying_deleted;
      }
      ASSERT_TRUE((*db)->Close().ok());
      if (!save_failed && !delete_failed) break;  // past both calls' last
    }
  }
  // The broadcast of the outcome, failed, cut short and with a bit flipped.
  EXPECT_EQ(saying_committed, 3);
  EXPECT_EQ(saying_deleted, 3);
}

// Two ranks: rank 1 cannot learn the outcome rank 0 broadcasts; it says the
// checkpoint may be committed (or deleted), and rank 0 returns it.
TEST(DBOutcomeTest, ARankThatCannotLearnTheOutcomeSaysItMayHaveHappened) {
  Buf w(DType::kFloat32, {64});
  for (const Fault fault : {Fault::kError, Fault::kCut, Fault::kFlip}) {
    TempDir dir;
    auto comms = InProcessCommunicators(2);
    auto failing = std::make_shared<FailingAfter>(comms[1]);
    std::vector<Result<CheckpointInfo>> saved(2, Status::Internal("not run"));
    std::vector<Status> deleted(2);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.emplace_back([&, rank] {
        std::shared_ptr<Communicator> comm = comms[0];
        if (rank == 1) comm = failing;
        auto db = DB::Open({}, dir.path(), comm);
        ASSERT_TRUE(db.ok()) << db.status().ToString();
        StateDict state;
        state.Set(
            "w", TensorView::Shard(w.bytes.data() + rank * 128, DType::kFloat32,
                                   {32}, {64}, {rank * 32}));
        ASSERT_TRUE((*db)->Save(state, {.step = 1}).ok());
        // Rank 1 counts the calls of a save and of a delete, then fails the
        // last one of the next (the broadcast of rank 0's outcome).
        if (rank == 1) failing->Arm(1 << 20, fault);
        ASSERT_TRUE((*db)->Save(state, {.step = 9}).ok());
        if (rank == 1) failing->Arm(failing->calls(), fault);
        saved[rank] = (*db)->Save(state, {.step = 2});
        if (rank == 1) failing->Arm(1 << 20, fault);
        ASSERT_TRUE((*db)->Delete(CheckpointSelector::Step(9)).ok());
        if (rank == 1) failing->Arm(failing->calls(), fault);
        deleted[rank] = (*db)->Delete(CheckpointSelector::Step(1));
        if (rank == 1) failing->Arm(0, Fault::kError);
        ASSERT_TRUE((*db)->Close().ok());
      });
    }
    for (auto& t : ranks) t.join();
    ASSERT_TRUE(saved[0].ok()) << saved[0].status().ToString();
    ASSERT_FALSE(saved[1].ok());
    EXPECT_TRUE(Mentions(saved[1].status(), "checkpoint id 3 may be committed"))
        << saved[1].status().ToString();
    EXPECT_TRUE(Listed(dir.path(), 2));
    EXPECT_TRUE(deleted[0].ok()) << deleted[0].ToString();
    ASSERT_FALSE(deleted[1].ok());
    EXPECT_TRUE(
        Mentions(deleted[1], "the checkpoint with step 1 may be deleted"))
        << deleted[1].ToString();
    EXPECT_FALSE(Listed(dir.path(), 1));
  }
}

}  // namespace
}  // namespace ckptdb
