// The tables of backends/cpu/simd.h. Each ISA's loops carry a target attribute, so that they, and
// only they, are compiled for that ISA; everything they share (the plain loops for tails, the
// scalar rules of max_pool_2x2.h) is compiled for the build's baseline and merely inlined into
// them. No lambdas inside them: a lambda does not inherit its function's target.
// This file: the plain and AVX2 tables and the choice between the tables; the AVX-512 table is in
// simd_avx512.cpp, what they share in simd_internal.h.
#include "backends/cpu/simd.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "backends/cpu/conv_few_channels.h"
#include "backends/cpu/max_pool_2x2.h"
#include "backends/cpu/simd_internal.h"
#include "backends/error.h"

namespace trainlab::cpu {

// ---------------------------------------------------------------------------------------------
// the plain loops (simd_internal.h)

namespace generic {
namespace {

constexpr SimdKernels kTable{
    CpuIsa::x86_64,
    relu<float>,
    relu<bf16>,
    relu<f16>,
    relu_backward<float>,
    relu_backward<bf16>,
    relu_backward<f16>,
    narrow<bf16>,
    widen<bf16>,
    narrow<f16>,
    widen<f16>,
    pool2x2::forward_run_scalar<float>,
    pool2x2::forward_run_scalar<bf16>,
    pool2x2::forward_run_scalar<f16>,
    pool2x2::backward_run_scalar<std::uint32_t>,
    pool2x2::backward_run_scalar<std::uint16_t>,
    pool2x2::pool_relu_row_scalar<float>,
    pool2x2::pool_relu_row_scalar<bf16>,
    pool2x2::pool_relu_row_scalar<f16>,
    pool2x2::transpose_scalar<float>,
    pool2x2::split_pairs_scalar<std::uint32_t>,
    pool2x2::split_pairs_scalar<std::uint16_t>,
    pool2x2::merge_pairs_scalar<std::uint32_t>,
    pool2x2::merge_pairs_scalar<std::uint16_t>,
    conv_few::taps_scalar,
};

}  // namespace
}  // namespace generic

// ---------------------------------------------------------------------------------------------
// AVX2 (+ FMA, F16C): 8 f32 or 16 half values per register. Masks are whole registers (compares
// and ANDs): no masked loads or stores.

namespace avx2 {
namespace {

// Which of 16 bf16/f16 values are not <= 0, as all-ones lanes: a NaN, or the sign clear and not
// +0. (v & 0x7fff) <= 0x7fff, so the signed 16-bit compares are exact.
template <typename S>
TL_TARGET_AVX2 inline __m256i half_not_at_most_zero(__m256i v) {
  const __m256i inf = _mm256_set1_epi16(static_cast<short>(half_inf<S>()));
  const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7fff)), inf);
  return _mm256_or_si256(nan, _mm256_cmpgt_epi16(v, _mm256_setzero_si256()));
}

TL_TARGET_AVX2 void relu_f32(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NLE_UQ), v));
  }
  generic::relu(x + i, y + i, n - i);
}

template <typename S>
TL_TARGET_AVX2 void relu_half(const S* x, S* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_and_si256(half_not_at_most_zero<S>(v), v));
  }
  generic::relu(x + i, y + i, n - i);
}

TL_TARGET_AVX2 void relu_backward_f32(const float* y, const float* dy, float* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(y + i), _mm256_setzero_ps(), _CMP_NLE_UQ);
    _mm256_storeu_ps(dx + i, _mm256_and_ps(keep, _mm256_loadu_ps(dy + i)));
  }
  generic::relu_backward(y + i, dy + i, dx + i, n - i);
}

template <typename S>
TL_TARGET_AVX2 void relu_backward_half(const S* y, const S* dy, S* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i keep = half_not_at_most_zero<S>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i)));
    const __m256i g = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dy + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dx + i), _mm256_and_si256(keep, g));
  }
  generic::relu_backward(y + i, dy + i, dx + i, n - i);
}

// f32 -> bf16 on the bits: round to nearest even on the dropped half; a NaN keeps its top bits and
// gets the quiet bit (dtype.h's f32_to_bf16_bits).
TL_TARGET_AVX2 void f32_to_bf16(const float* x, bf16* y, std::int64_t n) {
  std::int64_t i = 0;
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i half_ulp = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), inf);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(half_ulp, odd)), 16);
    const __m256i nan_bits = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
    const __m256i out = _mm256_blendv_epi8(rounded, nan_bits, nan);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(out), _mm256_extracti128_si256(out, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), packed);
  }
  generic::narrow(x + i, y + i, n - i);
}

TL_TARGET_AVX2 void bf16_to_f32(const bf16* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_slli_epi32(h, 16));
  }
  generic::widen(x + i, y + i, n - i);
}

// f32 -> f16 through F16C (round to nearest even, subnormals and overflow as IEEE says); NaN lanes
// take dtype.h's payload (0x7e00 | the top mantissa bits, with the sign).
TL_TARGET_AVX2 void f32_to_f16(const float* x, f16* y, std::int64_t n) {
  std::int64_t i = 0;
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256i bits = _mm256_castps_si256(v);
    const __m128i converted = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), inf);
    const __m256i payload =
        _mm256_or_si256(_mm256_or_si256(_mm256_set1_epi32(0x7e00),
                                        _mm256_and_si256(_mm256_srli_epi32(bits, 13), _mm256_set1_epi32(0x3ff))),
                        _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000)));
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    const __m128i payload16 = _mm_packus_epi32(_mm256_castsi256_si128(payload), _mm256_extracti128_si256(payload, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm_blendv_epi8(converted, payload16, nan16));
  }
  generic::narrow(x + i, y + i, n - i);
}

// f16 -> f32 through F16C (exact); NaN lanes keep their payload unquieted, as dtype.h does.
TL_TARGET_AVX2 void f16_to_f32(const f16* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m256i converted = _mm256_castps_si256(_mm256_cvtph_ps(h));
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x7fff)), _mm256_set1_epi32(0x7c00));
    const __m256i payload =
        _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                                        _mm256_set1_epi32(0x7f800000)),
                        _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3ff)), 13));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_blendv_epi8(converted, payload, nan));
  }
  generic::widen(x + i, y + i, n - i);
}

// The winners of 8 f32 windows at q (candidates a, then rest[0..2] in window order; a NaN beats a
// number, the first maximum stays) and their places in `where` (32-bit lanes).
TL_TARGET_AVX2 inline __m256 winner_f32(const float* a, const float* const* rest, std::int64_t q, __m256i& where) {
  __m256 best = _mm256_loadu_ps(a + q);
  where = _mm256_setzero_si256();
  for (int j = 0; j < 3; ++j) {
    const __m256 v = _mm256_loadu_ps(rest[j] + q);
    const __m256 take =
        _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                     _mm256_andnot_ps(_mm256_cmp_ps(best, best, _CMP_UNORD_Q), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    best = _mm256_blendv_ps(best, v, take);
    where = _mm256_blendv_epi8(where, _mm256_set1_epi32(j + 1), _mm256_castps_si256(take));
  }
  return best;
}

// 8 places in 32-bit lanes as bytes at `to`.
TL_TARGET_AVX2 inline void store_places_32(__m256i where, std::uint8_t* to) {
  const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(where), _mm256_extracti128_si256(where, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(to), _mm_packus_epi16(w16, w16));
}

TL_TARGET_AVX2 void pool_relu_row_f32(const float* top, const float* bottom, std::int64_t block, std::int64_t ow_n,
                                      float* out, std::int64_t out_stride, std::uint8_t* place) {
  for (std::int64_t ow = 0; ow < ow_n; ++ow) {
    const float *a = top + 2 * ow * block, *c = bottom + 2 * ow * block;
    const float* rest[3] = {a + block, c, c + block};
    float* o = out + ow * out_stride;
    std::uint8_t* at = place != nullptr ? place + ow * out_stride : nullptr;
    std::int64_t q = 0;
    for (; q + 8 <= block; q += 8) {
      __m256i where;
      const __m256 best = winner_f32(a, rest, q, where);
      const __m256 positive = _mm256_cmp_ps(best, _mm256_setzero_ps(), _CMP_NLE_UQ);
      _mm256_storeu_ps(o + q, _mm256_and_ps(positive, best));
      if (at != nullptr)
        store_places_32(
            _mm256_or_si256(where, _mm256_andnot_si256(_mm256_castps_si256(positive), _mm256_set1_epi32(4))), at + q);
    }
    pool2x2::pool_relu_window_scalar(a, rest[0], rest[1], rest[2], o, at, q, block);
  }
}

// Max-pool's training loops (max_pool_2x2.h) with whole-register loads and blends: the plain
// loops' selects compile to masked stores here, which AMD's cores run microcoded.
TL_TARGET_AVX2 void pool_forward_f32(const float* a, const float* b, const float* c, const float* d, float* out,
                                     std::uint8_t* place, std::int64_t count) {
  std::int64_t q = 0;
  const float* rest[3] = {b, c, d};
  for (; q + 8 <= count; q += 8) {
    __m256i where;
    _mm256_storeu_ps(out + q, winner_f32(a, rest, q, where));
    store_places_32(where, place + q);
  }
  pool2x2::forward_run_scalar(a + q, b + q, c + q, d + q, out + q, place + q, count - q);
}

// 16 bf16/f16 keys at once as signed 16-bit integers (max_pool_2x2.h's half_key with its top bit
// flipped, so that the signed compares order them): v where the sign is clear, v ^ 0x7fff where it
// is set, 0 for -0 (as +0), 0x7fff for a NaN.
template <typename S>
TL_TARGET_AVX2 inline __m256i half_signed_keys(__m256i v) {
  const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7fff)),
                                         _mm256_set1_epi16(static_cast<short>(half_inf<S>())));
  const __m256i negative_zero = _mm256_cmpeq_epi16(v, _mm256_set1_epi16(static_cast<short>(0x8000)));
  __m256i key = _mm256_xor_si256(v, _mm256_and_si256(_mm256_srai_epi16(v, 15), _mm256_set1_epi16(0x7fff)));
  key = _mm256_andnot_si256(negative_zero, key);
  return _mm256_or_si256(_mm256_andnot_si256(nan, key), _mm256_and_si256(nan, _mm256_set1_epi16(0x7fff)));
}

// The winners of 16 bf16/f16 windows at q and their places in `where` (16-bit lanes).
template <typename S>
TL_TARGET_AVX2 inline __m256i winner_half(const S* a, const S* const* rest, std::int64_t q, __m256i& where) {
  __m256i best = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + q));
  __m256i best_key = half_signed_keys<S>(best);
  where = _mm256_setzero_si256();
  for (int j = 0; j < 3; ++j) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rest[j] + q));
    const __m256i key = half_signed_keys<S>(v);
    const __m256i take = _mm256_cmpgt_epi16(key, best_key);
    best = _mm256_blendv_epi8(best, v, take);
    best_key = _mm256_blendv_epi8(best_key, key, take);
    where = _mm256_blendv_epi8(where, _mm256_set1_epi16(static_cast<short>(j + 1)), take);
  }
  return best;
}

// 16 places in 16-bit lanes as bytes at `to`.
TL_TARGET_AVX2 inline void store_places_16(__m256i where, std::uint8_t* to) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(to),
                   _mm_packus_epi16(_mm256_castsi256_si128(where), _mm256_extracti128_si256(where, 1)));
}

template <typename S>
TL_TARGET_AVX2 void pool_forward_half(const S* a, const S* b, const S* c, const S* d, S* out, std::uint8_t* place,
                                      std::int64_t count) {
  std::int64_t q = 0;
  const S* rest[3] = {b, c, d};
  for (; q + 16 <= count; q += 16) {
    __m256i where;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q), winner_half(a, rest, q, where));
    store_places_16(where, place + q);
  }
  pool2x2::forward_run_scalar(a + q, b + q, c + q, d + q, out + q, place + q, count - q);
}

TL_TARGET_AVX2 void pool_backward_32(const std::uint32_t* dy, const std::uint8_t* place, std::uint32_t* a,
                                     std::uint32_t* b, std::uint32_t* c, std::uint32_t* d, std::int64_t count) {
  std::int64_t q = 0;
  std::uint32_t* targets[4] = {a, b, c, d};
  for (; q + 8 <= count; q += 8) {
    const __m256i g = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dy + q));
    const __m256i where = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(place + q)));
    for (int j = 0; j < 4; ++j)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(targets[j] + q),
                          _mm256_and_si256(_mm256_cmpeq_epi32(where, _mm256_set1_epi32(j)), g));
  }
  pool2x2::backward_run_scalar(dy + q, place + q, a + q, b + q, c + q, d + q, count - q);
}

TL_TARGET_AVX2 void pool_backward_16(const std::uint16_t* dy, const std::uint8_t* place, std::uint16_t* a,
                                     std::uint16_t* b, std::uint16_t* c, std::uint16_t* d, std::int64_t count) {
  std::int64_t q = 0;
  std::uint16_t* targets[4] = {a, b, c, d};
  for (; q + 16 <= count; q += 16) {
    const __m256i g = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dy + q));
    const __m256i where = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(place + q)));
    for (int j = 0; j < 4; ++j)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(targets[j] + q),
                          _mm256_and_si256(_mm256_cmpeq_epi16(where, _mm256_set1_epi16(static_cast<short>(j))), g));
  }
  pool2x2::backward_run_scalar(dy + q, place + q, a + q, b + q, c + q, d + q, count - q);
}

// The conv blocks' pool and ReLU over one output row of 16-bit values (pool_relu_row_f32's rule):
// the winner by half_signed_keys, +0 where it is <= 0, its place plus 4 there.
template <typename S>
TL_TARGET_AVX2 void pool_relu_row_half(const S* top, const S* bottom, std::int64_t block, std::int64_t ow_n, S* out,
                                       std::int64_t out_stride, std::uint8_t* place) {
  for (std::int64_t ow = 0; ow < ow_n; ++ow) {
    const S *a = top + 2 * ow * block, *c = bottom + 2 * ow * block;
    const S* rest[3] = {a + block, c, c + block};
    S* o = out + ow * out_stride;
    std::uint8_t* at = place != nullptr ? place + ow * out_stride : nullptr;
    std::int64_t q = 0;
    for (; q + 16 <= block; q += 16) {
      __m256i where;
      const __m256i best = winner_half(a, rest, q, where);
      const __m256i keep = half_not_at_most_zero<S>(best);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + q), _mm256_and_si256(keep, best));
      if (at != nullptr)
        store_places_16(_mm256_or_si256(where, _mm256_andnot_si256(keep, _mm256_set1_epi16(4))), at + q);
    }
    pool2x2::pool_relu_window_scalar(a, rest[0], rest[1], rest[2], o, at, q, block);
  }
}

void conv_taps_f32(const float* src, std::int64_t row_stride, std::int64_t col_stride, const std::int64_t* tap,
                   std::int64_t taps, const float* dy, std::int64_t rows, std::int64_t cols, std::int64_t oc,
                   float* acc) {
  std::int64_t o = 0;
  for (; o + 16 <= oc; o += 16)
    taps_run(kTaps16, src, row_stride, col_stride, tap, taps, dy + o, rows, cols, oc, acc + o);
  for (; o + 8 <= oc; o += 8) taps_run(kTaps8, src, row_stride, col_stride, tap, taps, dy + o, rows, cols, oc, acc + o);
}

// The AVX2 loops where they are written (the pairs' splits and merges stay the plain loops).
constexpr SimdKernels table() {
  SimdKernels t = generic::kTable;
  t.pool_forward_f32 = pool_forward_f32;
  t.pool_forward_bf16 = pool_forward_half<bf16>;
  t.pool_forward_f16 = pool_forward_half<f16>;
  t.pool_backward_32 = pool_backward_32;
  t.pool_backward_16 = pool_backward_16;
  t.pool_relu_row_f32 = pool_relu_row_f32;
  t.pool_relu_row_bf16 = pool_relu_row_half<bf16>;
  t.pool_relu_row_f16 = pool_relu_row_half<f16>;
  t.transpose_f32 = transpose_f32;
  t.isa = CpuIsa::avx2;
  t.relu_f32 = relu_f32;
  t.relu_bf16 = relu_half<bf16>;
  t.relu_f16 = relu_half<f16>;
  t.relu_backward_f32 = relu_backward_f32;
  t.relu_backward_bf16 = relu_backward_half<bf16>;
  t.relu_backward_f16 = relu_backward_half<f16>;
  t.f32_to_bf16 = f32_to_bf16;
  t.bf16_to_f32 = bf16_to_f32;
  t.f32_to_f16 = f32_to_f16;
  t.f16_to_f32 = f16_to_f32;
  t.conv_taps_f32 = conv_taps_f32;
  return t;
}
constexpr SimdKernels kTable = table();

}  // namespace
}  // namespace avx2

const SimdKernels& simd_for(CpuIsa isa) {
  TL_CHECK(isa <= detected_cpu_isa(), std::string("the ") + cpu_isa_name(isa) + " loops cannot run on this CPU (" +
                                          cpu_isa_name(detected_cpu_isa()) + ")");
  switch (isa) {
    case CpuIsa::x86_64:
      return generic::kTable;
    case CpuIsa::avx2:
      return avx2::kTable;
    case CpuIsa::avx512_core:
    case CpuIsa::avx512_core_bf16:  // no loop of its own uses AVX512_BF16 (its rounding flushes subnormals)
      return avx512::kernels();
  }
  return generic::kTable;
}

const SimdKernels& simd() {
  static const SimdKernels& table = simd_for(cpu_isa());
  return table;
}

}  // namespace trainlab::cpu
