#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb::engine {

// Runs fn(i) for i in [0, n) on up to `threads` threads (the caller's thread
// among them). Stops handing out work after the first error and returns it (the
// error of the lowest task index among those that failed).
template <typename Fn>
Status ParallelFor(size_t n, int threads, Fn&& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t error_index = n;
  Status error;
  auto worker = [&]() {
    while (!failed.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (i < error_index) {
          error_index = i;
          error = std::move(s);
        }
        failed = true;
      }
    }
  };
  const size_t count =
      std::min<size_t>(n, static_cast<size_t>(std::max(threads, 1)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return error;
}

}  // namespace ckptdb::engine
