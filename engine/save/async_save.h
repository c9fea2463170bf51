#pragma once

#include <atomic>
#include <mutex>
#include <thread>

#include "ckptdb/db.h"

namespace ckptdb::engine {

// Lowers the calling thread's priority (Linux: raises its nice value by 5, at
// most to 19), so that a background save yields to the caller's threads where
// they compete for a core; threads it starts inherit the value.
void LowerThisThreadsPriority();

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
