// Ranks as the processes of an mpirun job (mpi_multirank_test), and the test
// program's main: MPI initialized around the whole GoogleTest run, the job's
// result the worst of its ranks'.
#include <gtest/gtest.h>

#include <cstdio>

#include "ckptdb/mpi.h"
#include "tests/testing/group.h"

namespace ckptdb::testing {
namespace {

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Prints failures of ranks other than 0, prefixed with the rank (rank 0 keeps
// GoogleTest's own printer).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

bool RanksShareProcess() { return false; }

int MaxRanks() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void RunRanks(
    int size,
    const std::function<void(int, std::shared_ptr<Communicator>)>& fn) {
  const int rank = WorldRank();
  MPI_Comm group;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &group);
  if (group != MPI_COMM_NULL) {
    auto comm = MpiCommunicator(group);
    EXPECT_TRUE(comm.ok()) << comm.status().ToString();
    if (comm.ok()) fn(rank, std::move(comm).value());
    MPI_Comm_free(&group);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

SharedTempDir::SharedTempDir() {
  char path[4096] = {};
  if (WorldRank() == 0) {
    owned_ = std::make_unique<TempDir>();
    std::snprintf(path, sizeof(path), "%s", owned_->path().c_str());
  }
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
  path_ = path;
}

SharedTempDir::~SharedTempDir() {
  MPI_Barrier(MPI_COMM_WORLD);  // every rank is done with it
}

}  // namespace ckptdb::testing

int main(int argc, char** argv) {
  // Scenarios save asynchronously, which needs MPI_THREAD_MULTIPLE.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = ckptdb::testing::WorldRank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new ckptdb::testing::RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
