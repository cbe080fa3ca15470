// What the ISA tables of backends/cpu/simd.h share across their two files (simd.cpp: the plain
// and AVX2 tables and the choice between them; simd_avx512.cpp: the AVX-512 table): the target
// attributes, the plain loops the vector loops finish their tails with, and the AVX2 loops the
// AVX-512 table reuses (the transpose, and the conv taps' blocks for 8 channels left over).
// Private to backends/cpu/simd*.cpp.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/simd.h"
#include "backends/dtype.h"

#define TL_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

namespace trainlab::cpu {

constexpr std::uint16_t kBf16Inf = 0x7f80, kF16Inf = 0x7c00;
template <typename S>
constexpr std::uint16_t half_inf() {
  return std::is_same_v<S, bf16> ? kBf16Inf : kF16Inf;
}

// ---------------------------------------------------------------------------------------------
// the plain loops (their table is in simd.cpp)

namespace generic {

template <typename S>
void relu(const S* x, S* y, std::int64_t n) {
  // `<= 0` rather than `> 0`: a NaN is not <= 0, so it passes through (torch.relu).
  for (std::int64_t i = 0; i < n; ++i) y[i] = load<float>(x[i]) <= 0.f ? store<S>(0.f) : x[i];
}

template <typename S>
void relu_backward(const S* y, const S* dy, S* dx, std::int64_t n) {
  // PyTorch's threshold_backward on the result: zero where y <= 0, the gradient elsewhere (NaN too).
  for (std::int64_t i = 0; i < n; ++i) dx[i] = load<float>(y[i]) <= 0.f ? store<S>(0.f) : dy[i];
}

template <typename H>
void narrow(const float* x, H* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = H(x[i]);
}

template <typename H>
void widen(const H* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

}  // namespace generic

// ---------------------------------------------------------------------------------------------
// the AVX2 loops the AVX-512 table uses too (the rest of AVX2 is in simd.cpp)

namespace avx2 {

// 8 x 8 tiles through registers (the usual unpack, shuffle, permute); the edges by the plain loops.
TL_TARGET_AVX2 inline void transpose_f32(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (std::int64_t r = 0; r < rows8; r += 8) {
    for (std::int64_t c = 0; c < cols8; c += 8) {
      __m256 v[8], t[8];
      for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(in + (r + i) * cols + c);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        v[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        v[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        v[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        v[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
      }
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(out + (c + i) * rows + r, _mm256_permute2f128_ps(v[i], v[i + 4], 0x20));
        _mm256_storeu_ps(out + (c + i + 4) * rows + r, _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
      }
    }
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = r < rows8 ? cols8 : 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

// The convolution's taps (conv_few_channels.h): NT taps times NV registers of dy (8 lanes each)
// kept in registers over all the pixels, one broadcast of the input per tap and pixel. acc and dy
// point at the block's first tap and output channel.
template <int NT, int NV>
TL_TARGET_AVX2 void taps_block(const float* src, std::int64_t row_stride, std::int64_t col_stride,
                               const std::int64_t* tap, const float* dy, std::int64_t rows, std::int64_t cols,
                               std::int64_t oc, float* acc) {
  __m256 a[NT][NV];
  std::int64_t at[NT];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) {
    at[t] = tap[t];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) a[t][v] = _mm256_setzero_ps();
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * row_stride;
    const float* g = dy + r * cols * oc;
    for (std::int64_t c = 0; c < cols; ++c, s += col_stride, g += oc) {
      __m256 gv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) gv[v] = _mm256_loadu_ps(g + 8 * v);
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        const __m256 b = _mm256_broadcast_ss(s + at[t]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) a[t][v] = _mm256_fmadd_ps(b, gv[v], a[t][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(acc + t * oc + 8 * v, a[t][v]);
}

using TapsBlock = void (*)(const float*, std::int64_t, std::int64_t, const std::int64_t*, const float*, std::int64_t,
                           std::int64_t, std::int64_t, float*);

template <int NV, std::size_t... I>
constexpr std::array<TapsBlock, sizeof...(I)> taps_blocks(std::index_sequence<I...>) {
  return {&taps_block<static_cast<int>(I) + 1, NV>...};
}

// The taps in as few blocks of at most blocks.size() as there can be, of near-equal size.
template <std::size_t N>
inline void taps_run(const std::array<TapsBlock, N>& blocks, const float* src, std::int64_t row_stride,
                     std::int64_t col_stride, const std::int64_t* tap, std::int64_t taps, const float* dy,
                     std::int64_t rows, std::int64_t cols, std::int64_t oc, float* acc) {
  const std::int64_t max = static_cast<std::int64_t>(N);
  std::int64_t left = (taps + max - 1) / max;
  for (std::int64_t t0 = 0; t0 < taps; --left) {
    const std::int64_t nt = (taps - t0 + left - 1) / left;
    blocks[static_cast<std::size_t>(nt - 1)](src, row_stride, col_stride, tap + t0, dy, rows, cols, oc, acc + t0 * oc);
    t0 += nt;
  }
}

// 16 registers: 6 taps x 2 registers of dy (16 channels), or 12 taps x 1 (8 channels).
constexpr auto kTaps16 = taps_blocks<2>(std::make_index_sequence<6>());
constexpr auto kTaps8 = taps_blocks<1>(std::make_index_sequence<12>());

}  // namespace avx2

namespace avx512 {
// The AVX-512 table (simd_avx512.cpp).
const SimdKernels& kernels();
}  // namespace avx512

}  // namespace trainlab::cpu
