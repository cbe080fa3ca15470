// Helpers shared by the communication benchmarks (bench_allreduce, bench_buckets): byte sizes on
// the command line and in tables, and the single-core memcpy rate every busbw is compared with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainlab::bench {

// "4096", "4K", "4KiB", "2.5M", "1G" (K, M, G are powers of 1024). Throws Error naming the text.
std::int64_t parse_byte_size(const std::string& text, const std::string& what);
// "4K..256M" (every power of two from LO to HI), or a list "4K,1M,64M".
std::vector<std::int64_t> parse_byte_sizes(const std::string& spec, const std::string& what);
// Refuses (Error, naming the size) a size that is not a whole number of `element_bytes` elements
// (never rounded silently), and a largest size whose `buffers_per_rank` buffers, on every rank
// this host runs (OMPI_COMM_WORLD_LOCAL_SIZE and the like), need more memory than is available.
void check_message_sizes(const std::vector<std::int64_t>& sizes, std::int64_t element_bytes, const std::string& dtype,
                         int buffers_per_rank, const std::string& what);
// 4096 -> "4K", 3 MiB -> "3M", odd sizes in bytes ("4300000B").
std::string human_bytes(std::int64_t bytes);
// Single-core memcpy rate in GB/s (1e9 bytes/s): the median of ten 64 MiB copies after two warm-ups.
double memcpy_gbps();

}  // namespace trainlab::bench
