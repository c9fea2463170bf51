// Arguments of collective calls that every rank must pass alike: a rank that
// passes another step, tag, user metadata, selector, strict or cast makes every
// rank fail with InvalidArgument naming the argument and the ranks, before
// anything is written; so do a save against a save_async, and an open's
// options that every rank acts on alike. Built twice (tests/testing/group.h):
// ranks as threads (multirank_test) and ranks as mpirun processes
// (mpi_multirank_test).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "ckptdb/db.h"
#include "tests/testing/group.h"
#include "tests/testing/ranks.h"

namespace ckptdb {
namespace {

using testing::GlobalTensor;
using testing::MaxRanks;
using testing::OpenRank;
using testing::OwnedShard;
using testing::Part;
using testing::RunRanks;
using testing::ShardOf;
using testing::SharedTempDir;
using testing::SumOver;
using testing::TargetOf;

// Expects `status` to be InvalidArgument holding `needle`, on every rank.
void ExpectDisagreement(Communicator& comm, const Status& status,
                        const std::string& needle) {
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << status.ToString();
  EXPECT_EQ(testing::SumOver(comm, status.IsInvalidArgument() ? 1 : 0),
            static_cast<uint64_t>(comm.size()))
      << "every rank must see the error";
}

// Rank `rank`'s block of the 6 rows of `w` (6 x 4), of 3 ranks.
OwnedShard RowsOf(const GlobalTensor& w, int rank) {
  auto [b, e] = Part(6, rank, 3);
  return ShardOf(w, {b, 0}, {e - b, 4});
}

// Expects the store to hold the checkpoints of `steps` and no staged file.
void ExpectStore(DB& db, Communicator& comm, const std::string& dir,
                 const std::vector<std::optional<int64_t>>& steps) {
  auto listed = db.ListCheckpoints();
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<std::optional<int64_t>> got;
  if (listed.ok()) {
    for (const CheckpointInfo& info : *listed) got.push_back(info.step);
  }
  EXPECT_EQ(got, steps);
  EXPECT_TRUE(comm.Barrier().ok());
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(dir + "/staging", ec)) {
    ADD_FAILURE() << "left in staging: " << entry.path();
  }
}

TEST(MultiRankAgreementTest, SaveArgumentsMustAgree) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {6, 4}, 51);
  struct Case {
    std::function<SaveOptions(int rank)> options;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](int rank) { return SaveOptions{.tag = rank == 1 ? "b" : "a"}; },
       "ranks disagree on the save's tag: ranks 0 and 2 passed 'a', rank 1 "
       "passed 'b'"},
      {[](int rank) { return SaveOptions{.step = rank}; },
       "the save's step: rank 0 passed 0, rank 1 passed 1, rank 2 passed 2"},
      {[](int rank) {
         return SaveOptions{.step = rank == 2 ? std::optional<int64_t>(7)
                                              : std::nullopt};
       },
       "the save's step: ranks 0-1 passed none, rank 2 passed 7"},
      {[](int rank) {
         return SaveOptions{.user_metadata = {{"lr", rank == 2 ? "2" : "1"}}};
       },
       "the save's user metadata 'lr': ranks 0-1 passed '1', rank 2 passed "
       "'2'"},
      {[](int rank) {
         SaveOptions o;
         if (rank == 0) o.user_metadata = {{"run", "x"}};
         return o;
       },
       "user metadata 'run': rank 0 passed 'x', ranks 1-2 passed none"},
  };
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    OwnedShard shard = RowsOf(w, rank);
    StateDict sd;
    sd.Set("w", shard.View(w));
    for (const Case& c : cases) {
      auto info = db->Save(sd, c.options(rank));
      ExpectDisagreement(*comm, info.status(), c.needle);
    }
    ExpectStore(*db, *comm, dir.path(), {});
    auto agreed = db->Save(sd, {.step = 3, .tag = "a"});
    EXPECT_TRUE(agreed.ok()) << agreed.status().ToString();
    ExpectStore(*db, *comm, dir.path(), {3});
  });
}

TEST(MultiRankAgreementTest, LoadAndDeleteArgumentsMustAgree) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {6, 4}, 52);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    OwnedShard shard = RowsOf(w, rank);
    StateDict sd;
    sd.Set("w", shard.View(w));
    EXPECT_TRUE(db->Save(sd, {.step = 1, .tag = "one"}).ok());
    auto [b, e] = Part(6, rank, 3);
    OwnedShard target = TargetOf(w, {b, 0}, {e - b, 4});
    StateDict want;
    want.Set("w", target.View(w));
    // Rank 0 selects a checkpoint that does not exist: still a disagreement,
    // not NotFound.
    auto which =
        rank == 0 ? CheckpointSelector::Step(99) : CheckpointSelector::Step(1);
    ExpectDisagreement(*comm, db->Load(want, which, {}).status(),
                       "ranks disagree on the load's selector (step, tag or "
                       "id): rank 0 passed step 99, ranks 1-2 passed step 1");
    which = rank == 2 ? CheckpointSelector::Tag("one")
                      : CheckpointSelector::Latest();
    ExpectDisagreement(*comm, db->Load(want, which, {}).status(),
                       "ranks 0-1 passed none (the latest), rank 2 passed tag "
                       "'one'");
    ExpectDisagreement(
        *comm,
        db->Load(want, CheckpointSelector::Latest(), {.strict = rank != 1})
            .status(),
        "the load's strict: ranks 0 and 2 passed true, rank 1 passed false");
    ExpectDisagreement(
        *comm,
        db->Load(want, CheckpointSelector::Latest(), {.cast = rank == 0})
            .status(),
        "the load's cast: rank 0 passed true, ranks 1-2 passed false");
    EXPECT_EQ(target.bytes, std::vector<uint8_t>(target.bytes.size(), 0))
        << "a refused load filled its target";
    // The same checkpoint selected two ways is still a disagreement.
    which = rank == 1 ? CheckpointSelector::Tag("one")
                      : CheckpointSelector::Step(1);
    ExpectDisagreement(*comm, db->Delete(which),
                       "ranks disagree on the delete's selector (step, tag or "
                       "id): ranks 0 and 2 passed step 1, rank 1 passed tag "
                       "'one'");
    ExpectStore(*db, *comm, dir.path(), {1});
    auto loaded = db->Load(want, CheckpointSelector::Tag("one"), {});
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(target.bytes, w.Slice({b, 0}, {e - b, 4}));
    EXPECT_TRUE(db->Delete(CheckpointSelector::Tag("one")).ok());
    ExpectStore(*db, *comm, dir.path(), {});
  });
}

TEST(MultiRankAgreementTest, SaveAgainstSaveAsyncFailsEveryRankNamingBoth) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {6, 4}, 53);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    OwnedShard shard = RowsOf(w, rank);
    StateDict sd;
    sd.Set("w", shard.View(w));
    Status status;
    if (rank == 0) {
      status = db->Save(sd, {.step = 1}).status();
    } else {
      auto pending = db->SaveAsync(sd, {.step = 1});
      status = pending.ok() ? (*pending)->Wait().status() : pending.status();
    }
    ExpectDisagreement(*comm, status,
                       "ranks called different collective operations: rank 0 "
                       "called save, ranks 1-2 called save_async");
    ExpectStore(*db, *comm, dir.path(), {});
    // The handle's next calls meet the others' again.
    auto pending = db->SaveAsync(sd, {.step = 2});
    ASSERT_TRUE(pending.ok()) << pending.status().ToString();
    EXPECT_TRUE((*pending)->Wait().ok());
    EXPECT_TRUE(db->Save(sd, {.step = 3}).ok());
    ExpectStore(*db, *comm, dir.path(), {2, 3});
    EXPECT_TRUE(db->Close().ok());
  });
}

// Options every rank acts on alike: a rank opened read-only among read-write
// ones (it would write its chunks through a read-only handle), or keeping
// other checkpoints, fails the open on every rank naming the option and ranks.
TEST(MultiRankAgreementTest, OpenOptionsThatRanksActOnAlikeMustAgree) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  struct Case {
    std::function<Options(int rank)> options;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](int rank) { return Options{.read_only = rank == 1}; },
       "ranks disagree on the open's read_only: ranks 0 and 2 passed false, "
       "rank 1 passed true"},
      {[](int rank) {
         Options o;
         o.keep_last = rank == 0 ? 1 : 3;
         return o;
       },
       "the open's keep_last: rank 0 passed 1, ranks 1-2 passed 3"},
      {[](int rank) {
         Options o;
         o.max_chunk_bytes = rank == 2 ? 4096 : o.max_chunk_bytes;
         o.incremental = rank != 2;
         return o;
       },
       "max_chunk_bytes: ranks 0-1 passed 524288, rank 2 passed 4096; and on "
       "its incremental: ranks 0-1 passed true, rank 2 passed false"},
  };
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    {
      auto first = OpenRank(dir.path(), comm);  // creates the store
      ASSERT_NE(first, nullptr);
      EXPECT_TRUE(first->Close().ok());
    }
    for (const Case& c : cases) {
      auto db = DB::Open(c.options(rank), dir.path(), comm);
      ExpectDisagreement(*comm, db.status(), c.needle);
    }
    // Options each rank uses for itself alone may differ.
    Options own;
    own.io_threads = rank + 1;
    own.snapshot_bytes = rank == 1 ? 1 << 20 : 0;
    auto db = OpenRank(dir.path(), comm, own);
    ASSERT_NE(db, nullptr);
    ExpectStore(*db, *comm, dir.path(), {});
  });
}

TEST(MultiRankAgreementTest, RanksThatOpenDifferentStoresAllFailNamingThem) {
  // Ranks given different directories (a relative path under different
  // working directories, a path local to each node) would each read their
  // own store's bytes: every rank fails the open, naming the ranks and paths;
  // so does a copy of the store that went its own way (the same database
  // identity, other checkpoints). One store reached through another path (a
  // link) opens, and so does a copy in the same state.
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir first, second, copies;
  const GlobalTensor w(DType::kFloat32, {6, 4}, 52);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    OwnedShard shard = RowsOf(w, rank);
    StateDict sd;
    sd.Set("w", shard.View(w));
    for (const std::string& path : {first.path(), second.path()}) {
      auto db = OpenRank(path, comm);  // creates the store
      ASSERT_NE(db, nullptr);
      EXPECT_TRUE(db->Save(sd, {}).ok());
      EXPECT_TRUE(db->Close().ok());
    }
    const std::string& mine = rank == 1 ? second.path() : first.path();
    auto db = DB::Open(Options(), mine, comm);
    ExpectDisagreement(*comm, db.status(),
                       "the ranks opened 2 different stores: ranks 0 and 2 '" +
                           first.path() + "' (database ");
    ExpectDisagreement(*comm, db.status(),
                       "rank 1 '" + second.path() + "' (database ");
    const std::string link =
        second.path() + "/../" +
        std::filesystem::path(first.path()).filename().string() + "-link" +
        std::to_string(rank);
    std::filesystem::create_directory_symlink(first.path(), link);
    auto linked = OpenRank(rank == 1 ? link : first.path(), comm);
    ASSERT_NE(linked, nullptr);
    ExpectStore(*linked, *comm, first.path(), {std::nullopt});
    EXPECT_TRUE(linked->Close().ok());
    std::filesystem::remove(link);
    // A copy of the first store, in its state and after the first moves on.
    const std::string copy = copies.path() + "/copy";
    if (rank == 0) {
      std::filesystem::copy(first.path(), copy,
                            std::filesystem::copy_options::recursive);
    }
    EXPECT_TRUE(comm->Barrier().ok());
    {
      auto same = OpenRank(rank == 2 ? copy : first.path(), comm);
      ASSERT_NE(same, nullptr);
      EXPECT_TRUE(same->Save(sd, {.step = 7}).ok());  // the copy is behind now
      EXPECT_TRUE(same->Close().ok());
    }
    auto behind = DB::Open(Options(), rank == 2 ? copy : first.path(), comm);
    ExpectDisagreement(*comm, behind.status(),
                       "the ranks opened one store (or copies of it) in 2 "
                       "different states: ranks 0-1 '" +
                           first.path() + "' (2 checkpoints, digest ");
    ExpectDisagreement(*comm, behind.status(),
                       "rank 2 '" + copy + "' (1 checkpoints, digest ");
  });
}

}  // namespace
}  // namespace ckptdb
