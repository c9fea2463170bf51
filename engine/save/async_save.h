#pragma once

#include <atomic>
#include <mutex>
#include <thread>

#include "ckptdb/db.h"
#include "core/thread_priority.h"

namespace ckptdb::engine {

// The cores this process may count as its own: its CPU affinity where a
// launcher bound it to part of the machine, else the machine's hardware
// threads divided among the processes the launcher started on this host
// (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS,
// SLURM_NTASKS_PER_NODE; none set: this process alone). At least 1.
int CoresOfThisProcess();

// Whether a thread beside the caller's would run on a core of its own now:
// the process has 2 cores or more (CoresOfThisProcess) and fewer threads are
// runnable on the machine than it has hardware threads (Linux's
// procs_running; elsewhere the first condition alone).
bool HasASpareCore();

// The shared state of one asynchronous save.
class AsyncSave : public PendingSave {
 public:
  bool Done() const override { return done_.load(); }
  Result<CheckpointInfo> Wait() override {
    std::lock_guard lock(mu_);
    if (thread_.joinable()) thread_.join();
    return result_;
  }

  template <typename Fn>
  void Start(Fn&& fn) {
    thread_ = std::thread([this, fn = std::forward<Fn>(fn)]() mutable {
      LowerThisThreadsPriority();
      result_ = fn();
      done_ = true;
    });
  }

 private:
  std::mutex mu_;
  std::thread thread_;
  Result<CheckpointInfo> result_ = Status::Internal("save still running");
  std::atomic<bool> done_{false};
};

}  // namespace ckptdb::engine
