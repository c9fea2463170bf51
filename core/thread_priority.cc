#include "core/thread_priority.h"

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#endif

namespace ckptdb {

void LowerThisThreadsPriority() {
#if defined(__linux__)
  // The process's value is its main thread's (the thread group leader's id
  // is the process id).
  errno = 0;
  const int process = ::getpriority(PRIO_PROCESS, ::getpid());
  if (errno != 0) return;
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  const int current = ::getpriority(PRIO_PROCESS, tid);
  if (errno != 0) return;
  const int wanted = std::min(process + kBackgroundNice, 19);
  if (current < wanted) (void)::setpriority(PRIO_PROCESS, tid, wanted);
#endif
}

}  // namespace ckptdb
