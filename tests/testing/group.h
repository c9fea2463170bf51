#pragma once

// The ranks a multi-rank scenario runs on. One scenario source is built twice:
// with group_threads.cc (ranks are threads of one process, over
// InProcessCommunicators) and with group_mpi.cc (ranks are the processes of an
// mpirun job, over MpiCommunicator). Scenarios keep every check inside the
// rank bodies and combine per-rank figures with SumOver, since MPI ranks share
// no memory.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ckptdb/communicator.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::testing {

// The largest group RunRanks can form (unbounded for threads: 64).
int MaxRanks();

// Whether the ranks of RunRanks are threads of this process (one process
// sees every rank's side effects) rather than processes of their own.
bool RanksShareProcess();

// Runs fn(rank, communicator) on ranks 0..size-1 of a new group and returns
// when all have finished; with MPI, processes beyond `size` wait. Rank bodies
// use EXPECT_* (not ASSERT_*), so that every rank reaches every collective
// call. REQUIRES: 1 <= size <= MaxRanks().
void RunRanks(
    int size,
    const std::function<void(int, std::shared_ptr<Communicator>)>& fn);

// A fresh directory every rank of the job sees under the same path, removed
// when the scenario ends.
class SharedTempDir {
 public:
  SharedTempDir();
  ~SharedTempDir();
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<TempDir> owned_;  // on the rank that made it
  std::string path_;
};

// The sum of `value` over the ranks of `comm`, on every rank. Collective.
uint64_t SumOver(Communicator& comm, uint64_t value);

}  // namespace ckptdb::testing
