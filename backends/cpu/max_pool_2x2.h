// Max-pool over 2x2 windows with stride 2 and no padding (SmallCNN's pools), the CPU backends'
// common case, forward and backward side by side. The windows tile the input without overlap, so
// the workspace is one byte per output (the winner's place in its window, 0..3, in window order)
// and the backward writes each input element once: dy where it won, 0 elsewhere.
//
// The rule is PyTorch's: the first maximum in window order wins, and a NaN beats any number (it
// propagates). The runs go through this CPU's table of vector loops (backends/cpu/simd.h: AVX-512
// where the CPU has it): GCC compiles the plain loops' selects into masked loads and stores, which
// this project's AMD machine runs an order of magnitude slower than whole-register loads and blends.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/simd.h"

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

// The plain loops (the x86-64 table of backends/cpu/simd.h, and every vector loop's tail).

// Forward over `count` channels whose window candidates start at a, b, c, d (channels-last).
template <typename S>
inline void forward_run_scalar(const S* a, const S* b, const S* c, const S* d, S* out, std::uint8_t* place,
                               std::int64_t count) {
  for (std::int64_t q = 0; q < count; ++q) out[q] = pick(a[q], b[q], c[q], d[q], place[q]);
}

// Backward over `count` channels: dy to the winner's place, 0 to the other three. On the bits
// (E: an unsigned integer of the element's size): +0 is all zeros in every floating type.
template <typename E>
inline void backward_run_scalar(const E* dy, const std::uint8_t* place, E* a, E* b, E* c, E* d, std::int64_t count) {
  E* targets[4] = {a, b, c, d};
  for (std::int64_t q = 0; q < count; ++q) {
    for (int j = 0; j < 4; ++j) targets[j][q] = place[q] == j ? dy[q] : E(0);
  }
}

// The conv blocks' pool and ReLU over one output row of one channel block
// (SimdKernels::pool_relu_row_f32): the winner as pick() chooses it, then torch.relu's rule (`<= 0`
// gives +0; a NaN passes); with `place` (training), each output's place as relu_after() leaves it
// (the winner's, plus 4 where the ReLU gave +0), at the output's index. Elements [from, block) of
// one window's candidates (a, b the top pair, c, d the bottom): also the vector loops' tails.
template <typename S>
inline void pool_relu_window_scalar(const S* a, const S* b, const S* c, const S* d, S* out, std::uint8_t* place,
                                    std::int64_t from, std::int64_t block) {
  for (std::int64_t q = from; q < block; ++q) {
    std::uint8_t where = 0;
    const S v = pick(a[q], b[q], c[q], d[q], where);
    bool zero = false;
    if constexpr (is_half<S>) {
      zero = load<float>(v) <= 0.f;  // exact
    } else {
      zero = v <= S(0);
    }
    out[q] = zero ? store<S>(0.f) : v;
    if (place != nullptr) place[q] = static_cast<std::uint8_t>(where | (zero ? 4 : 0));
  }
}

template <typename S>
inline void pool_relu_row_scalar(const S* top, const S* bottom, std::int64_t block, std::int64_t ow_n, S* out,
                                 std::int64_t out_stride, std::uint8_t* place) {
  for (std::int64_t ow = 0; ow < ow_n; ++ow) {
    const S *a = top + 2 * ow * block, *c = bottom + 2 * ow * block;
    pool_relu_window_scalar(a, a + block, c, c + block, out + ow * out_stride,
                            place != nullptr ? place + ow * out_stride : nullptr, 0, block);
  }
}

// NCHW: a window's candidates are interleaved along a row. Splits `2 * count` elements into the
// even ones and the odd ones (and back, for the backward).
template <typename E>
inline void split_pairs_scalar(const E* row, E* even, E* odd, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) {
    even[i] = row[2 * i];
    odd[i] = row[2 * i + 1];
  }
}

template <typename E>
inline void merge_pairs_scalar(const E* even, const E* odd, E* row, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) {
    row[2 * i] = even[i];
    row[2 * i + 1] = odd[i];
  }
}

// The same, through this CPU's table (simd.h) for f32, bf16 and f16; f64 runs the plain loops.
template <typename S>
inline void forward_run(const S* a, const S* b, const S* c, const S* d, S* out, std::uint8_t* place,
                        std::int64_t count) {
  if constexpr (std::is_same_v<S, float>) {
    simd().pool_forward_f32(a, b, c, d, out, place, count);
  } else if constexpr (std::is_same_v<S, bf16>) {
    simd().pool_forward_bf16(a, b, c, d, out, place, count);
  } else if constexpr (std::is_same_v<S, f16>) {
    simd().pool_forward_f16(a, b, c, d, out, place, count);
  } else {
    forward_run_scalar(a, b, c, d, out, place, count);
  }
}

// One output row of the conv blocks' pool and ReLU (pool_relu_row_scalar's rule) through this CPU's
// table for f32, bf16 and f16; f64 runs the plain loop.
template <typename S>
inline void pool_relu_row(const S* top, const S* bottom, std::int64_t block, std::int64_t ow_n, S* out,
                          std::int64_t out_stride, std::uint8_t* place) {
  if constexpr (std::is_same_v<S, float>) {
    simd().pool_relu_row_f32(top, bottom, block, ow_n, out, out_stride, place);
  } else if constexpr (std::is_same_v<S, bf16>) {
    simd().pool_relu_row_bf16(top, bottom, block, ow_n, out, out_stride, place);
  } else if constexpr (std::is_same_v<S, f16>) {
    simd().pool_relu_row_f16(top, bottom, block, ow_n, out, out_stride, place);
  } else {
    pool_relu_row_scalar(top, bottom, block, ow_n, out, out_stride, place);
  }
}

// The unsigned integer of S's size, for the loops that move bits.
template <typename S>
using bits_t =
    std::conditional_t<sizeof(S) == 2, std::uint16_t, std::conditional_t<sizeof(S) == 4, std::uint32_t, std::uint64_t>>;
template <typename S>
inline bits_t<S>* bits_of(S* p) {
  return reinterpret_cast<bits_t<S>*>(p);
}
template <typename S>
inline const bits_t<S>* bits_of(const S* p) {
  return reinterpret_cast<const bits_t<S>*>(p);
}

// The ReLU after the pool, fused (Pool2dShape::relu): the winners through this CPU's ReLU loop (a
// window whose maximum is <= 0 gives +0, a NaN passes), then every window left at +0 has no winner
// (its place gets 4 added: no place 0..3 matches it), so the backward gives its four elements +0:
// relu(max_pool2d(x)) bit for bit, forward and backward.
template <typename S>
inline void relu_after(S* out, std::uint8_t* place, std::int64_t count) {
  relu_run(static_cast<const S*>(out), out, count);
  const auto* bits = bits_of(static_cast<const S*>(out));
  for (std::int64_t q = 0; q < count; ++q)
    place[q] = static_cast<std::uint8_t>(place[q] | (bits[q] == 0 ? 4 : 0));  // +0 is all zero bits
}

template <typename S>
inline void backward_run(const S* dy, const std::uint8_t* place, S* a, S* b, S* c, S* d, std::int64_t count) {
  if constexpr (sizeof(S) == 4) {
    simd().pool_backward_32(bits_of(dy), place, bits_of(a), bits_of(b), bits_of(c), bits_of(d), count);
  } else if constexpr (sizeof(S) == 2) {
    simd().pool_backward_16(bits_of(dy), place, bits_of(a), bits_of(b), bits_of(c), bits_of(d), count);
  } else {
    backward_run_scalar(bits_of(dy), place, bits_of(a), bits_of(b), bits_of(c), bits_of(d), count);
  }
}

template <typename S>
inline void split_pairs(const S* row, S* even, S* odd, std::int64_t count) {
  if constexpr (sizeof(S) == 4) {
    simd().split_pairs_32(bits_of(row), bits_of(even), bits_of(odd), count);
  } else if constexpr (sizeof(S) == 2) {
    simd().split_pairs_16(bits_of(row), bits_of(even), bits_of(odd), count);
  } else {
    split_pairs_scalar(bits_of(row), bits_of(even), bits_of(odd), count);
  }
}

template <typename S>
inline void merge_pairs(const S* even, const S* odd, S* row, std::int64_t count) {
  if constexpr (sizeof(S) == 4) {
    simd().merge_pairs_32(bits_of(even), bits_of(odd), bits_of(row), count);
  } else if constexpr (sizeof(S) == 2) {
    simd().merge_pairs_16(bits_of(even), bits_of(odd), bits_of(row), count);
  } else {
    merge_pairs_scalar(bits_of(even), bits_of(odd), bits_of(row), count);
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

// [rows][cols] -> [cols][rows], in 8 x 8 tiles (SimdKernels::transpose_f32's plain loops).
template <typename S>
inline void transpose_scalar(const S* __restrict in, S* __restrict out, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t tile = 8;
  for (std::int64_t c0 = 0; c0 < cols; c0 += tile) {
    const std::int64_t c1 = std::min(cols, c0 + tile);
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile) {
      const std::int64_t r1 = std::min(rows, r0 + tile);
      for (std::int64_t c = c0; c < c1; ++c)
        for (std::int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
    }
  }
}

// The conv blocks in one call (Backend::conv2d_pool_forward, backends/fusion.h):
// relu(max_pool2d(x)) from a layout of channel blocks, x as [batch][channels / block][in_h][in_w]
// [block] (channels_last is one block of every channel; oneDNN's nChw16c and nChw8c are blocks of
// 16 and 8), into y, channels_last or NCHW: the same values as max_pool2d_forward with
// Pool2dShape::relu, bit for bit. With `places` (training), each output's place as that forward
// keeps it (relu_after's rule), in [batch][out_h][out_w][channels] order; without (inference), none.
// Into channels_last, one output row of one sample at a time, written in place; into NCHW, one
// sample at a time, gathered channels-last in a buffer and stored a channel plane at a time.
template <typename S>
void forward_blocked_relu(const S* in, std::int64_t batch, std::int64_t channels, std::int64_t block, std::int64_t in_h,
                          std::int64_t in_w, S* y, bool y_channels_last, std::uint8_t* places, int threads) {
  const std::int64_t oh_n = in_h / 2, ow_n = in_w / 2, blocks = channels / block, cells = oh_n * ow_n;
  const std::int64_t plane = in_h * in_w * block;  // one block of one sample
  // Output row oh of sample n, channels-last, output `ow` at out + ow * channels, its places (or
  // none: null) at `place` in the same order.
  auto pool_row = [&](std::int64_t n, std::int64_t oh, S* out, std::uint8_t* place) {
    for (std::int64_t cb = 0; cb < blocks; ++cb) {
      const S* top = in + (n * blocks + cb) * plane + 2 * oh * in_w * block;
      pool_relu_row(top, top + in_w * block, block, ow_n, out + cb * block, channels,
                    place != nullptr ? place + cb * block : nullptr);
    }
  };
#pragma omp parallel num_threads(threads)
  {
    auto place_row = [&](std::int64_t n, std::int64_t oh) {
      return places != nullptr ? places + (n * oh_n + oh) * ow_n * channels : nullptr;
    };
    if (y_channels_last) {
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < batch * oh_n; ++r)
        pool_row(r / oh_n, r % oh_n, y + r * ow_n * channels, place_row(r / oh_n, r % oh_n));
    } else {
      std::vector<S> sample(static_cast<std::size_t>(cells * channels));
#pragma omp for schedule(static)
      for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t oh = 0; oh < oh_n; ++oh)
          pool_row(n, oh, sample.data() + oh * ow_n * channels, place_row(n, oh));
        S* out = y + n * channels * cells;
        if constexpr (std::is_same_v<S, float>) {
          simd().transpose_f32(sample.data(), out, cells, channels);
        } else {
          transpose_scalar(sample.data(), out, cells, channels);
        }
      }
    }
  }
}

}  // namespace trainlab::cpu::pool2x2
