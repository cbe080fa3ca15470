// backends/cpu/conv_few_channels.h: a first layer's weight gradient through the table loops.
#include "backends/cpu/conv_few_channels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/max_pool_2x2.h"
#include "backends/error.h"

namespace trainlab::cpu::conv_few {

void taps_scalar(const float* src, std::int64_t row_stride, std::int64_t col_stride, const std::int64_t* tap,
                 std::int64_t taps, const float* dy, std::int64_t rows, std::int64_t cols, std::int64_t oc,
                 float* acc) {
  std::fill(acc, acc + taps * oc, 0.f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float* s = src + r * row_stride + c * col_stride;
      const float* g = dy + (r * cols + c) * oc;
      for (std::int64_t t = 0; t < taps; ++t)
        for (std::int64_t o = 0; o < oc; ++o) acc[t * oc + o] = std::fma(s[tap[t]], g[o], acc[t * oc + o]);
    }
}

namespace {

template <typename S>
float widen(S v) {
  if constexpr (std::is_same_v<S, float>) {
    return v;
  } else {
    return static_cast<float>(v);
  }
}

// The sizes of one call, and where its buffers lie in the workspace (in floats): the sums, the
// group's per-image sums, then each thread's padded image and dy buffers.
struct Plan {
  std::int64_t ic, oc, oh, ow, pixels, hp, wp;
  // The padded image has one channel more, 1 everywhere: the bias's gradient is one more tap, the
  // last (1 * dy added to +0, pixel by pixel: the plain sum of dy, exactly).
  std::int64_t stride, taps, per_image, group;
  std::int64_t dy_buffer, dy_planes;  // per thread: dy channels-last in f32, and bf16's widened planes
  std::int64_t per_thread, threads;

  // With a pool after the convolution (backward_weights_pooled): the convolution's dy is always
  // made in the buffer, and the pooled dy, where it is not channels-last f32 already, in the planes.
  Plan(DType dtype, const Conv2dShape& s, const Pool2dShape& p, int thread_count) : Plan(dtype, s, thread_count) {
    dy_buffer = pixels * oc;
    dy_planes = dtype == DType::f32 && p.channels_last ? 0 : 2 * p.channels * p.out_h() * p.out_w();
    per_thread = hp * wp * stride + dy_buffer + dy_planes;
  }

  Plan(DType dtype, const Conv2dShape& s, int thread_count)
      : ic(s.in_channels),
        oc(s.out_channels),
        oh(s.out_h()),
        ow(s.out_w()),
        pixels(oh * ow),
        hp(s.in_h + 2 * s.pad_h),
        wp(s.in_w + 2 * s.pad_w),
        stride(ic + 1),
        taps(ic * s.kernel_h * s.kernel_w + 1),
        per_image(taps * oc),
        group(std::min<std::int64_t>(s.batch, 64)),
        dy_buffer(dtype == DType::f32 && s.channels_last ? 0 : pixels * oc),
        dy_planes(dtype != DType::f32 && !s.channels_last ? pixels * oc : 0),
        per_thread(hp * wp * stride + dy_buffer + dy_planes),
        threads(std::max(thread_count, 1)) {}

  std::int64_t floats() const { return per_image * (1 + group) + per_thread * threads; }
};

// One image inside the border (which stays +0), channels-last, in f32.
template <typename S>
void pad_image(const Conv2dShape& s, const Plan& p, const S* image, float* padded) {
  for (std::int64_t h = 0; h < s.in_h; ++h) {
    float* row = padded + ((h + s.pad_h) * p.wp + s.pad_w) * p.stride;
    if (s.channels_last) {
      const S* in = image + h * s.in_w * p.ic;
      for (std::int64_t w = 0; w < s.in_w; ++w)
        for (std::int64_t c = 0; c < p.ic; ++c) row[w * p.stride + c] = widen(in[w * p.ic + c]);
    } else {
      for (std::int64_t c = 0; c < p.ic; ++c) {
        const S* in = image + (c * s.in_h + h) * s.in_w;
        for (std::int64_t w = 0; w < s.in_w; ++w) row[w * p.stride + c] = widen(in[w]);
      }
    }
  }
}

// One image's dy channels-last in f32: as it lies, or widened, or transposed from its planes.
template <typename S>
const float* dy_channels_last(const Conv2dShape& s, const Plan& p, const S* g, float* buffer, float* planes) {
  if constexpr (std::is_same_v<S, float>) {
    if (s.channels_last) return g;
    simd().transpose_f32(g, buffer, p.oc, p.pixels);
  } else if (s.channels_last) {
    simd().bf16_to_f32(g, buffer, p.pixels * p.oc);
  } else {
    simd().bf16_to_f32(g, planes, p.pixels * p.oc);
    simd().transpose_f32(planes, buffer, p.oc, p.pixels);
  }
  return buffer;
}

// The convolution's dy for one image, as the pool's backward makes it from the pooled dy and the
// places (max_pool_2x2.h's rule: dy to the winner, +0 to the other three and to every window the
// ReLU zeroed); outputs in no window (an odd last row or column) get +0.
template <typename S>
const float* unpooled_channels_last(const Conv2dShape& s, const Pool2dShape& pool, const Plan& p, const S* g,
                                    const std::uint8_t* places, float* buffer, float* planes) {
  const std::int64_t c = pool.channels, ph = pool.out_h(), pw = pool.out_w(), cells = ph * pw;
  const float* pooled = nullptr;
  if constexpr (std::is_same_v<S, float>) {
    if (pool.channels_last) {
      pooled = g;
    } else {
      simd().transpose_f32(g, planes, c, cells);
      pooled = planes;
    }
  } else if (pool.channels_last) {
    simd().bf16_to_f32(g, planes, c * cells);
    pooled = planes;
  } else {
    simd().bf16_to_f32(g, planes + c * cells, c * cells);
    simd().transpose_f32(planes + c * cells, planes, c, cells);
    pooled = planes;
  }
  if (s.out_h() != 2 * ph || s.out_w() != 2 * pw) std::fill(buffer, buffer + p.pixels * p.oc, 0.f);
  for (std::int64_t oh = 0; oh < ph; ++oh)
    for (std::int64_t ow = 0; ow < pw; ++ow) {
      float* a = buffer + (2 * oh * p.ow + 2 * ow) * p.oc;
      float* below = a + p.ow * p.oc;
      const std::int64_t at = (oh * pw + ow) * c;
      pool2x2::backward_run(pooled + at, places + at, a, a + p.oc, below, below + p.oc, c);
    }
  return buffer;
}

// The weight and bias gradients from each image's channels-last f32 dy, dy_of(n, buffer, planes).
template <typename S, typename DyOf>
void backward_weights_as(const Conv2dShape& s, const Plan& p, const S* x, const DyOf& dy_of, S* dweight, S* dbias,
                         int threads, float* workspace) {
  // Tap t = (kh * KW + kw) * C + c reads the padded channels-last image at (oh + kh, ow + kw, c).
  std::vector<std::int64_t> tap(static_cast<std::size_t>(p.taps));
  for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
    for (std::int64_t kw = 0; kw < s.kernel_w; ++kw)
      for (std::int64_t c = 0; c < p.ic; ++c)
        tap[static_cast<std::size_t>((kh * s.kernel_w + kw) * p.ic + c)] = (kh * p.wp + kw) * p.stride + c;
  tap.back() = p.ic;
  float* total = workspace;
  float* partial = total + p.per_image;
  std::fill(total, total + p.per_image, 0.f);
  // The images in groups, each image's sums computed in parallel and then added in batch order.
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += p.group) {
    const std::int64_t images = std::min(p.group, s.batch - n0);
#pragma omp parallel num_threads(threads)
    {
      float* padded = partial + p.group * p.per_image + omp_get_thread_num() * p.per_thread;
      float* buffer = padded + p.hp * p.wp * p.stride;
      std::fill(padded, buffer, 0.f);
      for (std::int64_t q = 0; q < p.hp * p.wp; ++q) padded[q * p.stride + p.ic] = 1.f;
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < images; ++i) {
        const std::int64_t n = n0 + i;
        pad_image(s, p, x + n * p.ic * s.in_h * s.in_w, padded);
        const float* grad = dy_of(n, buffer, buffer + p.dy_buffer);
        simd().conv_taps_f32(padded, p.wp * p.stride, p.stride, tap.data(), p.taps, grad, p.oh, p.ow, p.oc,
                             partial + i * p.per_image);
      }
    }
    for (std::int64_t i = 0; i < images; ++i)
      for (std::int64_t k = 0; k < p.per_image; ++k) total[k] += partial[i * p.per_image + k];
  }
  // [tap][o] -> [o][c][kh][kw], in the weights' dtype.
  for (std::int64_t o = 0; o < p.oc; ++o)
    for (std::int64_t c = 0; c < p.ic; ++c)
      for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
        for (std::int64_t kw = 0; kw < s.kernel_w; ++kw)
          dweight[((o * p.ic + c) * s.kernel_h + kh) * s.kernel_w + kw] =
              S(total[((kh * s.kernel_w + kw) * p.ic + c) * p.oc + o]);
  if (dbias != nullptr)
    for (std::int64_t o = 0; o < p.oc; ++o) dbias[o] = S(total[(p.taps - 1) * p.oc + o]);
}

template <typename S>
void backward_weights_typed(const Conv2dShape& s, const S* x, const S* dy, S* dweight, S* dbias, int threads,
                            float* workspace) {
  const Plan p(std::is_same_v<S, float> ? DType::f32 : DType::bf16, s, threads);
  auto dy_of = [&](std::int64_t n, float* buffer, float* planes) {
    return dy_channels_last(s, p, dy + n * p.oc * p.pixels, buffer, planes);
  };
  backward_weights_as(s, p, x, dy_of, dweight, dbias, threads, workspace);
}

template <typename S>
void backward_weights_pooled_typed(const Conv2dShape& s, const Pool2dShape& pool, const S* x, const S* dy,
                                   const std::uint8_t* places, S* dweight, S* dbias, int threads, float* workspace) {
  const Plan p(std::is_same_v<S, float> ? DType::f32 : DType::bf16, s, pool, threads);
  const std::int64_t cells = pool.channels * pool.out_h() * pool.out_w();
  auto dy_of = [&](std::int64_t n, float* buffer, float* planes) {
    return unpooled_channels_last(s, pool, p, dy + n * cells, places + n * cells, buffer, planes);
  };
  backward_weights_as(s, p, x, dy_of, dweight, dbias, threads, workspace);
}

}  // namespace

bool pools_2x2(const Conv2dShape& s, const Pool2dShape& p) {
  return p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 && p.pad_w == 0 &&
         p.batch == s.batch && p.channels == s.out_channels && p.in_h == s.out_h() && p.in_w == s.out_w() &&
         p.out_h() >= 1 && p.out_w() >= 1;
}

std::size_t workspace_bytes(DType dtype, const Conv2dShape& s, int threads) {
  return static_cast<std::size_t>(Plan(dtype, s, threads).floats()) * sizeof(float);
}

void backward_weights(DType dtype, const Conv2dShape& s, const void* x, const void* dy, void* dweight, void* dbias,
                      int threads, void* workspace) {
  TL_CHECK(applies(dtype, s), std::string("conv_few::backward_weights cannot take this ") + dtype_name(dtype) +
                                  " convolution (applies() says which it takes)");
  float* w = static_cast<float*>(workspace);
  if (dtype == DType::f32) {
    backward_weights_typed(s, static_cast<const float*>(x), static_cast<const float*>(dy), static_cast<float*>(dweight),
                           static_cast<float*>(dbias), threads, w);
  } else {
    backward_weights_typed(s, static_cast<const bf16*>(x), static_cast<const bf16*>(dy), static_cast<bf16*>(dweight),
                           static_cast<bf16*>(dbias), threads, w);
  }
}

std::size_t pooled_workspace_bytes(DType dtype, const Conv2dShape& s, const Pool2dShape& pool, int threads) {
  return static_cast<std::size_t>(Plan(dtype, s, pool, threads).floats()) * sizeof(float);
}

void backward_weights_pooled(DType dtype, const Conv2dShape& s, const Pool2dShape& pool, const void* x, const void* dy,
                             const std::uint8_t* places, void* dweight, void* dbias, int threads, void* workspace) {
  TL_CHECK(applies(dtype, s) && pools_2x2(s, pool),
           std::string("conv_few::backward_weights_pooled cannot take this ") + dtype_name(dtype) +
               " convolution and pool (applies() and a 2x2 pool of stride 2 over the whole output)");
  float* w = static_cast<float*>(workspace);
  if (dtype == DType::f32) {
    backward_weights_pooled_typed(s, pool, static_cast<const float*>(x), static_cast<const float*>(dy), places,
                                  static_cast<float*>(dweight), static_cast<float*>(dbias), threads, w);
  } else {
    backward_weights_pooled_typed(s, pool, static_cast<const bf16*>(x), static_cast<const bf16*>(dy), places,
                                  static_cast<bf16*>(dweight), static_cast<bf16*>(dbias), threads, w);
  }
}

}  // namespace trainlab::cpu::conv_few
