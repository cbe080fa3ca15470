// CPU sets and thread affinity, for the pinning study (studies/pinning) and bench_scaling's --bind:
// the machine's physical cores from its topology (hwloc), so that "half the cores" means the same
// on 2 cores and on 96; each thread's mask set, and every thread's mask read back from
// /proc/self/task so that a study records what was applied, not what it asked for.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trainlab::bench {

using CpuSet = std::vector<int>;  // logical CPU (processing unit) numbers, sorted, no repeats

struct Topology {
  std::vector<CpuSet> cores;  // each physical core's logical CPUs, in topology order
  int physical_cores() const { return static_cast<int>(cores.size()); }
  CpuSet all() const;  // every logical CPU
  // The cores in two halves: the first ceil(n/2) cores and the rest. On one core both halves are
  // that core (there is nothing to split).
  std::pair<CpuSet, CpuSet> halves() const;
  // The logical CPUs of core `index` modulo the number of cores (rank-per-core binding).
  CpuSet core(int index) const;
};

// The cores this process may run on (hwloc, restricted to its allowed CPUs). Throws Error when the
// topology cannot be read.
Topology machine_topology();

std::string cpu_list(const CpuSet& cpus);               // {0,1,2,3,8} -> "0-3,8"
CpuSet parse_cpu_list(const std::string& text);         // "0-3,8" -> {0,1,2,3,8}; throws Error naming the text
int current_tid();                                      // the calling thread's kernel id
void set_thread_affinity(int tid, const CpuSet& cpus);  // tid 0: the calling thread; throws Error
CpuSet thread_affinity(int tid);                        // tid 0: the calling thread
// Every thread this process has now: its kernel id, name and the CPUs it may run on, read back
// from /proc/self/task.
struct ThreadAffinity {
  int tid = 0;
  std::string name;
  CpuSet cpus;
};
std::vector<ThreadAffinity> process_threads();
// Sets every current thread of this process to `cpus` (threads created later inherit the mask of
// the thread that creates them).
void set_process_affinity(const CpuSet& cpus);

}  // namespace trainlab::bench
