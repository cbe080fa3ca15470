// The CPU backends' elementwise loops split into fixed chunks (cpu_backend.cpp, cpu_optim.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

namespace trainlab::cpu {

// Elementwise loops split into fixed chunks so that small tensors stay on one thread and every
// element is computed the same way at any thread count.
inline constexpr std::int64_t kChunk = 1 << 15;

template <typename Fn>
void parallel_chunks(std::int64_t n, int threads, Fn&& fn) {
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) {
    if (n > 0) fn(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace trainlab::cpu
