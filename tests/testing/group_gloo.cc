// Ranks as threads of this process over gloo communicators
// (gloo_multirank_test): every scenario runs over TCP connections made through
// an in-memory rendezvous store, as the ranks of a PyTorch job do through
// torch's store.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/gloo.h"
#include "tests/testing/group.h"

namespace ckptdb::testing {

int MaxRanks() { return 16; }

bool RanksShareProcess() { return true; }

void RunRanks(
    int size,
    const std::function<void(int, std::shared_ptr<Communicator>)>& fn) {
  static std::atomic<int> groups{0};
  const std::string prefix = "group-" + std::to_string(groups++);
  auto store = InMemoryRendezvousStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto comm = GlooCommunicator(
          store,
          {.rank = r, .size = size, .prefix = prefix, .hostname = "127.0.0.1"});
      if (!comm.ok()) {
        ADD_FAILURE() << comm.status().ToString();
        return;
      }
      fn(r, *comm);
    });
  }
  for (auto& t : threads) t.join();
}

SharedTempDir::SharedTempDir()
    : owned_(std::make_unique<TempDir>()), path_(owned_->path()) {}

SharedTempDir::~SharedTempDir() = default;

}  // namespace ckptdb::testing
