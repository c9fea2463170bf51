#include "tests/testing/fault_injection.h"

namespace ckptdb::testing {

void FaultInjector::Arm(const FaultRule& rule) {
  std::lock_guard lock(mu_);
  rule_ = rule;
  armed_ = true;
  calls_ = 0;
  injected_.clear();
}

void FaultInjector::Disarm() {
  std::lock_guard lock(mu_);
  armed_ = false;
}

int FaultInjector::BeforeOperation(FileOp op, std::string_view path,
                                   uint64_t bytes) {
  std::lock_guard lock(mu_);
  if ((rule_.ops & FileOpMask(op)) == 0) return 0;
  if (!rule_.path_contains.empty() &&
      path.find(rule_.path_contains) == std::string_view::npos)
    return 0;
  const int64_t n = ++calls_;
  if (!armed_) return 0;
  int error = 0;
  if (rule_.nth > 0 && (n == rule_.nth || (rule_.from_nth_on && n > rule_.nth)))
    error = rule_.error;
  if (error == 0 && rule_.free_bytes >= 0 && bytes > 0) {
    if (bytes > static_cast<uint64_t>(rule_.free_bytes))
      error = ENOSPC;
    else
      rule_.free_bytes -= static_cast<int64_t>(bytes);
  }
  if (error != 0) injected_.push_back({op, std::string(path), error});
  return error;
}

void FaultInjector::Freeing(std::string_view, uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (rule_.free_bytes >= 0) rule_.free_bytes += static_cast<int64_t>(bytes);
}

int64_t FaultInjector::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::vector<InjectedFault> FaultInjector::injected() const {
  std::lock_guard lock(mu_);
  return injected_;
}

}  // namespace ckptdb::testing
