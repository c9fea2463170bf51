// The gloo communicator's collectives and transfers, ranks as threads over TCP
// (group_gloo.cc), and its set-up errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/gloo.h"
#include "tests/testing/group.h"

namespace ckptdb {
namespace {

using testing::RunRanks;

std::string Payload(int rank, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(rank * 31 + i * 7);
  return s;
}

// Groups of up to 8 gather by messages between every two ranks, larger ones by
// gloo's ring; both in one step for parts that fit a 4 KiB block (its size and
// first bytes) and in two for longer ones.
TEST(GlooCommunicatorTest, AllGatherOfUnequalAndEmptyBuffers) {
  for (int size : {1, 2, 5, 11}) {
    RunRanks(size, [&](int rank, std::shared_ptr<Communicator> comm) {
      EXPECT_EQ(comm->rank(), rank);
      EXPECT_EQ(comm->size(), size);
      // Rank r contributes 13 * r bytes (rank 0 nothing), then a large part.
      auto all = comm->AllGather(Payload(rank, 13 * static_cast<size_t>(rank)));
      ASSERT_TRUE(all.ok()) << all.status().ToString();
      ASSERT_EQ(all->size(), static_cast<size_t>(size));
      for (int r = 0; r < size; ++r)
        EXPECT_EQ((*all)[r], Payload(r, 13 * r)) << r;
      auto big = comm->AllGather(Payload(rank, 3 << 20));
      ASSERT_TRUE(big.ok()) << big.status().ToString();
      for (int r = 0; r < size; ++r) EXPECT_EQ((*big)[r], Payload(r, 3 << 20));
      // Around the block's end: parts that fill it, and parts a byte or a few
      // longer from some ranks only.
      auto edge = [](int r) -> size_t { return 4088 + (r % 3 == 1 ? r : 0); };
      auto around = comm->AllGather(Payload(rank, edge(rank)));
      ASSERT_TRUE(around.ok()) << around.status().ToString();
      for (int r = 0; r < size; ++r)
        EXPECT_EQ((*around)[r], Payload(r, edge(r))) << "rank " << r;
    });
  }
}

TEST(GlooCommunicatorTest, BroadcastFromEveryRoot) {
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    for (int root = 0; root < 3; ++root) {
      std::string bytes = rank == root ? Payload(root, 100 + root) : "stale";
      ASSERT_TRUE(comm->Broadcast(&bytes, root).ok());
      EXPECT_EQ(bytes, Payload(root, 100 + root)) << "root " << root;
      // Longer than the first step's block, and exactly filling it.
      for (size_t n : {size_t{100000}, size_t{4088}}) {
        std::string long_bytes = rank == root ? Payload(root, n) : "stale";
        ASSERT_TRUE(comm->Broadcast(&long_bytes, root).ok());
        EXPECT_EQ(long_bytes, Payload(root, n)) << "root " << root << " " << n;
      }
      std::string empty = rank == root ? "" : "stale";
      ASSERT_TRUE(comm->Broadcast(&empty, root).ok());
      EXPECT_EQ(empty, "");
    }
    EXPECT_TRUE(comm->Barrier().ok());
    std::string nowhere;
    EXPECT_FALSE(comm->Broadcast(&nowhere, 3).ok());
  });
}

TEST(GlooCommunicatorTest, ExchangeMatchesMessagesInOrderPerPeerAndToItself) {
  const int size = 4;
  RunRanks(size, [&](int rank, std::shared_ptr<Communicator> comm) {
    // Every rank sends three messages to every rank, itself included: 0 bytes,
    // 5 bytes and 50 + rank bytes (the last one 1 MiB for its right neighbour).
    auto size_of = [](int k, int from, int to) -> size_t {
      if (k == 2 && to == (from + 1) % size) return size_t{1} << 20;
      return k == 0 ? 0 : k == 1 ? 5 : 50 + static_cast<size_t>(from);
    };
    for (int round = 0; round < 3; ++round) {
      std::vector<std::string> out, in;
      std::vector<SendBuffer> sends;
      std::vector<RecvBuffer> recvs;
      out.reserve(3 * size);
      in.reserve(3 * size);
      for (int peer = 0; peer < size; ++peer) {
        for (int k = 0; k < 3; ++k) {
          out.push_back(Payload(round + rank * 100 + peer * 10 + k,
                                size_of(k, rank, peer)));
          sends.push_back({peer, out.back().data(), out.back().size()});
          in.emplace_back(size_of(k, peer, rank), '\0');
          recvs.push_back({peer, in.back().data(), in.back().size()});
        }
      }
      const Status s = comm->Exchange(sends, recvs);
      ASSERT_TRUE(s.ok()) << s.ToString();
      size_t at = 0;
      for (int peer = 0; peer < size; ++peer) {
        for (int k = 0; k < 3; ++k) {
          EXPECT_EQ(in[at++], Payload(round + peer * 100 + rank * 10 + k,
                                      size_of(k, peer, rank)))
              << "round " << round << " from " << peer << " message " << k;
        }
      }
    }
  });
}

// Messages of a pair match in order across calls: a rank may carry in one
// call what its peer sends in two, and a rank with nothing to move skips one.
TEST(GlooCommunicatorTest, MessagesMatchAcrossCallsOfDifferentCounts) {
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    const std::string first = Payload(1, 1000), second = Payload(2, 300000);
    if (rank == 0) {
      const SendBuffer a{1, first.data(), first.size()};
      const SendBuffer b{1, second.data(), second.size()};
      ASSERT_TRUE(comm->Exchange({&a, 1}, {}).ok());
      ASSERT_TRUE(comm->Exchange({&b, 1}, {}).ok());
    } else if (rank == 1) {
      std::string x(first.size(), '\0'), y(second.size(), '\0');
      const RecvBuffer recvs[] = {{0, x.data(), x.size()},
                                  {0, y.data(), y.size()}};
      ASSERT_TRUE(comm->Exchange({}, recvs).ok());
      EXPECT_EQ(x, first);
      EXPECT_EQ(y, second);
    }
    EXPECT_TRUE(comm->Barrier().ok());
  });
}

// Receives posted rounds ahead (PostRecvs) take their peers' messages in the
// order they were posted, whether a peer sends before or after they are
// posted; messages to the rank itself are matched at the exchange.
TEST(GlooCommunicatorTest, PostedReceivesMatchInPostingOrderAcrossRounds) {
  const int size = 3, rounds = 5;
  RunRanks(size, [&](int rank, std::shared_ptr<Communicator> comm) {
    // Message k of round r from one rank to another: 0 bytes, 1 MiB to the
    // right neighbour (in odd rounds), or 100 + sender bytes.
    auto size_of = [](int round, int k, int from, int to) -> size_t {
      if (k == 0) return 0;
      if (k == 1 && round % 2 == 1 && to == (from + 1) % size)
        return size_t{1} << 20;
      return 100 + static_cast<size_t>(from);
    };
    auto seed = [](int round, int k, int from, int to) {
      return round * 1000 + from * 100 + to * 10 + k;
    };
    std::vector<std::vector<std::string>> out(rounds), in(rounds);
    std::vector<std::unique_ptr<PostedRecvs>> posted(rounds);
    auto post = [&](int round) {
      std::vector<RecvBuffer> recvs;
      in[round].reserve(2 * size);
      for (int peer = 0; peer < size; ++peer) {
        for (int k = 0; k < 2; ++k) {
          in[round].emplace_back(size_of(round, k, peer, rank), '\0');
          recvs.push_back(
              {peer, in[round].back().data(), in[round].back().size()});
        }
      }
      auto handle = comm->PostRecvs(recvs);
      ASSERT_TRUE(handle.ok()) << handle.status().ToString();
      posted[round] = std::move(*handle);
    };
    post(0);
    post(1);
    for (int round = 0; round < rounds; ++round) {
      // Rank 1 sends late: its peers' messages wait in posted receives.
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::vector<SendBuffer> sends;
      out[round].reserve(2 * size);
      for (int peer = 0; peer < size; ++peer) {
        for (int k = 0; k < 2; ++k) {
          out[round].push_back(Payload(seed(round, k, rank, peer),
                                       size_of(round, k, rank, peer)));
          sends.push_back(
              {peer, out[round].back().data(), out[round].back().size()});
        }
      }
      const Status s = comm->ExchangePosted(sends, std::move(posted[round]));
      ASSERT_TRUE(s.ok()) << s.ToString();
      size_t at = 0;
      for (int peer = 0; peer < size; ++peer) {
        for (int k = 0; k < 2; ++k) {
          EXPECT_EQ(in[round][at++], Payload(seed(round, k, peer, rank),
                                             size_of(round, k, peer, rank)))
              << "round " << round << " from " << peer << " message " << k;
        }
      }
      if (round + 2 < rounds) post(round + 2);
    }
    EXPECT_TRUE(comm->Barrier().ok());
  });
}

// The default two-step exchange (in-process ranks) makes the receives at the
// exchange, with the same result.
TEST(CommunicatorTest, DefaultPostedReceivesAreMadeByTheExchange) {
  auto comms = InProcessCommunicators(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([rank, comm = comms[rank]] {
      const std::string mine = Payload(rank, 1000 + rank);
      std::string theirs(1000 + (1 - rank), '\0');
      const RecvBuffer recv{1 - rank, theirs.data(), theirs.size()};
      auto posted = comm->PostRecvs({&recv, 1});
      ASSERT_TRUE(posted.ok());
      const SendBuffer send{1 - rank, mine.data(), mine.size()};
      ASSERT_TRUE(comm->ExchangePosted({&send, 1}, std::move(*posted)).ok());
      EXPECT_EQ(theirs, Payload(1 - rank, 1000 + (1 - rank)));
    });
  }
  for (std::thread& t : ranks) t.join();
}

TEST(GlooCommunicatorTest, BadPeerIsAnErrorNotAnAbort) {
  RunRanks(2, [&](int, std::shared_ptr<Communicator> comm) {
    char byte = 0;
    const SendBuffer send{comm->size(), &byte, 1};
    Status s = comm->Exchange({&send, 1}, {});
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.ToString();
  });
}

// A rank in a barrier while the other is in an all-gather (one rank closing
// while the other saves) is not an abort: both calls return, the all-gather
// with an empty part from the rank in the barrier, which the caller's
// protocol then refuses.
TEST(GlooCommunicatorTest, ABarrierMetByAnAllGatherReturnsOnBoth) {
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    if (rank == 1) {
      EXPECT_TRUE(comm->Barrier().ok());
      return;
    }
    auto all = comm->AllGather("call arguments");
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    EXPECT_EQ(*all, (std::vector<std::string>{"call arguments", ""}));
  });
}

TEST(GlooCommunicatorSetupTest, BadArgumentsAreRefusedNamingThem) {
  auto store = InMemoryRendezvousStore();
  auto none = GlooCommunicator(nullptr, {});
  EXPECT_TRUE(none.status().IsInvalidArgument());
  auto outside = GlooCommunicator(store, {.rank = 2, .size = 2});
  EXPECT_TRUE(outside.status().IsInvalidArgument());
  EXPECT_NE(outside.status().message().find("rank 2"), std::string::npos);
}

// A rank whose peers never come fails after the timeout, naming itself and the
// prefix, instead of hanging.
TEST(GlooCommunicatorSetupTest, MissingPeersFailTheRendezvous) {
  class NeverStore : public RendezvousStore {
   public:
    Status Set(const std::string&, const std::string&) override {
      return Status::OK();
    }
    Result<std::string> Get(const std::string& key) override {
      return Status::IOError("rendezvous: no rank set key '" + key + "'");
    }
  };
  auto comm = GlooCommunicator(
      std::make_shared<NeverStore>(),
      {.rank = 0, .size = 2, .prefix = "lonely", .hostname = "127.0.0.1"});
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("lonely"), std::string::npos)
      << comm.status().ToString();
}

// A rank whose connections fail in one attempt (gloo reports a pair's set-up
// failure as an exception) fails that attempt on every rank; all set the mesh
// up again and the communicator works.
TEST(GlooCommunicatorSetupTest, AFailedConnectionIsSetUpAgainOnEveryRank) {
  class FailsOnce : public RendezvousStore {
   public:
    Status Set(const std::string& key, const std::string& value) override {
      return store_->Set(key, value);
    }
    Result<std::string> Get(const std::string& key) override {
      // Rank 0 reads rank 1's pair addresses of the first attempt.
      if (key == "again/attempt-0/up/1" && !failed_.exchange(true))
        return Status::IOError("rendezvous: injected failure of key " + key);
      return store_->Get(key);
    }

   private:
    std::shared_ptr<RendezvousStore> store_ = InMemoryRendezvousStore();
    std::atomic<bool> failed_{false};
  };
  auto store = std::make_shared<FailsOnce>();
  std::vector<Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto comm = GlooCommunicator(store, {.rank = r,
                                           .size = 2,
                                           .prefix = "again",
                                           .hostname = "127.0.0.1",
                                           .timeout = std::chrono::seconds(5)});
      results[r] = comm.status();
      if (!comm.ok()) return;
      auto all = (*comm)->AllGather(std::string(1, static_cast<char>('a' + r)));
      results[r] = all.status();
      if (all.ok()) {
        EXPECT_EQ(*all, (std::vector<std::string>{"a", "b"}));
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_TRUE(results[0].ok()) << results[0].ToString();
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
}

// A rank that leaves (its connections closed, as when its process dies)
// fails the next collectives of the others with an error naming the call,
// whichever of their sends and receives it breaks: no crash, no hang.
TEST(GlooCommunicatorSetupTest, APeerThatLeftFailsTheOthersCollectives) {
  auto store = InMemoryRendezvousStore();
  std::vector<Status> gathered(3), exchanged(3), barrier(3);
  std::atomic<bool> left{false};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      auto comm =
          GlooCommunicator(store, {.rank = r,
                                   .size = 3,
                                   .prefix = "left",
                                   .hostname = "127.0.0.1",
                                   .timeout = std::chrono::seconds(30)});
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      ASSERT_TRUE((*comm)->Barrier().ok());
      if (r == 2) {
        comm->reset();
        left = true;
        return;
      }
      while (!left) std::this_thread::yield();
      // Longer than a block: the all-gather's second step sends too.
      gathered[r] = (*comm)->AllGather(Payload(r, 10000)).status();
      const std::string bytes = Payload(r, 64);
      std::vector<char> in(64);
      const SendBuffer sends[] = {{1 - r, bytes.data(), 64},
                                  {2, bytes.data(), 64}};
      const RecvBuffer recvs[] = {{1 - r, in.data(), 64}};
      exchanged[r] = (*comm)->Exchange(sends, recvs);
      barrier[r] = (*comm)->Barrier();
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    for (const Status& s : {gathered[r], exchanged[r], barrier[r]}) {
      EXPECT_TRUE(s.IsIOError()) << "rank " << r << ": " << s.ToString();
      EXPECT_NE(s.message().find("on rank " + std::to_string(r) + " of 3"),
                std::string::npos)
          << s.ToString();
    }
    // The calls after the first failure do not wait for the peer again: they
    // fail at once, naming that failure.
    for (const Status& s : {exchanged[r], barrier[r]}) {
      EXPECT_NE(s.message().find("the group's connections failed earlier"),
                std::string::npos)
          << s.ToString();
    }
  }
}

// A peer that stays connected but never calls (a stopped process) fails the
// others' collective after the group's timeout once, not once per transfer
// with it (the receive from it, then the send to it).
TEST(GlooCommunicatorSetupTest, ASilentPeerFailsTheOthersAfterOneTimeout) {
  auto store = InMemoryRendezvousStore();
  constexpr auto kTimeout = std::chrono::milliseconds(3000);
  std::vector<Status> gathered(3);
  std::vector<std::chrono::steady_clock::duration> took(3);
  std::atomic<int> finished{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      auto comm = GlooCommunicator(store, {.rank = r,
                                           .size = 3,
                                           .prefix = "silent",
                                           .hostname = "127.0.0.1",
                                           .timeout = kTimeout});
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      ASSERT_TRUE((*comm)->Barrier().ok());
      if (r == 2) {  // connected, silent until the others have given up
        while (finished < 2) std::this_thread::sleep_for(kTimeout / 30);
        return;
      }
      const auto start = std::chrono::steady_clock::now();
      gathered[r] = (*comm)->AllGather(Payload(r, 100)).status();
      took[r] = std::chrono::steady_clock::now() - start;
      ++finished;
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(gathered[r].IsIOError()) << gathered[r].ToString();
    EXPECT_NE(gathered[r].message().find("rank 2"), std::string::npos)
        << gathered[r].ToString();
    // One timeout and its margin; twice the timeout is the failure this
    // checks for.
    EXPECT_GE(took[r], kTimeout) << "rank " << r;
    EXPECT_LT(took[r], kTimeout * 3 / 2) << "rank " << r;
  }
}

}  // namespace
}  // namespace ckptdb
