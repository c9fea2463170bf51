// The MPI communicator's collectives and transfers, over the whole mpirun job,
// with messages split into pieces of a few bytes to exercise the splitting.
#include "engine/collectives/mpi_communicator.h"

#include <gtest/gtest.h>

namespace ckptdb {
namespace {

std::string Payload(int rank, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(rank * 31 + i * 7);
  return s;
}

class MpiCommunicatorTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    auto comm = engine::NewMpiCommunicator(MPI_COMM_WORLD, GetParam());
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    comm_ = std::move(comm).value();
  }
  std::shared_ptr<Communicator> comm_;
};

TEST_P(MpiCommunicatorTest, AllGatherOfUnequalAndEmptyBuffers) {
  const int rank = comm_->rank(), size = comm_->size();
  // Rank r contributes 13 * r bytes (rank 0 nothing).
  auto all = comm_->AllGather(Payload(rank, 13 * static_cast<size_t>(rank)));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) EXPECT_EQ((*all)[r], Payload(r, 13 * r)) << r;
}

TEST_P(MpiCommunicatorTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < comm_->size(); ++root) {
    std::string bytes =
        comm_->rank() == root ? Payload(root, 100 + root) : "stale";
    ASSERT_TRUE(comm_->Broadcast(&bytes, root).ok());
    EXPECT_EQ(bytes, Payload(root, 100 + root)) << "root " << root;
  }
  EXPECT_TRUE(comm_->Barrier().ok());
}

TEST_P(MpiCommunicatorTest, ExchangeMatchesMessagesInOrderPerPeer) {
  const int rank = comm_->rank(), size = comm_->size();
  // Every rank sends three messages to every other rank: 0 bytes, 5 bytes and
  // 50 + rank bytes, in that order.
  auto size_of = [](int k, int from) -> size_t {
    return k == 0 ? 0 : k == 1 ? 5 : 50 + static_cast<size_t>(from);
  };
  std::vector<std::string> out, in;
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  out.reserve(3 * size);
  in.reserve(3 * size);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    for (int k = 0; k < 3; ++k) {
      out.push_back(Payload(rank * 100 + peer * 10 + k, size_of(k, rank)));
      sends.push_back({peer, out.back().data(), out.back().size()});
      in.emplace_back(size_of(k, peer), '\0');
      recvs.push_back({peer, in.back().data(), in.back().size()});
    }
  }
  ASSERT_TRUE(comm_->Exchange(sends, recvs).ok());
  size_t at = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(in[at++], Payload(peer * 100 + rank * 10 + k, size_of(k, peer)))
          << "from " << peer << " message " << k;
    }
  }
}

TEST_P(MpiCommunicatorTest, BadPeerIsAnErrorNotAnAbort) {
  char byte = 0;
  const SendBuffer send{comm_->size(), &byte, 1};
  Status s = comm_->Exchange({&send, 1}, {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank"), std::string::npos) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(MessageSizes, MpiCommunicatorTest,
                         ::testing::Values(size_t{1} << 30, size_t{7},
                                           size_t{1}));

TEST(MpiCommunicatorSetupTest, NullCommunicatorIsRefused) {
  auto comm = MpiCommunicator(MPI_COMM_NULL);
  EXPECT_TRUE(comm.status().IsInvalidArgument()) << comm.status().ToString();
}

TEST(MpiCommunicatorSetupTest, DuplicatesTheCallersCommunicator) {
  // ckptdb's traffic runs on its own communicator: a message of the caller's
  // posted on MPI_COMM_WORLD is not consumed by ckptdb's exchange.
  auto comm = MpiCommunicator(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok());
  const int rank = (*comm)->rank(), size = (*comm)->size();
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  int caller = rank, got = -1;
  MPI_Request request;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  MPI_Isend(&caller, 1, MPI_INT, next, 0, MPI_COMM_WORLD, &request);
  int mine = 1000 + rank, theirs = -1;
  const SendBuffer send{next, &mine, sizeof(mine)};
  const RecvBuffer recv{prev, &theirs, sizeof(theirs)};
  ASSERT_TRUE((*comm)->Exchange({&send, 1}, {&recv, 1}).ok());
  EXPECT_EQ(theirs, 1000 + prev);
  MPI_Recv(&got, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  EXPECT_EQ(got, prev);
}

}  // namespace
}  // namespace ckptdb
