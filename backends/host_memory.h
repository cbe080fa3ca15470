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
// The limits an allocation failed against, for its one-line message: "4.0 GiB available, address
// space capped at 512.0 MiB (ulimit -v)" (the cap only when there is one).
std::string memory_limits_text();
// The message of a failed allocation of `bytes` for `what` ("reading 'x.bin'").
std::string allocation_failure(const std::string& what, std::uint64_t bytes);

}  // namespace trainlab
