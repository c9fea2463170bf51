#include "engine/collectives/agreement.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ckptdb::engine {
namespace {

SaveOptions Tagged(std::string tag) {
  SaveOptions options;
  options.tag = std::move(tag);
  return options;
}

TEST(AgreementTest, EqualArgumentsAgree) {
  SaveOptions options = Tagged("best");
  options.step = 7;
  options.user_metadata = {{"run", "abc"}};
  EXPECT_TRUE(CompareArguments({SaveArguments(options), SaveArguments(options),
                                SaveArguments(options)})
                  .ok());
  EXPECT_TRUE(CompareArguments({SaveArguments(options)}).ok());
}

TEST(AgreementTest, NamesTheArgumentAndTheRanksBehindEachValue) {
  Status s =
      CompareArguments({SaveArguments(Tagged("a")), SaveArguments(Tagged("b")),
                        SaveArguments(Tagged("a"))});
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message(),
            "ranks disagree on the save's tag: ranks 0 and 2 passed 'a', rank "
            "1 passed 'b'");
  s = CompareArguments({SaveArguments(Tagged("a")), SaveArguments({})});
  EXPECT_EQ(s.message(),
            "ranks disagree on the save's tag: rank 0 passed 'a', rank 1 "
            "passed none");
}

// A rank whose input could not be used (its binding could not convert the
// tag, so it passes a stand-in) is named with its own error, code and all,
// not as a rank that passed no tag.
TEST(AgreementTest, ARanksOwnInputErrorIsReportedInsteadOfItsStandIns) {
  const Status bad = Status::FailedPrecondition("tag is not valid text");
  Status s = CompareArguments({SaveArguments(Tagged("a")),
                               SaveArguments({}, "save", bad),
                               SaveArguments(Tagged("a"), "save", bad)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "rank 1: tag is not valid text");
  // Without the error, the stand-in is a disagreement.
  s = CompareArguments({SaveArguments(Tagged("a")), SaveArguments({})});
  EXPECT_EQ(s.message(),
            "ranks disagree on the save's tag: rank 0 passed 'a', rank 1 "
            "passed none");
}

TEST(AgreementTest, ListsEveryArgumentThatDiffers) {
  std::vector<CallArguments> by_rank;
  for (int r = 0; r < 4; ++r) {
    by_rank.push_back(LoadArguments(
        r == 3 ? CheckpointSelector::Step(5) : CheckpointSelector::Latest(),
        {.strict = r != 1, .cast = false}));
  }
  EXPECT_EQ(CompareArguments(by_rank).message(),
            "ranks disagree on the load's selector (step, tag or id): ranks "
            "0-2 passed none (the latest), rank 3 passed step 5; and on its "
            "strict: ranks 0 and 2-3 passed true, rank 1 passed false");
}

TEST(AgreementTest, UserMetadataIsComparedKeyByKey) {
  SaveOptions a, b;
  a.user_metadata = {{"lr", "0.1"}, {"run", "x"}};
  b.user_metadata = {{"lr", "0.2"}};
  EXPECT_EQ(CompareArguments({SaveArguments(a), SaveArguments(b)}).message(),
            "ranks disagree on the save's user metadata 'lr': rank 0 passed "
            "'0.1', rank 1 passed '0.2'; and on its user metadata 'run': rank "
            "0 passed 'x', rank 1 passed none");
}

TEST(AgreementTest, DifferentCallsAreNamed) {
  EXPECT_EQ(CompareArguments({SaveArguments({}),
                              DeleteArguments(CheckpointSelector::Latest())})
                .message(),
            "ranks called different collective operations: rank 0 called "
            "save, rank 1 called delete");
}

TEST(AgreementTest, ManyValuesAndLongValuesAreShortened) {
  std::vector<CallArguments> by_rank;
  for (int r = 0; r < 40; ++r) {
    SaveOptions options;
    options.step = r % 10;
    options.tag = std::string(200, 'x');
    by_rank.push_back(SaveArguments(options));
  }
  const std::string message = CompareArguments(by_rank).message();
  EXPECT_EQ(message,
            "ranks disagree on the save's step: ranks 0, 10, 20 and 30 passed "
            "0, ranks 1, 11, 21 and 31 passed 1, ranks 2, 12, 22 and 32 passed "
            "2, ranks 3, 13, 23 and 33 passed 3, and 24 other ranks passed 6 "
            "other values");
  by_rank[1] = SaveArguments(Tagged(std::string(300, 'y')));
  EXPECT_LT(CompareArguments(by_rank).message().size(), 1000u);
}

TEST(AgreementTest, EncodeDecodeRoundTripAndTruncation) {
  SaveOptions options = Tagged("t");
  options.user_metadata = {{"k", "v"}};
  const CallArguments args = SaveArguments(options);
  Result<CallArguments> back = CallArguments::Decode(args.Encode());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->call(), "save");
  EXPECT_EQ(back->items(), args.items());
  const std::string bytes = args.Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(CallArguments::Decode(bytes.substr(0, n)).ok()) << n;
  }
}

// Runs fn(rank, comm) on `size` threads, one rank each.
void OnRanks(int size, const std::function<void(int, Communicator&)>& fn) {
  auto comms = InProcessCommunicators(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] { fn(r, *comms[r]); });
  for (auto& t : threads) t.join();
}

TEST(AgreementTest, AllGatherAgreedReturnsThePayloadsWhenRanksAgree) {
  OnRanks(3, [](int rank, Communicator& comm) {
    auto got = AllGatherAgreed(comm, SaveArguments(Tagged("a")),
                               "payload " + std::to_string(rank));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, (std::vector<std::string>{"payload 0", "payload 1",
                                              "payload 2"}));
  });
  OnRanks(1, [](int, Communicator& comm) {
    auto got = AllGatherAgreed(comm, SaveArguments({}), "alone");
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, std::vector<std::string>{"alone"});
  });
}

TEST(AgreementTest, AllGatherAgreedFailsAlikeOnEveryRank) {
  std::vector<Status> statuses(3);
  OnRanks(3, [&](int rank, Communicator& comm) {
    auto got = AllGatherAgreed(
        comm, SaveArguments(Tagged(rank == 1 ? "b" : "a")), "payload");
    statuses[rank] = got.status();
    // The group stays usable: the next exchange pairs up.
    EXPECT_TRUE(comm.Barrier().ok());
  });
  for (const Status& s : statuses) {
    EXPECT_EQ(s, Status::InvalidArgument(
                     "ranks disagree on the save's tag: ranks 0 and 2 passed "
                     "'a', rank 1 passed 'b'"));
  }
}

TEST(AgreementTest, IdFromRootAgreedRunsAtRootOnlyAndDisagreementWins) {
  std::atomic<int> calls{0};
  OnRanks(3, [&](int, Communicator& comm) {
    auto id = IdFromRootAgreed(comm, DeleteArguments(CheckpointSelector::Id(4)),
                               [&]() -> Result<int64_t> {
                                 ++calls;
                                 return int64_t{4};
                               });
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(*id, 4);
  });
  EXPECT_EQ(calls.load(), 1);
  OnRanks(2, [&](int rank, Communicator& comm) {
    auto id = IdFromRootAgreed(
        comm,
        DeleteArguments(rank == 0 ? CheckpointSelector::Step(9)
                                  : CheckpointSelector::Latest()),
        []() -> Result<int64_t> { return Status::NotFound("no step 9"); });
    EXPECT_TRUE(id.status().IsInvalidArgument()) << id.status().ToString();
  });
  OnRanks(2, [&](int, Communicator& comm) {
    auto id = IdFromRootAgreed(
        comm, DeleteArguments(CheckpointSelector::Step(9)),
        []() -> Result<int64_t> { return Status::NotFound("no step 9"); });
    EXPECT_EQ(id.status(), Status::NotFound("no step 9"));
  });
}

}  // namespace
}  // namespace ckptdb::engine
