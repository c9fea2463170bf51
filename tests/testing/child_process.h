#pragma once

// A test's body run in a forked child process, with a time limit.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

namespace ckptdb::testing {

// Runs `body` (returning the exit code) in a forked child that exits with it
// (`_exit`: no static destructors of the parent's copy). Returns the child's
// exit code, -1 when it did not exit normally, or nullopt when it still ran
// after `limit` (it is then killed).
template <typename Body>
std::optional<int> ExitCodeOfChild(
    Body body, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace ckptdb::testing
