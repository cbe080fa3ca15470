// The host's memory, for refusing a request that cannot fit before it is made (a std::bad_alloc,
// or the kernel's OOM killer, halfway through a run is neither clear nor one line).
#pragma once

#include <cstdint>
#include <string>

namespace trainlab {

// Physical memory and the memory available now (MemAvailable in /proc/meminfo), in bytes; 0 when
// unknown.
std::uint64_t host_memory_total_bytes();
std::uint64_t host_memory_available_bytes();
std::string human_size(std::uint64_t bytes);  // "3.0 GiB", "512 B"

}  // namespace trainlab
