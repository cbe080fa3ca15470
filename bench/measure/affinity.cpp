#include "bench/measure/affinity.h"

#include <fmt/format.h>
#include <hwloc.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "backends/error.h"

namespace trainlab::bench {

CpuSet Topology::all() const {
  CpuSet out;
  for (const auto& c : cores) out.insert(out.end(), c.begin(), c.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::pair<CpuSet, CpuSet> Topology::halves() const {
  TL_CHECK(!cores.empty(), "topology: no cores");
  if (cores.size() == 1) return {cores[0], cores[0]};
  const std::size_t first = (cores.size() + 1) / 2;
  CpuSet a, b;
  for (std::size_t i = 0; i < cores.size(); ++i) {
    auto& half = i < first ? a : b;
    half.insert(half.end(), cores[i].begin(), cores[i].end());
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return {a, b};
}

CpuSet Topology::core(int index) const {
  TL_CHECK(!cores.empty(), "topology: no cores");
  const auto n = static_cast<int>(cores.size());
  return cores[static_cast<std::size_t>(((index % n) + n) % n)];
}

Topology machine_topology() {
  hwloc_topology_t topology;
  TL_CHECK(hwloc_topology_init(&topology) == 0, "topology: hwloc_topology_init failed");
  if (hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    throw Error("topology: hwloc could not read this machine's topology");
  }
  Topology out;
  const int depth = hwloc_get_type_depth(topology, HWLOC_OBJ_CORE);
  const int count = depth < 0 ? 0 : hwloc_get_nbobjs_by_depth(topology, static_cast<unsigned>(depth));
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_depth(topology, static_cast<unsigned>(depth), static_cast<unsigned>(i));
    CpuSet cpus;
    unsigned pu = 0;
    hwloc_bitmap_foreach_begin(pu, core->cpuset) cpus.push_back(static_cast<int>(pu));
    hwloc_bitmap_foreach_end();
    if (!cpus.empty()) out.cores.push_back(cpus);
  }
  if (out.cores.empty()) {  // no core level (some VMs): every processing unit is a core
    hwloc_const_cpuset_t all = hwloc_topology_get_allowed_cpuset(topology);
    unsigned pu = 0;
    hwloc_bitmap_foreach_begin(pu, all) out.cores.push_back({static_cast<int>(pu)});
    hwloc_bitmap_foreach_end();
  }
  hwloc_topology_destroy(topology);
  TL_CHECK(!out.cores.empty(), "topology: hwloc found no processing units this process may use");
  return out;
}

std::string cpu_list(const CpuSet& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

CpuSet parse_cpu_list(const std::string& text) {
  std::set<int> cpus;
  std::size_t start = 0;
  const auto bad = [&] { return Error("cpu list '" + text + "' is not like '0-3,8'"); };
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    if (item.empty()) throw bad();
    const auto dash = item.find('-');
    try {
      std::size_t used = 0;
      const int lo = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash)) throw bad();
      int hi = lo;
      if (dash != std::string::npos) {
        hi = std::stoi(item.substr(dash + 1), &used);
        if (used != item.size() - dash - 1) throw bad();
      }
      if (lo < 0 || hi < lo || hi >= CPU_SETSIZE) throw bad();
      for (int c = lo; c <= hi; ++c) cpus.insert(c);
    } catch (const std::logic_error&) {
      throw bad();
    }
    start = end + 1;
  }
  return {cpus.begin(), cpus.end()};
}

int current_tid() { return static_cast<int>(::syscall(SYS_gettid)); }

void set_thread_affinity(int tid, const CpuSet& cpus) {
  TL_CHECK(!cpus.empty(), "affinity: an empty CPU set");
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : cpus) {
    TL_CHECK(c >= 0 && c < CPU_SETSIZE, fmt::format("affinity: CPU {} is out of range", c));
    CPU_SET(c, &mask);
  }
  TL_CHECK(::sched_setaffinity(tid, sizeof(mask), &mask) == 0,
           fmt::format("affinity: cannot confine thread {} to CPUs {}: {}", tid == 0 ? current_tid() : tid,
                       cpu_list(cpus), std::strerror(errno)));
}

CpuSet thread_affinity(int tid) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  TL_CHECK(::sched_getaffinity(tid, sizeof(mask), &mask) == 0,
           fmt::format("affinity: cannot read thread {}'s CPUs: {}", tid, std::strerror(errno)));
  CpuSet out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) out.push_back(c);
  return out;
}

std::vector<ThreadAffinity> process_threads() {
  std::vector<ThreadAffinity> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    ThreadAffinity t;
    try {
      t.tid = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    std::ifstream comm(entry.path() / "comm");
    std::getline(comm, t.name);
    try {
      t.cpus = thread_affinity(t.tid);
    } catch (const Error&) {
      continue;  // the thread ended while we looked
    }
    out.push_back(std::move(t));
  }
  TL_CHECK(!ec, "affinity: cannot list /proc/self/task: " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.tid < b.tid; });
  return out;
}

void set_process_affinity(const CpuSet& cpus) {
  for (const auto& t : process_threads()) set_thread_affinity(t.tid, cpus);
}

}  // namespace trainlab::bench
