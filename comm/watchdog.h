// Deadlines for blocking calls. A blocking MPI call (MPI_Allreduce, MPI_Waitall, ...) cannot time
// out by itself, so while one is in flight a DeadlineGuard is registered with a process-wide
// watchdog thread; the thread checks the guards every 50 ms and, when one has waited past its
// communicator's timeout, ends the job through the communicator, naming what was being waited for.
// Arming costs a mutex and a few stores, not a system call, so the fast path stays fast.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace trainlab::comm {

class Communicator;

class DeadlineGuard {
 public:
  // `what` describes the wait (called only if the deadline passes, on the watchdog thread).
  DeadlineGuard(Communicator& comm, std::function<std::string()> what);
  ~DeadlineGuard();
  DeadlineGuard(const DeadlineGuard&) = delete;
  DeadlineGuard& operator=(const DeadlineGuard&) = delete;

  Communicator& comm;
  std::function<std::string()> what;
  std::chrono::steady_clock::time_point start;
};

}  // namespace trainlab::comm
