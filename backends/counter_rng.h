// A counter-based random draw (as Philox is for PyTorch's CUDA dropout, here a splitmix64-style
// mix): the value for index i of stream `seed` is a pure function of (seed, i), so the CPU loops and
// the CUDA kernels draw the same bits, element by element, in any order and on any thread count,
// and a stream's whole state is (seed, next index). Dropout keeps element i where the draw is at or
// above p's threshold (DropoutDraw in backends/backend.h).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TL_HOST_DEVICE __host__ __device__
#else
#define TL_HOST_DEVICE
#endif

namespace trainlab {

// 32 well-mixed bits for (seed, index): splitmix64's finaliser over the seed's and the index's
// golden-ratio steps (distinct seeds give unrelated streams; consecutive indices unrelated draws).
TL_HOST_DEVICE inline std::uint32_t counter_draw(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0xD1B54A32D192ED03ull + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z >> 32);
}

// The draw at or above which an element is kept, for a drop probability p in [0, 1): p * 2^32,
// rounded down (p = 0 keeps everything).
TL_HOST_DEVICE inline std::uint32_t dropout_threshold(double p) {
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
}

}  // namespace trainlab
