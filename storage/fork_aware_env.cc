#include "storage/fork_aware_env.h"

#include <rocksdb/threadpool.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>

namespace ckptdb::storage {
namespace {

// The process that loaded ckptdb: its jobs go to RocksDB's pools.
const pid_t kLoadingProcess = ::getpid();

// One process's pools, by priority (never destroyed: a process forked from
// this one inherits them without threads, and their destructors would join
// those).
struct ProcessPools {
  pid_t pid;
  rocksdb::ThreadPool* by_priority[rocksdb::Env::Priority::TOTAL];
};

std::atomic<ProcessPools*> the_pools{nullptr};

// This process's pools, made at the first call in it. (A fork while another
// thread makes them leaves the child to make its own.)
ProcessPools& PoolsOfThisProcess() {
  const pid_t pid = ::getpid();
  ProcessPools* pools = the_pools.load();
  while (pools == nullptr || pools->pid != pid) {
    auto* made = new ProcessPools{pid, {}};
    // As RocksDB's own: no thread for the bottom priority until asked.
    for (int p = 0; p < rocksdb::Env::Priority::TOTAL; ++p) {
      made->by_priority[p] =
          rocksdb::NewThreadPool(p == rocksdb::Env::Priority::BOTTOM ? 0 : 1);
    }
    if (the_pools.compare_exchange_strong(pools, made)) return *made;
    // Another thread made them first: use those (`made` is dropped unused,
    // its threads idle; it never happens twice in one process).
  }
  return *pools;
}

class Env : public rocksdb::EnvWrapper {
 public:
  explicit Env(std::unique_ptr<rocksdb::Env> base)
      : rocksdb::EnvWrapper(std::move(base)) {
    // The store's own file system and clock, not Env's adapters of this
    // wrapper's legacy calls: every file operation as before.
    file_system_ = target()->GetFileSystem();
    system_clock_ = target()->GetSystemClock();
  }

  const char* Name() const override { return "CkptdbForkAwareEnv"; }

  void Schedule(void (*function)(void* arg), void* arg, Priority pri, void* tag,
                void (*unschedule)(void* arg)) override {
    if (!InForkedChild()) {
      return EnvWrapper::Schedule(function, arg, pri, tag, unschedule);
    }
    Pool(pri)->SubmitJob([function, arg] { function(arg); });
  }
  // A child's queued jobs run: RocksDB counts only what this returns as
  // cancelled, and a job that runs does its own cleanup.
  int UnSchedule(void* arg, Priority pri) override {
    return InForkedChild() ? 0 : EnvWrapper::UnSchedule(arg, pri);
  }
  unsigned int GetThreadPoolQueueLen(Priority pri) const override {
    return InForkedChild() ? Pool(pri)->GetQueueLen()
                           : EnvWrapper::GetThreadPoolQueueLen(pri);
  }
  void SetBackgroundThreads(int number, Priority pri) override {
    if (!InForkedChild()) return EnvWrapper::SetBackgroundThreads(number, pri);
    Pool(pri)->SetBackgroundThreads(std::max(number, 0));
  }
  int GetBackgroundThreads(Priority pri) override {
    return InForkedChild() ? Pool(pri)->GetBackgroundThreads()
                           : EnvWrapper::GetBackgroundThreads(pri);
  }
  void IncBackgroundThreadsIfNeeded(int number, Priority pri) override {
    if (!InForkedChild())
      return EnvWrapper::IncBackgroundThreadsIfNeeded(number, pri);
    if (Pool(pri)->GetBackgroundThreads() < number)
      Pool(pri)->SetBackgroundThreads(number);
  }
  int ReserveThreads(int count, Priority pri) override {
    return InForkedChild() ? 0 : EnvWrapper::ReserveThreads(count, pri);
  }
  int ReleaseThreads(int count, Priority pri) override {
    return InForkedChild() ? 0 : EnvWrapper::ReleaseThreads(count, pri);
  }
  void WaitForJoin() override {
    if (!InForkedChild()) EnvWrapper::WaitForJoin();
  }
  void LowerThreadPoolIOPriority(Priority pool) override {
    if (!InForkedChild()) EnvWrapper::LowerThreadPoolIOPriority(pool);
  }
  void LowerThreadPoolCPUPriority(Priority pool) override {
    if (!InForkedChild()) EnvWrapper::LowerThreadPoolCPUPriority(pool);
  }
  rocksdb::Status LowerThreadPoolCPUPriority(
      Priority pool, rocksdb::CpuPriority pri) override {
    if (InForkedChild()) return rocksdb::Status::OK();
    return EnvWrapper::LowerThreadPoolCPUPriority(pool, pri);
  }

 private:
  static rocksdb::ThreadPool* Pool(Priority pri) {
    const int p = std::clamp(static_cast<int>(pri), 0,
                             static_cast<int>(Priority::TOTAL) - 1);
    return PoolsOfThisProcess().by_priority[p];
  }
};

}  // namespace

bool InForkedChild() { return ::getpid() != kLoadingProcess; }

std::shared_ptr<rocksdb::Env> ForkAwareEnv(std::unique_ptr<rocksdb::Env> base) {
  return std::make_shared<Env>(std::move(base));
}

}  // namespace ckptdb::storage
