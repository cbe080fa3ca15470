// The AVX-512 table of backends/cpu/simd.h (simd.cpp holds the plain and AVX2 ones and chooses
// among them). Like every ISA's loops, these carry their target attribute: only they are compiled
// for AVX-512, and what they share (simd_internal.h, max_pool_2x2.h) is merely inlined into them.
// No lambdas inside them: a lambda does not inherit its function's target.
#include <immintrin.h>

#include <array>
#include <utility>

#include "backends/cpu/max_pool_2x2.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/simd_internal.h"

namespace trainlab::cpu {

// ---------------------------------------------------------------------------------------------
// AVX-512 (F, BW, DQ, VL): 16 f32 or 32 half values per register, masked in registers (blends and
// ANDs), never by masked loads and stores, which this project's AMD cores run over ten times
// slower (16 ms against 0.5 ms for a 4M-element ReLU backward).

namespace avx512 {
namespace {

// 32 bf16/f16 values at once, on their bits: which are not <= 0 (a NaN, or the sign clear and not
// +0). ReLU keeps exactly those.
template <typename S>
TL_TARGET_AVX512 inline __mmask32 half_not_at_most_zero(__m512i v) {
  const __m512i inf = _mm512_set1_epi16(static_cast<short>(half_inf<S>()));
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7fff)), inf);
  return nan | _mm512_cmpgt_epi16_mask(v, _mm512_setzero_si512());
}

TL_TARGET_AVX512 void relu_f32(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(y + i, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v));
  }
  generic::relu(x + i, y + i, n - i);
}

template <typename S>
TL_TARGET_AVX512 void relu_half(const S* x, S* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_loadu_si512(x + i);
    _mm512_storeu_si512(y + i, _mm512_maskz_mov_epi16(half_not_at_most_zero<S>(v), v));
  }
  generic::relu(x + i, y + i, n - i);
}

TL_TARGET_AVX512 void relu_backward_f32(const float* y, const float* dy, float* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 keep = _mm512_cmp_ps_mask(_mm512_loadu_ps(y + i), _mm512_setzero_ps(), _CMP_NLE_UQ);
    const __m512 ones = _mm512_castsi512_ps(_mm512_movm_epi32(keep));
    _mm512_storeu_ps(dx + i, _mm512_and_ps(ones, _mm512_loadu_ps(dy + i)));
  }
  generic::relu_backward(y + i, dy + i, dx + i, n - i);
}

template <typename S>
TL_TARGET_AVX512 void relu_backward_half(const S* y, const S* dy, S* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i ones = _mm512_movm_epi16(half_not_at_most_zero<S>(_mm512_loadu_si512(y + i)));
    _mm512_storeu_si512(dx + i, _mm512_and_si512(ones, _mm512_loadu_si512(dy + i)));
  }
  generic::relu_backward(y + i, dy + i, dx + i, n - i);
}

TL_TARGET_AVX512 void f32_to_bf16(const float* x, bf16* y, std::int64_t n) {
  std::int64_t i = 0;
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i half_ulp = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_loadu_si512(x + i);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, magnitude), inf);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(half_ulp, odd)), 16);
    const __m512i out = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(out));
  }
  generic::narrow(x + i, y + i, n - i);
}

TL_TARGET_AVX512 void bf16_to_f32(const bf16* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    _mm512_storeu_si512(y + i, _mm512_slli_epi32(h, 16));
  }
  generic::widen(x + i, y + i, n - i);
}

TL_TARGET_AVX512 void f32_to_f16(const float* x, f16* y, std::int64_t n) {
  std::int64_t i = 0;
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512i bits = _mm512_castps_si512(v);
    const __m256i converted = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, magnitude), inf);
    const __m512i payload =
        _mm512_or_si512(_mm512_or_si512(_mm512_set1_epi32(0x7e00),
                                        _mm512_and_si512(_mm512_srli_epi32(bits, 13), _mm512_set1_epi32(0x3ff))),
                        _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000)));
    const __m256i out = _mm256_mask_mov_epi16(converted, nan, _mm512_cvtepi32_epi16(payload));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), out);
  }
  generic::narrow(x + i, y + i, n - i);
}

TL_TARGET_AVX512 void f16_to_f32(const f16* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m512i converted = _mm512_castps_si512(_mm512_cvtph_ps(h));
    const __m512i h32 = _mm512_cvtepu16_epi32(h);
    const __mmask16 nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(h32, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7c00));
    const __m512i payload =
        _mm512_or_si512(_mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x8000)), 16),
                                        _mm512_set1_epi32(0x7f800000)),
                        _mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x3ff)), 13));
    _mm512_storeu_si512(y + i, _mm512_mask_mov_epi32(converted, nan, payload));
  }
  generic::widen(x + i, y + i, n - i);
}

// 32 bf16/f16 keys at once (max_pool_2x2.h's half_key, vectorised).
template <typename S>
TL_TARGET_AVX512 inline __m512i half_keys(__m512i v) {
  const __m512i inf = _mm512_set1_epi16(static_cast<short>(half_inf<S>()));
  const __m512i sign = _mm512_set1_epi16(static_cast<short>(0x8000));
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7fff)), inf);
  const __mmask32 negative = _mm512_movepi16_mask(v);
  const __mmask32 negative_zero = _mm512_cmpeq_epi16_mask(v, sign);
  __m512i key = _mm512_mask_mov_epi16(_mm512_or_si512(v, sign), negative, _mm512_ternarylogic_epi32(v, v, v, 0x55));
  key = _mm512_mask_mov_epi16(key, negative_zero, sign);
  return _mm512_mask_mov_epi16(key, nan, _mm512_set1_epi16(-1));
}

// The winners of 16 f32 windows at q (avx2::winner_f32's rule) and their places in `where`.
TL_TARGET_AVX512 inline __m512 winner_f32(const float* a, const float* const* rest, std::int64_t q, __m512i& where) {
  __m512 best = _mm512_loadu_ps(a + q);
  where = _mm512_setzero_si512();
  for (int j = 0; j < 3; ++j) {
    const __m512 v = _mm512_loadu_ps(rest[j] + q);
    const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                           (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & ~_mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q));
    best = _mm512_mask_mov_ps(best, take, v);
    where = _mm512_mask_mov_epi32(where, take, _mm512_set1_epi32(j + 1));
  }
  return best;
}

// The winners of 32 bf16/f16 windows at q and their places in `where` (16-bit lanes).
template <typename S>
TL_TARGET_AVX512 inline __m512i winner_half(const S* a, const S* const* rest, std::int64_t q, __m512i& where) {
  __m512i best = _mm512_loadu_si512(a + q);
  __m512i best_key = half_keys<S>(best);
  where = _mm512_setzero_si512();
  for (int j = 0; j < 3; ++j) {
    const __m512i v = _mm512_loadu_si512(rest[j] + q);
    const __m512i key = half_keys<S>(v);
    const __mmask32 take = _mm512_cmpgt_epu16_mask(key, best_key);
    best = _mm512_mask_mov_epi16(best, take, v);
    best_key = _mm512_mask_mov_epi16(best_key, take, key);
    where = _mm512_mask_mov_epi16(where, take, _mm512_set1_epi16(static_cast<short>(j + 1)));
  }
  return best;
}

TL_TARGET_AVX512 void pool_forward_f32(const float* a, const float* b, const float* c, const float* d, float* out,
                                       std::uint8_t* place, std::int64_t count) {
  std::int64_t q = 0;
  const float* rest[3] = {b, c, d};
  for (; q + 16 <= count; q += 16) {
    __m512i where;
    _mm512_storeu_ps(out + q, winner_f32(a, rest, q, where));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(place + q), _mm512_cvtepi32_epi8(where));
  }
  pool2x2::forward_run_scalar(a + q, b + q, c + q, d + q, out + q, place + q, count - q);
}

TL_TARGET_AVX512 void pool_relu_row_f32(const float* top, const float* bottom, std::int64_t block, std::int64_t ow_n,
                                        float* out, std::int64_t out_stride, std::uint8_t* place) {
  for (std::int64_t ow = 0; ow < ow_n; ++ow) {
    const float *a = top + 2 * ow * block, *c = bottom + 2 * ow * block;
    const float* rest[3] = {a + block, c, c + block};
    float* o = out + ow * out_stride;
    std::uint8_t* at = place != nullptr ? place + ow * out_stride : nullptr;
    std::int64_t q = 0;
    for (; q + 16 <= block; q += 16) {
      __m512i where;
      const __m512 best = winner_f32(a, rest, q, where);
      const __mmask16 positive = _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_NLE_UQ);
      _mm512_storeu_ps(o + q, _mm512_maskz_mov_ps(positive, best));
      if (at != nullptr) {
        where = _mm512_mask_or_epi32(where, static_cast<__mmask16>(~positive), where, _mm512_set1_epi32(4));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(at + q), _mm512_cvtepi32_epi8(where));
      }
    }
    pool2x2::pool_relu_window_scalar(a, rest[0], rest[1], rest[2], o, at, q, block);
  }
}

// pool_relu_row_f32's rule over 16-bit values (avx2::pool_relu_row_half, 32 lanes).
template <typename S>
TL_TARGET_AVX512 void pool_relu_row_half(const S* top, const S* bottom, std::int64_t block, std::int64_t ow_n, S* out,
                                         std::int64_t out_stride, std::uint8_t* place) {
  const __m512i inf = _mm512_set1_epi16(static_cast<short>(half_inf<S>()));
  for (std::int64_t ow = 0; ow < ow_n; ++ow) {
    const S *a = top + 2 * ow * block, *c = bottom + 2 * ow * block;
    const S* rest[3] = {a + block, c, c + block};
    S* o = out + ow * out_stride;
    std::uint8_t* at = place != nullptr ? place + ow * out_stride : nullptr;
    std::int64_t q = 0;
    for (; q + 32 <= block; q += 32) {
      __m512i where;
      const __m512i best = winner_half(a, rest, q, where);
      const __mmask32 keep = _mm512_cmpgt_epi16_mask(best, _mm512_setzero_si512()) |
                             _mm512_cmpgt_epu16_mask(_mm512_and_si512(best, _mm512_set1_epi16(0x7fff)), inf);
      _mm512_storeu_si512(o + q, _mm512_maskz_mov_epi16(keep, best));
      if (at != nullptr) {
        where = _mm512_mask_mov_epi16(_mm512_or_si512(where, _mm512_set1_epi16(4)), keep, where);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + q), _mm512_cvtepi16_epi8(where));
      }
    }
    pool2x2::pool_relu_window_scalar(a, rest[0], rest[1], rest[2], o, at, q, block);
  }
}

template <typename S>
TL_TARGET_AVX512 void pool_forward_half(const S* a, const S* b, const S* c, const S* d, S* out, std::uint8_t* place,
                                        std::int64_t count) {
  std::int64_t q = 0;
  const S* rest[3] = {b, c, d};
  for (; q + 32 <= count; q += 32) {
    __m512i where;
    _mm512_storeu_si512(out + q, winner_half(a, rest, q, where));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(place + q), _mm512_cvtepi16_epi8(where));
  }
  pool2x2::forward_run_scalar(a + q, b + q, c + q, d + q, out + q, place + q, count - q);
}

TL_TARGET_AVX512 void pool_backward_32(const std::uint32_t* dy, const std::uint8_t* place, std::uint32_t* a,
                                       std::uint32_t* b, std::uint32_t* c, std::uint32_t* d, std::int64_t count) {
  std::int64_t q = 0;
  std::uint32_t* targets[4] = {a, b, c, d};
  for (; q + 16 <= count; q += 16) {
    const __m512i g = _mm512_loadu_si512(dy + q);
    const __m512i where = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(place + q)));
    for (int j = 0; j < 4; ++j)
      _mm512_storeu_si512(targets[j] + q,
                          _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(where, _mm512_set1_epi32(j)), g));
  }
  pool2x2::backward_run_scalar(dy + q, place + q, a + q, b + q, c + q, d + q, count - q);
}

TL_TARGET_AVX512 void pool_backward_16(const std::uint16_t* dy, const std::uint8_t* place, std::uint16_t* a,
                                       std::uint16_t* b, std::uint16_t* c, std::uint16_t* d, std::int64_t count) {
  std::int64_t q = 0;
  std::uint16_t* targets[4] = {a, b, c, d};
  for (; q + 32 <= count; q += 32) {
    const __m512i g = _mm512_loadu_si512(dy + q);
    const __m512i where = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(place + q)));
    for (int j = 0; j < 4; ++j) {
      const __mmask32 mine = _mm512_cmpeq_epi16_mask(where, _mm512_set1_epi16(static_cast<short>(j)));
      _mm512_storeu_si512(targets[j] + q, _mm512_maskz_mov_epi16(mine, g));
    }
  }
  pool2x2::backward_run_scalar(dy + q, place + q, a + q, b + q, c + q, d + q, count - q);
}

TL_TARGET_AVX512 void split_pairs_32(const std::uint32_t* row, std::uint32_t* even, std::uint32_t* odd,
                                     std::int64_t count) {
  std::int64_t i = 0;
  const __m512i even_index = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_index = _mm512_add_epi32(even_index, _mm512_set1_epi32(1));
  for (; i + 16 <= count; i += 16) {
    const __m512i lo = _mm512_loadu_si512(row + 2 * i), hi = _mm512_loadu_si512(row + 2 * i + 16);
    _mm512_storeu_si512(even + i, _mm512_permutex2var_epi32(lo, even_index, hi));
    _mm512_storeu_si512(odd + i, _mm512_permutex2var_epi32(lo, odd_index, hi));
  }
  pool2x2::split_pairs_scalar(row + 2 * i, even + i, odd + i, count - i);
}

alignas(64) constexpr std::uint16_t kEven16[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                                   32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
alignas(64) constexpr std::uint16_t kLow16[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};

TL_TARGET_AVX512 void split_pairs_16(const std::uint16_t* row, std::uint16_t* even, std::uint16_t* odd,
                                     std::int64_t count) {
  std::int64_t i = 0;
  const __m512i even_index = _mm512_load_si512(kEven16);
  const __m512i odd_index = _mm512_add_epi16(even_index, _mm512_set1_epi16(1));
  for (; i + 32 <= count; i += 32) {
    const __m512i lo = _mm512_loadu_si512(row + 2 * i), hi = _mm512_loadu_si512(row + 2 * i + 32);
    _mm512_storeu_si512(even + i, _mm512_permutex2var_epi16(lo, even_index, hi));
    _mm512_storeu_si512(odd + i, _mm512_permutex2var_epi16(lo, odd_index, hi));
  }
  pool2x2::split_pairs_scalar(row + 2 * i, even + i, odd + i, count - i);
}

TL_TARGET_AVX512 void merge_pairs_32(const std::uint32_t* even, const std::uint32_t* odd, std::uint32_t* row,
                                     std::int64_t count) {
  std::int64_t i = 0;
  const __m512i low_index = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high_index = _mm512_add_epi32(low_index, _mm512_set1_epi32(8));
  for (; i + 16 <= count; i += 16) {
    const __m512i e = _mm512_loadu_si512(even + i), o = _mm512_loadu_si512(odd + i);
    _mm512_storeu_si512(row + 2 * i, _mm512_permutex2var_epi32(e, low_index, o));
    _mm512_storeu_si512(row + 2 * i + 16, _mm512_permutex2var_epi32(e, high_index, o));
  }
  pool2x2::merge_pairs_scalar(even + i, odd + i, row + 2 * i, count - i);
}

TL_TARGET_AVX512 void merge_pairs_16(const std::uint16_t* even, const std::uint16_t* odd, std::uint16_t* row,
                                     std::int64_t count) {
  std::int64_t i = 0;
  const __m512i low_index = _mm512_load_si512(kLow16);
  const __m512i high_index = _mm512_add_epi16(low_index, _mm512_set1_epi16(16));
  for (; i + 32 <= count; i += 32) {
    const __m512i e = _mm512_loadu_si512(even + i), o = _mm512_loadu_si512(odd + i);
    _mm512_storeu_si512(row + 2 * i, _mm512_permutex2var_epi16(e, low_index, o));
    _mm512_storeu_si512(row + 2 * i + 32, _mm512_permutex2var_epi16(e, high_index, o));
  }
  pool2x2::merge_pairs_scalar(even + i, odd + i, row + 2 * i, count - i);
}

// The convolution's taps, as avx2::taps_block with 16 lanes per register (32 of them: 12 taps x 2
// registers of dy, 32 channels, or 12 x 1); 8 channels left over go to the AVX2 blocks.
template <int NT, int NV>
TL_TARGET_AVX512 void taps_block(const float* src, std::int64_t row_stride, std::int64_t col_stride,
                                 const std::int64_t* tap, const float* dy, std::int64_t rows, std::int64_t cols,
                                 std::int64_t oc, float* acc) {
  __m512 a[NT][NV];
  std::int64_t at[NT];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) {
    at[t] = tap[t];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) a[t][v] = _mm512_setzero_ps();
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * row_stride;
    const float* g = dy + r * cols * oc;
    for (std::int64_t c = 0; c < cols; ++c, s += col_stride, g += oc) {
      __m512 gv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) gv[v] = _mm512_loadu_ps(g + 16 * v);
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        const __m512 b = _mm512_set1_ps(s[at[t]]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) a[t][v] = _mm512_fmadd_ps(b, gv[v], a[t][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(acc + t * oc + 16 * v, a[t][v]);
}

template <int NV, std::size_t... I>
constexpr std::array<avx2::TapsBlock, sizeof...(I)> taps_blocks(std::index_sequence<I...>) {
  return {&taps_block<static_cast<int>(I) + 1, NV>...};
}

constexpr auto kTaps32 = taps_blocks<2>(std::make_index_sequence<12>());
constexpr auto kTaps16 = taps_blocks<1>(std::make_index_sequence<12>());

void conv_taps_f32(const float* src, std::int64_t row_stride, std::int64_t col_stride, const std::int64_t* tap,
                   std::int64_t taps, const float* dy, std::int64_t rows, std::int64_t cols, std::int64_t oc,
                   float* acc) {
  std::int64_t o = 0;
  for (; o + 32 <= oc; o += 32)
    avx2::taps_run(kTaps32, src, row_stride, col_stride, tap, taps, dy + o, rows, cols, oc, acc + o);
  for (; o + 16 <= oc; o += 16)
    avx2::taps_run(kTaps16, src, row_stride, col_stride, tap, taps, dy + o, rows, cols, oc, acc + o);
  for (; o + 8 <= oc; o += 8)
    avx2::taps_run(avx2::kTaps8, src, row_stride, col_stride, tap, taps, dy + o, rows, cols, oc, acc + o);
}

constexpr SimdKernels kTable{
    CpuIsa::avx512_core,
    relu_f32,
    relu_half<bf16>,
    relu_half<f16>,
    relu_backward_f32,
    relu_backward_half<bf16>,
    relu_backward_half<f16>,
    f32_to_bf16,
    bf16_to_f32,
    f32_to_f16,
    f16_to_f32,
    pool_forward_f32,
    pool_forward_half<bf16>,
    pool_forward_half<f16>,
    pool_backward_32,
    pool_backward_16,
    pool_relu_row_f32,
    pool_relu_row_half<bf16>,
    pool_relu_row_half<f16>,
    avx2::transpose_f32,
    split_pairs_32,
    split_pairs_16,
    merge_pairs_32,
    merge_pairs_16,
    conv_taps_f32,
};

}  // namespace

const SimdKernels& kernels() { return kTable; }

}  // namespace avx512

}  // namespace trainlab::cpu
