// Ranks as threads of this process (multirank_test).
#include <thread>
#include <vector>

#include "tests/testing/group.h"

namespace ckptdb::testing {

int MaxRanks() { return 64; }

bool RanksShareProcess() { return true; }

void RunRanks(
    int size,
    const std::function<void(int, std::shared_ptr<Communicator>)>& fn) {
  auto comms = InProcessCommunicators(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] { fn(r, comms[r]); });
  for (auto& t : threads) t.join();
}

SharedTempDir::SharedTempDir()
    : owned_(std::make_unique<TempDir>()), path_(owned_->path()) {}

SharedTempDir::~SharedTempDir() = default;

}  // namespace ckptdb::testing
