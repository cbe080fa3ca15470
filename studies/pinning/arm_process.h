// One repeat of one pinning arm as its own process (studies/pinning/driver.h): the parent starts this
// program with the arm's CPU mask set before exec and reads the child's one-line result; and the
// busy process that makes the contended condition.
#pragma once

#include <sys/types.h>
#include <string>

#include "bench/measure/affinity.h"
#include "studies/pinning/driver.h"
#include "studies/pinning/rows.h"

namespace trainlab::bench {

struct ArmPlan {
  std::string name;
  CpuSet main, workers;  // empty: unconfined
  int threads = 0;       // 0: the backend's default
};

struct ChildResult {
  bool ok = false;
  std::string error;         // when not ok: what happened to the child
  PinningChildReport value;  // when ok
};

// Starts this program as `arm`'s child (its CPU mask set before exec) with `workers` loader workers
// and the options' workload, waits at most options.timeout seconds, and reads its result.
ChildResult run_arm(const PinningOptions& options, const ArmPlan& arm, int workers, const std::string& trace);

// N busy threads that nobody pins, in a process of their own (this program, exec'd); ended by
// stop(), and with this process if it dies first. Zero threads: nothing is started.
class Contention {
 public:
  explicit Contention(int threads);
  ~Contention() { stop(); }
  Contention(const Contention&) = delete;
  Contention& operator=(const Contention&) = delete;
  void stop();

 private:
  pid_t pid_ = -1;
};

}  // namespace trainlab::bench
