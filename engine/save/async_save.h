#pragma once

#include <atomic>
#include <mutex>
#include <string>
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

// The shared state of one asynchronous save. Its outcome is the caller's to
// see: a failure no Wait() has returned is given to the DB's next collective
// call (Unreported), so that it is never lost without a word.
class AsyncSave : public PendingSave {
 public:
  // `what`: the save as an error names it ("step 7", "tag 'best'").
  explicit AsyncSave(std::string what) : what_(std::move(what)) {}

  bool Done() const override { return done_.load(); }
  Result<CheckpointInfo> Wait() override {
    Result<CheckpointInfo> result = Join();
    reported_ = true;
    return result;
  }

  // Waits for the save without reporting its outcome to anyone.
  Result<CheckpointInfo> Join() {
    std::lock_guard lock(mu_);
    if (thread_.joinable()) thread_.join();
    return result_;
  }

  // Once the save has finished (Join): its failure when no Wait() returned
  // it and no earlier Unreported() did, naming the save; OK otherwise.
  Status Unreported() {
    Result<CheckpointInfo> result = Join();
    if (result.ok() || reported_.exchange(true)) return Status::OK();
    return result.status().WithContext(
        "the asynchronous save of " + what_ +
        " failed, and no wait() had reported it");
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
  const std::string what_;
  std::mutex mu_;
  std::thread thread_;
  Result<CheckpointInfo> result_ = Status::Internal("save still running");
  std::atomic<bool> done_{false};
  std::atomic<bool> reported_{false};
};

}  // namespace ckptdb::engine
