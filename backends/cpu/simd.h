// The CPU backends' hand-vectorised loops, one table per instruction-set family, chosen once at
// run time (backends/cpu/isa.h): so that one binary, built for the portable baseline, still runs
// its AVX-512 loops where the CPU has them, and an AVX-512 build capped to AVX2 runs what an AVX2
// machine would. Every entry gives the same bits on every ISA (the tests compare them); the
// x86-64 table is the plain loops.
//
// Each ISA's loops are functions compiled for that ISA alone (a target attribute, simd.cpp), so no
// code of a higher ISA can leak into a function that runs everywhere.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cpu/isa.h"
#include "backends/dtype.h"

namespace trainlab::cpu {

struct SimdKernels {
  CpuIsa isa;
  // ReLU as torch.relu (a NaN passes; y is +0 where x <= 0), and its backward from the output:
  // dx = dy where !(y <= 0), else +0.
  void (*relu_f32)(const float* x, float* y, std::int64_t n);
  void (*relu_bf16)(const bf16* x, bf16* y, std::int64_t n);
  void (*relu_f16)(const f16* x, f16* y, std::int64_t n);
  void (*relu_backward_f32)(const float* y, const float* dy, float* dx, std::int64_t n);
  void (*relu_backward_bf16)(const bf16* y, const bf16* dy, bf16* dx, std::int64_t n);
  void (*relu_backward_f16)(const f16* y, const f16* dy, f16* dx, std::int64_t n);
  // Casts, bit-identical to backends/dtype.h's scalar conversions (f32 -> half rounds to nearest
  // even once; NaN stays NaN with dtype.h's payload; half -> f32 is exact).
  void (*f32_to_bf16)(const float* x, bf16* y, std::int64_t n);
  void (*bf16_to_f32)(const bf16* x, float* y, std::int64_t n);
  void (*f32_to_f16)(const float* x, f16* y, std::int64_t n);
  void (*f16_to_f32)(const f16* x, float* y, std::int64_t n);
  // Max-pool over 2x2 windows (backends/cpu/max_pool_2x2.h): the forward over `count` channels
  // whose window candidates start at a, b, c, d, writing the winner and its place (0..3)...
  void (*pool_forward_f32)(const float* a, const float* b, const float* c, const float* d, float* out,
                           std::uint8_t* place, std::int64_t count);
  void (*pool_forward_bf16)(const bf16* a, const bf16* b, const bf16* c, const bf16* d, bf16* out, std::uint8_t* place,
                            std::int64_t count);
  void (*pool_forward_f16)(const f16* a, const f16* b, const f16* c, const f16* d, f16* out, std::uint8_t* place,
                           std::int64_t count);
  // ...the backward (dy to the winner's place, +0 to the other three), by element size...
  void (*pool_backward_32)(const std::uint32_t* dy, const std::uint8_t* place, std::uint32_t* a, std::uint32_t* b,
                           std::uint32_t* c, std::uint32_t* d, std::int64_t count);
  void (*pool_backward_16)(const std::uint16_t* dy, const std::uint8_t* place, std::uint16_t* a, std::uint16_t* b,
                           std::uint16_t* c, std::uint16_t* d, std::int64_t count);
  // ...the conv blocks' pool and ReLU (pool2x2::forward_blocked_relu): one output row of one block
  // of `block` channels, its windows' candidates in the input rows `top` and `bottom`
  // ([2 * ow_n][block]), output `ow` at out + ow * out_stride, and, unless `place` is null
  // (inference), its place at place + ow * out_stride (pool2x2::relu_after's rule)...
  void (*pool_relu_row_f32)(const float* top, const float* bottom, std::int64_t block, std::int64_t ow_n, float* out,
                            std::int64_t out_stride, std::uint8_t* place);
  void (*pool_relu_row_bf16)(const bf16* top, const bf16* bottom, std::int64_t block, std::int64_t ow_n, bf16* out,
                             std::int64_t out_stride, std::uint8_t* place);
  void (*pool_relu_row_f16)(const f16* top, const f16* bottom, std::int64_t block, std::int64_t ow_n, f16* out,
                            std::int64_t out_stride, std::uint8_t* place);
  // ...[rows][cols] f32 -> [cols][rows] (out[c * rows + r] = in[r * cols + c]), for the pool's NCHW output...
  void (*transpose_f32)(const float* in, float* out, std::int64_t rows, std::int64_t cols);
  // ...and NCHW rows split into their even and odd elements (2 * count of them), and back.
  void (*split_pairs_32)(const std::uint32_t* row, std::uint32_t* even, std::uint32_t* odd, std::int64_t count);
  void (*split_pairs_16)(const std::uint16_t* row, std::uint16_t* even, std::uint16_t* odd, std::int64_t count);
  void (*merge_pairs_32)(const std::uint32_t* even, const std::uint32_t* odd, std::uint32_t* row, std::int64_t count);
  void (*merge_pairs_16)(const std::uint16_t* even, const std::uint16_t* odd, std::uint16_t* row, std::int64_t count);
  // A convolution's weight-gradient taps over one image (backends/cpu/conv_few_channels.h):
  // acc[t * oc + o] = sum over the pixels (r, c), rows x cols in row order, of
  // src[r * row_stride + c * col_stride + tap[t]] * dy[(r * cols + c) * oc + o], from +0 with one
  // fused multiply-add per term (oc a multiple of 8; the x86-64 entry calls std::fma).
  void (*conv_taps_f32)(const float* src, std::int64_t row_stride, std::int64_t col_stride, const std::int64_t* tap,
                        std::int64_t taps, const float* dy, std::int64_t rows, std::int64_t cols, std::int64_t oc,
                        float* acc);
};

// The table for cpu_isa(), chosen on first use.
const SimdKernels& simd();
// The table of one family (at most what this CPU has; for tests that compare the families).
// Throws Error when the CPU lacks `isa`.
const SimdKernels& simd_for(CpuIsa isa);

// ReLU over n elements of S through this CPU's table (x and y may be the same buffer); f64 and the
// other types by the plain rule (`<= 0`: a NaN passes through, as torch.relu).
template <typename S>
inline void relu_run(const S* x, S* y, std::int64_t n) {
  if constexpr (std::is_same_v<S, float>) {
    simd().relu_f32(x, y, n);
  } else if constexpr (std::is_same_v<S, bf16>) {
    simd().relu_bf16(x, y, n);
  } else if constexpr (std::is_same_v<S, f16>) {
    simd().relu_f16(x, y, n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] <= S(0) ? S(0) : x[i];
  }
}

// A half-precision row widened to f32 and an f32 row narrowed back (the SIMD casts above).
template <typename S>
inline void widen_run(const S* x, float* y, std::int64_t n) {
  if constexpr (std::is_same_v<S, bf16>) {
    simd().bf16_to_f32(x, y, n);
  } else {
    simd().f16_to_f32(x, y, n);
  }
}
template <typename S>
inline void narrow_run(const float* x, S* y, std::int64_t n) {
  if constexpr (std::is_same_v<S, bf16>) {
    simd().f32_to_bf16(x, y, n);
  } else {
    simd().f32_to_f16(x, y, n);
  }
}

}  // namespace trainlab::cpu
