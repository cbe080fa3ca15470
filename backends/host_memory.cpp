#include "backends/host_memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>

namespace trainlab {

namespace {
std::uint64_t meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  std::uint64_t kib = 0;
  while (in >> name >> kib >> unit) {
    if (name == key) return kib * 1024;
  }
  return 0;
}
}  // namespace

std::uint64_t host_memory_total_bytes() { return meminfo_bytes("MemTotal:"); }
std::uint64_t host_memory_available_bytes() { return meminfo_bytes("MemAvailable:"); }

std::string human_size(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %s", value, units[unit]);
  return buffer;
}

std::string memory_limits_text() {
  std::string text = human_size(host_memory_available_bytes()) + " available";
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    text += ", address space capped at " + human_size(limit.rlim_cur) + " (ulimit -v)";
  return text;
}

std::string allocation_failure(const std::string& what, std::uint64_t bytes) {
  return "out of memory " + what + ": " + human_size(bytes) + " could not be allocated (" + memory_limits_text() + ")";
}

}  // namespace trainlab
