#include "engine/collectives/classes.h"

#include <gtest/gtest.h>

#include <thread>

namespace ckptdb::engine {
namespace {

// Runs fn(comm) on `size` in-process ranks, one thread each.
template <typename Fn>
void OnRanks(int size, Fn&& fn) {
  auto comms = InProcessCommunicators(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] { fn(*comms[r]); });
  for (auto& t : threads) t.join();
}

TEST(ClassesTest, IdenticalPayloadsTravelOnceAndRanksKeepTheirOwn) {
  const std::vector<std::string> shared = {"a", "b", "a", "a", "c", "b"};
  std::vector<RankClasses> got(shared.size());
  OnRanks(static_cast<int>(shared.size()), [&](Communicator& comm) {
    const int r = comm.rank();
    auto classes = AllGatherClasses(comm, CallArguments("test"),
                                    "own" + std::to_string(r), shared[r]);
    ASSERT_TRUE(classes.ok()) << classes.status().ToString();
    got[r] = std::move(classes).value();
  });
  for (const RankClasses& c : got) {
    EXPECT_EQ(c.payloads, (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(c.class_of_rank, (std::vector<int>{0, 1, 0, 0, 2, 1}));
    ASSERT_EQ(c.own.size(), shared.size());
    EXPECT_EQ(c.own[4], "own4");
  }
}

TEST(ClassesTest, OneRankIsItsOwnClass) {
  auto comm = SingleProcessCommunicator();
  auto classes =
      AllGatherClasses(*comm, CallArguments("test"), "mine", "payload");
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  EXPECT_EQ(classes->payloads, (std::vector<std::string>{"payload"}));
  EXPECT_EQ(classes->class_of_rank, (std::vector<int>{0}));
  EXPECT_EQ(classes->own, (std::vector<std::string>{"mine"}));
}

TEST(ClassesTest, OnlyRepresentativesSend) {
  std::vector<std::string> digests = {EncodeClassDigest("", "x"),
                                      EncodeClassDigest("", "y"),
                                      EncodeClassDigest("", "x")};
  EXPECT_EQ(ClassRepresentatives(digests),
            (std::vector<bool>{true, true, false}));
  // A payload that does not match its digest, or one sent by a rank that is
  // not the first of its class, is refused.
  EXPECT_FALSE(ClassesFromGathered(digests, {"x", "z", ""}).ok());
  EXPECT_FALSE(ClassesFromGathered(digests, {"x", "y", "x"}).ok());
  EXPECT_FALSE(ClassesFromGathered({"short"}, {""}).ok());
  auto ok = ClassesFromGathered(digests, {"x", "y", ""});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->class_of_rank, (std::vector<int>{0, 1, 0}));
}

TEST(ClassesTest, GatherToRootDeliversEveryRanksBytesToRankZeroOnly) {
  std::vector<std::vector<std::string>> got(4);
  OnRanks(4, [&](Communicator& comm) {
    auto all =
        GatherToRoot(comm, std::string(comm.rank() * 3, 'a' + comm.rank()));
    ASSERT_TRUE(all.ok());
    got[comm.rank()] = std::move(all).value();
  });
  EXPECT_EQ(got[0],
            (std::vector<std::string>{"", "bbb", "cccccc", "ddddddddd"}));
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(got[r].empty());
}

}  // namespace
}  // namespace ckptdb::engine
