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
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int current = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0)
    (void)::setpriority(PRIO_PROCESS, tid,
                        std::min(current + kBackgroundNice, 19));
#endif
}

}  // namespace ckptdb
