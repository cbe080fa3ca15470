// Batch norm (with its residual-add and ReLU epilogue), global average pooling and dropout (see
// kernels.h for the contracts). First versions, plain as llm.c's v1 kernels: a block per channel
// for batch norm's sums (block_sum's fixed order: the bits do not depend on the launch), one
// thread per element for the passes over the data, one thread per (n, c) for the pooling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backends/counter_rng.h"
#include "backends/error.h"
#include "kernels/kernels.h"
#include "kernels/kernels_common.cuh"

namespace trainlab::kernels {

namespace {

// Element k of the [outer, channels, inner] view belongs to channel (k / inner) % channels.
__device__ __forceinline__ std::int64_t channel_of(std::int64_t k, std::int64_t channels, std::int64_t inner) {
  return (k / inner) % channels;
}

// The j-th element of channel c (j in [0, outer * inner)).
__device__ __forceinline__ std::int64_t channel_element(std::int64_t j, std::int64_t c, const BatchNormView& v) {
  const std::int64_t o = j / v.inner, i = j - o * v.inner;
  return (o * v.channels + c) * v.inner + i;
}

// y = x * scale + shift: scale = gamma invstd into scale_shift[c], shift = beta - mean scale into
// scale_shift[channels + c] (the forward's apply pass and the backward's recomputed ReLU sign alike).
__device__ __forceinline__ void affine_coefficients(const float* gamma, const float* beta, double mean, double invstd,
                                                    std::int64_t c, std::int64_t channels, float* scale_shift) {
  const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
  scale_shift[c] = static_cast<float>(g * invstd);
  scale_shift[channels + c] = static_cast<float>(b - mean * g * invstd);
}

// One block per channel: shifted sums (the channel's first element as the shift), mean and
// invstd, the running statistics moved, and the affine's scale and shift for the apply pass.
template <typename T>
__global__ void bn_stats_kernel(const T* x, const float* gamma, const float* beta, BatchNormView v, float* mean,
                                float* invstd, float* running_mean, float* running_var, float momentum,
                                float* scale_shift) {
  __shared__ float warps[kThreads / 32];
  const std::int64_t c = blockIdx.x, m = v.outer * v.inner;
  const float first = load(x, channel_element(0, c, v));
  float s1 = 0.f, s2 = 0.f;
  for (std::int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const float d = load(x, channel_element(j, c, v)) - first;
    s1 += d;
    s2 += d * d;
  }
  s1 = block_sum(s1, warps);
  __syncthreads();
  s2 = block_sum(s2, warps);
  if (threadIdx.x != 0) return;
  const double dm = static_cast<double>(s1) / static_cast<double>(m);
  const double var = fmax(0.0, static_cast<double>(s2) / static_cast<double>(m) - dm * dm);
  const double mu = static_cast<double>(first) + dm;
  // Applied as saved (f32): the backward recomputes the ReLU's sign from the saved statistics.
  mean[c] = static_cast<float>(mu);
  invstd[c] = static_cast<float>(1.0 / sqrt(var + v.eps));
  if (running_mean != nullptr) {
    const double unbiased = m > 1 ? var * static_cast<double>(m) / static_cast<double>(m - 1) : var;
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mu);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  }
  affine_coefficients(gamma, beta, mean[c], invstd[c], c, v.channels, scale_shift);
}

// Inference: mean and invstd from the running statistics, and the affine's scale and shift.
__global__ void bn_running_kernel(const float* gamma, const float* beta, const float* running_mean,
                                  const float* running_var, BatchNormView v, float* mean, float* invstd,
                                  float* scale_shift) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= v.channels) return;
  const double mu = running_mean[c];
  const double inv = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + v.eps));
  if (mean != nullptr) {
    mean[c] = static_cast<float>(mu);
    invstd[c] = static_cast<float>(inv);
  }
  affine_coefficients(gamma, beta, mu, inv, c, v.channels, scale_shift);
}

// y = x * scale[c] + shift[c] (+ residual), then ReLU (a NaN passes).
template <typename T>
__global__ void bn_apply_kernel(const T* x, const T* residual, bool relu, const float* scale_shift, BatchNormView v,
                                T* y, std::int64_t n) {
  GRID_STRIDE_LOOP(k, n) {
    const std::int64_t c = channel_of(k, v.channels, v.inner);
    float r = load(x, k) * scale_shift[c] + scale_shift[v.channels + c];
    if (residual != nullptr) r += load(residual, k);
    if (relu && r <= 0.f) r = 0.f;
    store(y, k, r);
  }
}

// The forward's scale and shift from the saved statistics (the ReLU's recomputed sign).
__global__ void bn_saved_affine_kernel(const float* gamma, const float* beta, const float* mean, const float* invstd,
                                       std::int64_t channels, float* scale_shift) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < channels) affine_coefficients(gamma, beta, mean[c], invstd[c], c, channels, scale_shift);
}

// dy past the epilogue's ReLU: its sign from y where a residual was added, else recomputed from x
// by the forward's own scale and shift.
template <typename T>
__device__ __forceinline__ float masked(const T* dy, const T* x, const T* y, bool relu, const float* scale_shift,
                                        std::int64_t k, std::int64_t c, std::int64_t channels) {
  const float g = load(dy, k);
  if (!relu) return g;
  const float pre = y != nullptr ? load(y, k) : load(x, k) * scale_shift[c] + scale_shift[channels + c];
  return pre > 0.f ? g : 0.f;
}

// One block per channel: sum dz and sum dz (x - mean); dgamma, dbeta and dx's coefficients
// (dx = a dz + b x + d) into coeffs[0..3C); the forward's scale and shift are at coeffs[3C..5C).
template <typename T>
__global__ void bn_backward_sums_kernel(const T* x, const T* dy, const T* y, bool relu, const float* gamma,
                                        const float* mean, const float* invstd, bool batch_stats, BatchNormView v,
                                        float* dgamma, float* dbeta, float* coeffs) {
  __shared__ float warps[kThreads / 32];
  const std::int64_t c = blockIdx.x, m = v.outer * v.inner;
  const float mu = mean[c];
  float s1 = 0.f, s2 = 0.f;
  for (std::int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const std::int64_t k = channel_element(j, c, v);
    const float d = masked(dy, x, y, relu, coeffs + 3 * v.channels, k, c, v.channels);
    s1 += d;
    s2 += d * (load(x, k) - mu);
  }
  s1 = block_sum(s1, warps);
  __syncthreads();
  s2 = block_sum(s2, warps);
  if (threadIdx.x != 0) return;
  const double inv = invstd[c], dgam = static_cast<double>(s2) * inv, sum_dz = s1;
  if (dbeta != nullptr) dbeta[c] = static_cast<float>(sum_dz);
  if (dgamma != nullptr) dgamma[c] = static_cast<float>(dgam);
  const double kc = (gamma ? gamma[c] : 1.0) * inv, md = static_cast<double>(m);
  const double b = batch_stats ? -kc * inv * dgam / md : 0.0;
  coeffs[c] = static_cast<float>(kc);
  coeffs[v.channels + c] = static_cast<float>(b);
  coeffs[2 * v.channels + c] = static_cast<float>(batch_stats ? -kc * sum_dz / md - b * mu : 0.0);
}

template <typename T>
__global__ void bn_backward_apply_kernel(const T* x, const T* dy, const T* y, bool relu, const float* coeffs,
                                         BatchNormView v, T* dx, T* dresidual, std::int64_t n) {
  GRID_STRIDE_LOOP(k, n) {
    const std::int64_t c = channel_of(k, v.channels, v.inner);
    const float d = masked(dy, x, y, relu, coeffs + 3 * v.channels, k, c, v.channels);
    if (dresidual != nullptr) store(dresidual, k, d);
    if (dx != nullptr) store(dx, k, coeffs[c] * d + coeffs[v.channels + c] * load(x, k) + coeffs[2 * v.channels + c]);
  }
}

template <typename T>
__global__ void gap_forward_kernel(const T* x, T* y, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                   bool channels_last) {
  GRID_STRIDE_LOOP(k, batch * channels) {
    const std::int64_t n = k / channels, c = k - n * channels;
    float total = 0.f;
    for (std::int64_t p = 0; p < spatial; ++p)
      total += load(x, channels_last ? (n * spatial + p) * channels + c : (n * channels + c) * spatial + p);
    store(y, k, total * (1.f / static_cast<float>(spatial)));
  }
}

template <typename T>
__global__ void gap_backward_kernel(const T* dy, T* dx, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                    bool channels_last) {
  GRID_STRIDE_LOOP(k, batch * channels * spatial) {
    std::int64_t n, c;
    if (channels_last) {
      c = k % channels;
      n = k / (channels * spatial);
    } else {
      c = (k / spatial) % channels;
      n = k / (channels * spatial);
    }
    store(dx, k, load(dy, n * channels + c) * (1.f / static_cast<float>(spatial)));
  }
}

template <typename T>
__global__ void dropout_forward_kernel(const T* x, T* y, std::uint8_t* mask, std::int64_t n, std::uint32_t threshold,
                                       float scale, std::uint64_t seed, std::uint64_t offset) {
  GRID_STRIDE_LOOP(i, n) {
    const bool keep = counter_draw(seed, offset + static_cast<std::uint64_t>(i)) >= threshold;
    mask[i] = keep ? 1 : 0;
    store(y, i, keep ? load(x, i) * scale : 0.f);
  }
}

template <typename T>
__global__ void dropout_backward_kernel(const T* dy, const std::uint8_t* mask, T* dx, std::int64_t n, float scale) {
  GRID_STRIDE_LOOP(i, n) { store(dx, i, mask[i] ? load(dy, i) * scale : 0.f); }
}

}  // namespace

void batch_norm_forward_training(DType dtype, const BatchNormView& v, const void* x, const float* gamma,
                                 const float* beta, const void* residual, bool relu, void* y, float* mean,
                                 float* invstd, float* running_mean, float* running_var, float momentum, float* scratch,
                                 cudaStream_t stream) {
  const std::int64_t n = v.outer * v.channels * v.inner;
  if (n == 0) return;
  dispatch(dtype, "batch_norm_forward_training", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bn_stats_kernel<<<static_cast<unsigned>(v.channels), kThreads, 0, stream>>>(
        static_cast<const T*>(x), gamma, beta, v, mean, invstd, running_mean, running_var, momentum, scratch);
    bn_apply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(residual),
                                                            relu, scratch, v, static_cast<T*>(y), n);
  });
  check_launch("batch_norm_forward_training");
}

void batch_norm_forward_inference(DType dtype, const BatchNormView& v, const void* x, const float* gamma,
                                  const float* beta, const float* running_mean, const float* running_var,
                                  const void* residual, bool relu, void* y, float* mean, float* invstd, float* scratch,
                                  cudaStream_t stream) {
  const std::int64_t n = v.outer * v.channels * v.inner;
  if (v.channels == 0) return;
  dispatch(dtype, "batch_norm_forward_inference", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bn_running_kernel<<<blocks_for(v.channels), kThreads, 0, stream>>>(gamma, beta, running_mean, running_var, v, mean,
                                                                       invstd, scratch);
    if (n > 0)
      bn_apply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(residual),
                                                              relu, scratch, v, static_cast<T*>(y), n);
  });
  check_launch("batch_norm_forward_inference");
}

void batch_norm_backward(DType dtype, const BatchNormView& v, const void* x, const void* dy, const void* y, bool relu,
                         const float* gamma, const float* beta, const float* mean, const float* invstd,
                         bool batch_stats, void* dx, float* dgamma, float* dbeta, void* dresidual, float* scratch,
                         cudaStream_t stream) {
  const std::int64_t n = v.outer * v.channels * v.inner;
  if (v.channels == 0) return;
  dispatch(dtype, "batch_norm_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bn_saved_affine_kernel<<<blocks_for(v.channels), kThreads, 0, stream>>>(gamma, beta, mean, invstd, v.channels,
                                                                            scratch + 3 * v.channels);
    bn_backward_sums_kernel<<<static_cast<unsigned>(v.channels), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(y), relu, gamma, mean, invstd,
        batch_stats, v, dgamma, dbeta, scratch);
    if (n > 0 && (dx != nullptr || dresidual != nullptr))
      bn_backward_apply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(y), relu, scratch, v,
          static_cast<T*>(dx), static_cast<T*>(dresidual), n);
  });
  check_launch("batch_norm_backward");
}

void global_avg_pool2d_forward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                               bool channels_last, const void* x, void* y, cudaStream_t stream) {
  if (batch * channels == 0) return;
  dispatch(dtype, "global_avg_pool2d_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gap_forward_kernel<<<blocks_for(batch * channels), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), batch, channels, spatial, channels_last);
  });
  check_launch("global_avg_pool2d_forward");
}

void global_avg_pool2d_backward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                bool channels_last, const void* dy, void* dx, cudaStream_t stream) {
  if (batch * channels * spatial == 0) return;
  dispatch(dtype, "global_avg_pool2d_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gap_backward_kernel<<<blocks_for(batch * channels * spatial), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), batch, channels, spatial, channels_last);
  });
  check_launch("global_avg_pool2d_backward");
}

void dropout_forward(DType dtype, const void* x, void* y, std::uint8_t* mask, std::int64_t n, double p,
                     std::uint64_t seed, std::uint64_t offset, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "dropout_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    dropout_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), mask,
                                                                   n, dropout_threshold(p),
                                                                   static_cast<float>(1.0 / (1.0 - p)), seed, offset);
  });
  check_launch("dropout_forward");
}

void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float scale,
                      cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "dropout_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    dropout_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(dy), mask,
                                                                    static_cast<T*>(dx), n, scale);
  });
  check_launch("dropout_backward");
}

}  // namespace trainlab::kernels
