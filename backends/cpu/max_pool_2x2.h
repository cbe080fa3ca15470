// Max-pool over 2x2 windows with stride 2 and no padding (SmallCNN's pools), the CPU backends'
// common case, forward and backward side by side. The windows tile the input without overlap, so
// the workspace is one byte per output (the winner's place in its window, 0..3, in window order)
// and the backward writes each input element once: dy where it won, 0 elsewhere.
//
// The rule is PyTorch's: the first maximum in window order wins, and a NaN beats any number (it
// propagates). Channels-last runs of 16 (f32) or 32 (bf16/f16) channels go through AVX-512 where
// the build has it: GCC compiles the plain loops' selects into masked loads and stores, which this
// project's AMD machine runs an order of magnitude slower than whole-register loads and blends.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define TRAINLAB_POOL_AVX512 1
#endif

namespace trainlab::cpu::pool2x2 {

// The order 16-bit floats are compared in, on their bits: like their values (-0 as +0), with every
// NaN above +inf. Integer compares, which vectorise where the float conversions do not.
template <typename S>
inline std::uint16_t half_key(S v) {
  constexpr std::uint16_t inf = std::is_same_v<S, bf16> ? 0x7f80 : 0x7c00;
  const std::uint16_t b = v.bits;
  if ((b & 0x7fff) > inf) return 0xffff;
  if (b == 0x8000) return 0x8000;
  return (b & 0x8000) ? static_cast<std::uint16_t>(~b) : static_cast<std::uint16_t>(b | 0x8000);
}

// Whether `v` replaces `best` as a window's maximum: larger, or a NaN over a number.
template <typename S>
inline bool beats(S v, S best) {
  if constexpr (is_half<S>) {
    return half_key(v) > half_key(best);
  } else {
    return v > best || (std::isnan(v) && !std::isnan(best));
  }
}

// The winner of one window (candidates in window order), copied bit for bit, and its place.
template <typename S>
inline S pick(S a, S b, S c, S d, std::uint8_t& place) {
  S best = a;
  place = 0;
  const S rest[3] = {b, c, d};
  for (int j = 0; j < 3; ++j) {
    const bool take = beats(rest[j], best);
    best = take ? rest[j] : best;
    place = take ? static_cast<std::uint8_t>(j + 1) : place;
  }
  return best;
}

#ifdef TRAINLAB_POOL_AVX512
// 32 bf16/f16 keys at once (half_key, vectorised).
template <typename S>
inline __m512i half_keys(__m512i v) {
  const __m512i inf = _mm512_set1_epi16(static_cast<short>(std::is_same_v<S, bf16> ? 0x7f80 : 0x7c00));
  const __m512i sign = _mm512_set1_epi16(static_cast<short>(0x8000));
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7fff)), inf);
  const __mmask32 negative = _mm512_movepi16_mask(v);
  const __mmask32 negative_zero = _mm512_cmpeq_epi16_mask(v, sign);
  __m512i key = _mm512_mask_mov_epi16(_mm512_or_si512(v, sign), negative, _mm512_ternarylogic_epi32(v, v, v, 0x55));
  key = _mm512_mask_mov_epi16(key, negative_zero, sign);
  return _mm512_mask_mov_epi16(key, nan, _mm512_set1_epi16(-1));
}
#endif

// Forward over `count` channels whose window candidates start at a, b, c, d (channels-last).
template <typename S>
inline void forward_run(const S* a, const S* b, const S* c, const S* d, S* out, std::uint8_t* place,
                        std::int64_t count) {
  std::int64_t q = 0;
#ifdef TRAINLAB_POOL_AVX512
  if constexpr (std::is_same_v<S, float>) {
    for (; q + 16 <= count; q += 16) {
      __m512 best = _mm512_loadu_ps(a + q);
      __m512i where = _mm512_setzero_si512();
      const float* rest[3] = {b, c, d};
      for (int j = 0; j < 3; ++j) {
        const __m512 v = _mm512_loadu_ps(rest[j] + q);
        const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                               (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & ~_mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q));
        best = _mm512_mask_mov_ps(best, take, v);
        where = _mm512_mask_mov_epi32(where, take, _mm512_set1_epi32(j + 1));
      }
      _mm512_storeu_ps(out + q, best);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(place + q), _mm512_cvtepi32_epi8(where));
    }
  }
  if constexpr (is_half<S>) {
    for (; q + 32 <= count; q += 32) {
      __m512i best = _mm512_loadu_si512(a + q);
      __m512i best_key = half_keys<S>(best);
      __m512i where = _mm512_setzero_si512();
      const S* rest[3] = {b, c, d};
      for (int j = 0; j < 3; ++j) {
        const __m512i v = _mm512_loadu_si512(rest[j] + q);
        const __m512i key = half_keys<S>(v);
        const __mmask32 take = _mm512_cmpgt_epu16_mask(key, best_key);
        best = _mm512_mask_mov_epi16(best, take, v);
        best_key = _mm512_mask_mov_epi16(best_key, take, key);
        where = _mm512_mask_mov_epi16(where, take, _mm512_set1_epi16(static_cast<short>(j + 1)));
      }
      _mm512_storeu_si512(out + q, best);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(place + q), _mm512_cvtepi16_epi8(where));
    }
  }
#endif
  for (; q < count; ++q) out[q] = pick(a[q], b[q], c[q], d[q], place[q]);
}

// Backward over `count` channels: dy to the winner's place, 0 to the other three.
template <typename S>
inline void backward_run(const S* dy, const std::uint8_t* place, S* a, S* b, S* c, S* d, std::int64_t count) {
  std::int64_t q = 0;
  S* targets[4] = {a, b, c, d};
#ifdef TRAINLAB_POOL_AVX512
  if constexpr (std::is_same_v<S, float>) {
    for (; q + 16 <= count; q += 16) {
      const __m512 g = _mm512_loadu_ps(dy + q);
      const __m512i where = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(place + q)));
      for (int j = 0; j < 4; ++j)
        _mm512_storeu_ps(targets[j] + q, _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(where, _mm512_set1_epi32(j)), g));
    }
  }
  if constexpr (is_half<S>) {
    for (; q + 32 <= count; q += 32) {
      const __m512i g = _mm512_loadu_si512(dy + q);
      const __m512i where = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(place + q)));
      for (int j = 0; j < 4; ++j) {
        const __mmask32 mine = _mm512_cmpeq_epi16_mask(where, _mm512_set1_epi16(static_cast<short>(j)));
        _mm512_storeu_si512(targets[j] + q, _mm512_maskz_mov_epi16(mine, g));
      }
    }
  }
#endif
  for (; q < count; ++q) {
    const S zero = store<S>(compute_t<S>(0));
    for (int j = 0; j < 4; ++j) targets[j][q] = place[q] == j ? dy[q] : zero;
  }
}

// NCHW: a window's candidates are interleaved along a row. Splits `2 * count` elements into the
// even ones and the odd ones (and back, for the backward).
template <typename S>
inline void split_pairs(const S* row, S* even, S* odd, std::int64_t count) {
  std::int64_t i = 0;
#ifdef TRAINLAB_POOL_AVX512
  if constexpr (sizeof(S) == 2) {
    alignas(64) static const std::uint16_t kEven[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                                        32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
    const __m512i even_index = _mm512_load_si512(kEven);
    const __m512i odd_index = _mm512_add_epi16(even_index, _mm512_set1_epi16(1));
    for (; i + 32 <= count; i += 32) {
      const __m512i lo = _mm512_loadu_si512(row + 2 * i), hi = _mm512_loadu_si512(row + 2 * i + 32);
      _mm512_storeu_si512(even + i, _mm512_permutex2var_epi16(lo, even_index, hi));
      _mm512_storeu_si512(odd + i, _mm512_permutex2var_epi16(lo, odd_index, hi));
    }
  }
  if constexpr (sizeof(S) == 4) {
    const __m512i even_index = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_index = _mm512_add_epi32(even_index, _mm512_set1_epi32(1));
    for (; i + 16 <= count; i += 16) {
      const __m512i lo = _mm512_loadu_si512(row + 2 * i), hi = _mm512_loadu_si512(row + 2 * i + 16);
      _mm512_storeu_si512(even + i, _mm512_permutex2var_epi32(lo, even_index, hi));
      _mm512_storeu_si512(odd + i, _mm512_permutex2var_epi32(lo, odd_index, hi));
    }
  }
#endif
  for (; i < count; ++i) {
    even[i] = row[2 * i];
    odd[i] = row[2 * i + 1];
  }
}

template <typename S>
inline void merge_pairs(const S* even, const S* odd, S* row, std::int64_t count) {
  std::int64_t i = 0;
#ifdef TRAINLAB_POOL_AVX512
  if constexpr (sizeof(S) == 2) {
    alignas(64) static const std::uint16_t kLow[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i low_index = _mm512_load_si512(kLow);
    const __m512i high_index = _mm512_add_epi16(low_index, _mm512_set1_epi16(16));
    for (; i + 32 <= count; i += 32) {
      const __m512i e = _mm512_loadu_si512(even + i), o = _mm512_loadu_si512(odd + i);
      _mm512_storeu_si512(row + 2 * i, _mm512_permutex2var_epi16(e, low_index, o));
      _mm512_storeu_si512(row + 2 * i + 32, _mm512_permutex2var_epi16(e, high_index, o));
    }
  }
  if constexpr (sizeof(S) == 4) {
    const __m512i low_index = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high_index = _mm512_add_epi32(low_index, _mm512_set1_epi32(8));
    for (; i + 16 <= count; i += 16) {
      const __m512i e = _mm512_loadu_si512(even + i), o = _mm512_loadu_si512(odd + i);
      _mm512_storeu_si512(row + 2 * i, _mm512_permutex2var_epi32(e, low_index, o));
      _mm512_storeu_si512(row + 2 * i + 16, _mm512_permutex2var_epi32(e, high_index, o));
    }
  }
#endif
  for (; i < count; ++i) {
    row[2 * i] = even[i];
    row[2 * i + 1] = odd[i];
  }
}

// NCHW, a whole plane at a time (so that the vector loops have work): its rows split into the four
// candidate planes (one per place in the window), one scratch of them per thread.
template <typename S>
struct CandidatePlanes {
  std::vector<S> storage;
  S* at[4];
  explicit CandidatePlanes(std::int64_t plane) : storage(static_cast<std::size_t>(4 * plane)) {
    for (int k = 0; k < 4; ++k) at[k] = storage.data() + k * plane;
  }
};

// Forward over one NCHW plane [in_h, in_w] into [oh_n, ow_n] outputs and places.
template <typename S>
inline void forward_plane(const S* in, std::int64_t in_w, std::int64_t oh_n, std::int64_t ow_n, CandidatePlanes<S>& c,
                          S* out, std::uint8_t* place) {
  for (std::int64_t oh = 0; oh < oh_n; ++oh) {
    const S* r0 = in + 2 * oh * in_w;
    split_pairs(r0, c.at[0] + oh * ow_n, c.at[1] + oh * ow_n, ow_n);
    split_pairs(r0 + in_w, c.at[2] + oh * ow_n, c.at[3] + oh * ow_n, ow_n);
  }
  forward_run(c.at[0], c.at[1], c.at[2], c.at[3], out, place, oh_n * ow_n);
}

// Backward over one NCHW plane: dy and places [oh_n, ow_n] into dx [in_h, in_w] (its windows' rows).
template <typename S>
inline void backward_plane(const S* dy, const std::uint8_t* place, std::int64_t in_w, std::int64_t oh_n,
                           std::int64_t ow_n, CandidatePlanes<S>& c, S* dx) {
  backward_run(dy, place, c.at[0], c.at[1], c.at[2], c.at[3], oh_n * ow_n);
  for (std::int64_t oh = 0; oh < oh_n; ++oh) {
    S* r0 = dx + 2 * oh * in_w;
    merge_pairs(c.at[0] + oh * ow_n, c.at[1] + oh * ow_n, r0, ow_n);
    merge_pairs(c.at[2] + oh * ow_n, c.at[3] + oh * ow_n, r0 + in_w, ow_n);
  }
}

}  // namespace trainlab::cpu::pool2x2
