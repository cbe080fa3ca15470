// The layers' hand-written kernels (see kernels.h for the contracts): ReLU and bias (with the fused
// bias + ReLU forward and ReLU + bias backward), max-pool, softmax cross-entropy. The elementwise
// kernels, reductions and optimisers are in kernels.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "backends/error.h"
#include "kernels/kernels.h"
#include "kernels/kernels_common.cuh"

namespace trainlab::kernels {

namespace {

// ---- ReLU, bias ----
template <typename T>
__global__ void relu_forward_kernel(const T* x, T* y, std::int64_t n) {
  GRID_STRIDE_LOOP(i, n) {
    const float v = load(x, i);
    store(y, i, v <= 0.f ? 0.f : v);  // a NaN is not <= 0: it passes (torch.relu)
  }
}

template <typename T>
__global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, std::int64_t n) {
  GRID_STRIDE_LOOP(i, n) store(dx, i, load(y, i) <= 0.f ? 0.f : load(dy, i));
}

// A 2-D grid, blockIdx.y over the outer index (strided when it exceeds the grid's y limit) and x
// over one outer slice of channels x inner elements: the channel is one 32-bit divide per element
// (a slice is at most 2^31 elements, checked by the launcher), not a 64-bit divide and modulo.
template <typename T>
__global__ void bias_relu_kernel(const T* x, const T* bias, T* y, std::int64_t outer, unsigned channels, unsigned inner,
                                 bool relu) {
  const unsigned slice = channels * inner;
  for (std::int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const std::int64_t base = o * slice;
    for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < slice; j += gridDim.x * blockDim.x) {
      const unsigned c = j / inner;
      float v = load(x, base + j) + load(bias, c);
      if (relu && v <= 0.f) v = 0.f;  // NaN passes
      store(y, base + j, v);
    }
  }
}

template <typename T>
__global__ void bias_backward_v1_kernel(const T* dy, T* dbias, std::int64_t outer, std::int64_t channels,
                                        std::int64_t inner) {
  GRID_STRIDE_LOOP(c, channels) {
    float s = 0;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t k = 0; k < inner; ++k) s += load(dy, (o * channels + c) * inner + k);
    store(dbias, c, s);
  }
}

template <typename T>
__global__ void bias_backward_kernel(const T* dy, T* dbias, std::int64_t outer, std::int64_t channels,
                                     std::int64_t inner) {
  __shared__ float warps[kThreads / 32];
  const std::int64_t c = blockIdx.x;
  const std::int64_t count = outer * inner;
  float s = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const std::int64_t o = j / inner, k = j % inner;
    s += load(dy, (o * channels + c) * inner + k);
  }
  s = block_sum(s, warps);
  if (threadIdx.x == 0) store(dbias, c, s);
}

template <typename T>
__global__ void relu_bias_backward_v1_kernel(const T* y, const T* dy, T* dx, T* dbias, std::int64_t outer,
                                             std::int64_t channels, std::int64_t inner) {
  GRID_STRIDE_LOOP(c, channels) {
    float s = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t k = 0; k < inner; ++k) {
        const std::int64_t i = (o * channels + c) * inner + k;
        const float d = load(y, i) <= 0.f ? 0.f : load(dy, i);
        store(dx, i, d);
        s += load(dx, i);  // the stored (rounded) value, as a separate bias_backward would read it
      }
    }
    store(dbias, c, s);
  }
}

// The current version spreads the work over the whole GPU: a 2-D grid of (channel tile, chunk of
// the outer index), each block writing one partial sum per channel, and a finishing kernel adding a
// channel's partials in chunk order (deterministic). inner == 1 (channels_last, linear): threads
// run along the channels, so loads are coalesced; inner > 1 (NCHW): along each channel's plane.
constexpr int kRbRows = 8;         // inner == 1: a block is 32 channels x 8 rows
constexpr int kRbMaxChunks = 512;  // partial sums per channel, at most

struct RbGrid {
  dim3 grid, block;
  int chunks;
};
RbGrid rb_grid(std::int64_t outer, std::int64_t channels, std::int64_t inner) {
  RbGrid g;
  if (inner == 1) {
    const auto tiles = static_cast<int>((channels + 31) / 32);
    g.chunks = static_cast<int>(std::min<std::int64_t>(
        {(outer + kRbRows - 1) / kRbRows, std::max<std::int64_t>(1, 2048 / tiles), kRbMaxChunks}));
    g.grid = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(g.chunks));
    g.block = dim3(32, kRbRows);
  } else {
    g.chunks =
        static_cast<int>(std::min<std::int64_t>({outer, std::max<std::int64_t>(1, 2048 / channels), kRbMaxChunks}));
    g.grid = dim3(static_cast<unsigned>(channels), static_cast<unsigned>(g.chunks));
    g.block = dim3(kThreads);
  }
  return g;
}

// kRelu: the fused layers' dx = dy * (y > 0) written on the way, and the bias gradient summed from
// it; without, the bias gradient of dy alone (bias_backward), over the same tiles.
template <typename T, bool kRelu>
__global__ void relu_bias_rows_kernel(const T* y, const T* dy, T* dx, float* partials, std::int64_t outer,
                                      std::int64_t channels) {
  __shared__ float rows[kRbRows][33];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0;
  if (c < channels) {
    for (std::int64_t o = static_cast<std::int64_t>(blockIdx.y) * kRbRows + threadIdx.y; o < outer;
         o += static_cast<std::int64_t>(gridDim.y) * kRbRows) {
      const std::int64_t i = o * channels + c;
      if constexpr (kRelu) {
        store(dx, i, load(y, i) <= 0.f ? 0.f : load(dy, i));
        s += load(dx, i);  // the stored (rounded) value, as a separate bias_backward would read it
      } else {
        s += load(dy, i);
      }
    }
  }
  rows[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float total = 0;
    for (int r = 0; r < kRbRows; ++r) total += rows[r][threadIdx.x];
    partials[static_cast<std::int64_t>(blockIdx.y) * channels + c] = total;
  }
}

template <typename T, bool kRelu>
__global__ void relu_bias_planes_kernel(const T* y, const T* dy, T* dx, float* partials, std::int64_t outer,
                                        std::int64_t channels, std::int64_t inner) {
  __shared__ float warps[kThreads / 32];
  const std::int64_t c = blockIdx.x;
  float s = 0;
  for (std::int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const std::int64_t base = (o * channels + c) * inner;
    for (std::int64_t k = threadIdx.x; k < inner; k += blockDim.x) {
      if constexpr (kRelu) {
        store(dx, base + k, load(y, base + k) <= 0.f ? 0.f : load(dy, base + k));
        s += load(dx, base + k);
      } else {
        s += load(dy, base + k);
      }
    }
  }
  s = block_sum(s, warps);
  if (threadIdx.x == 0) partials[static_cast<std::int64_t>(blockIdx.y) * channels + c] = s;
}

template <typename T>
__global__ void relu_bias_finish_kernel(const float* partials, int chunks, std::int64_t channels, T* dbias) {
  GRID_STRIDE_LOOP(c, channels) {
    float s = 0;
    for (int j = 0; j < chunks; ++j) s += partials[static_cast<std::int64_t>(j) * channels + c];
    store(dbias, c, s);
  }
}

// ---- max-pool ----
// The element offset of (n, c, h, w) in an [N, C, H, W] tensor, NCHW or channels_last.
__device__ __forceinline__ std::int64_t nchw_offset(bool channels_last, std::int64_t n, std::int64_t c, std::int64_t h,
                                                    std::int64_t w, std::int64_t channels, std::int64_t height,
                                                    std::int64_t width) {
  return channels_last ? ((n * height + h) * width + w) * channels + c : ((n * channels + c) * height + h) * width + w;
}

template <typename T>
__global__ void max_pool_forward_kernel(const T* x, T* y, std::int32_t* argmax, MaxPoolShape s) {
  const std::int64_t outputs = s.batch * s.channels * s.out_h * s.out_w;
  GRID_STRIDE_LOOP(o, outputs) {
    // o in the output's own memory order, so that writes are coalesced in either layout.
    std::int64_t n, c, oh, ow;
    if (s.channels_last) {
      c = o % s.channels;
      ow = (o / s.channels) % s.out_w;
      oh = (o / (s.channels * s.out_w)) % s.out_h;
      n = o / (s.channels * s.out_w * s.out_h);
    } else {
      ow = o % s.out_w;
      oh = (o / s.out_w) % s.out_h;
      c = (o / (s.out_w * s.out_h)) % s.channels;
      n = o / (s.out_w * s.out_h * s.channels);
    }
    float best = -INFINITY;
    std::int64_t best_at = -1, best_offset = 0;
    for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
      const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
      if (ih < 0 || ih >= s.in_h) continue;
      for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
        const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
        if (iw < 0 || iw >= s.in_w) continue;
        const std::int64_t offset = nchw_offset(s.channels_last, n, c, ih, iw, s.channels, s.in_h, s.in_w);
        const float v = load(x, offset);
        if (best_at < 0 || v > best || (isnan(v) && !isnan(best))) {
          best = v;
          best_at = ih * s.in_w + iw;
          best_offset = offset;
        }
      }
    }
    if (best_at >= 0) {
      y[o] = x[best_offset];  // the winner, bit for bit (a NaN keeps its payload)
    } else {
      store(y, o, -INFINITY);
    }
    argmax[o] = static_cast<std::int32_t>(best_at);
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(const T* dy, const std::int32_t* argmax, T* dx, MaxPoolShape s) {
  const std::int64_t inputs = s.batch * s.channels * s.in_h * s.in_w;
  GRID_STRIDE_LOOP(i, inputs) {
    std::int64_t n, c, ih, iw;
    if (s.channels_last) {
      c = i % s.channels;
      iw = (i / s.channels) % s.in_w;
      ih = (i / (s.channels * s.in_w)) % s.in_h;
      n = i / (s.channels * s.in_w * s.in_h);
    } else {
      iw = i % s.in_w;
      ih = (i / s.in_w) % s.in_h;
      c = (i / (s.in_w * s.in_h)) % s.channels;
      n = i / (s.in_w * s.in_h * s.channels);
    }
    // The windows that contain (ih, iw): oh * stride - pad <= ih <= oh * stride - pad + kernel - 1.
    const std::int64_t oh_first = max(std::int64_t{0}, (ih + s.pad_h - s.kernel_h + s.stride_h) / s.stride_h);
    const std::int64_t oh_last = min(s.out_h - 1, (ih + s.pad_h) / s.stride_h);
    const std::int64_t ow_first = max(std::int64_t{0}, (iw + s.pad_w - s.kernel_w + s.stride_w) / s.stride_w);
    const std::int64_t ow_last = min(s.out_w - 1, (iw + s.pad_w) / s.stride_w);
    const auto here = static_cast<std::int32_t>(ih * s.in_w + iw);
    float sum = 0.f;
    for (std::int64_t oh = oh_first; oh <= oh_last; ++oh) {
      for (std::int64_t ow = ow_first; ow <= ow_last; ++ow) {
        const std::int64_t o = nchw_offset(s.channels_last, n, c, oh, ow, s.channels, s.out_h, s.out_w);
        if (argmax[o] == here) sum += load(dy, o);
      }
    }
    store(dx, i, sum);
  }
}

// ---- softmax cross-entropy ----
template <typename T>
__global__ void sce_forward_v1_kernel(const T* logits, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, T* probs, float* row_losses, int* bad_label) {
  GRID_STRIDE_LOOP(r, batch) {
    const std::int64_t label = labels[r];
    if (label < 0 || label >= classes) {
      atomicCAS(bad_label, 0, static_cast<int>(r) + 1);
      row_losses[r] = 0;
      continue;
    }
    float m = -INFINITY;
    for (std::int64_t j = 0; j < classes; ++j) m = fmaxf(m, load(logits, r * classes + j));
    float s = 0;
    for (std::int64_t j = 0; j < classes; ++j) s += expf(load(logits, r * classes + j) - m);
    for (std::int64_t j = 0; j < classes; ++j)
      store(probs, r * classes + j, expf(load(logits, r * classes + j) - m) / s);
    row_losses[r] = logf(s) - (load(logits, r * classes + label) - m);
  }
}

// One warp per row.
template <typename T>
__global__ void sce_forward_kernel(const T* logits, const std::int64_t* labels, std::int64_t batch,
                                   std::int64_t classes, T* probs, float* row_losses, int* bad_label) {
  const std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= batch) return;
  const std::int64_t label = labels[r];
  if (label < 0 || label >= classes) {
    if (lane == 0) {
      atomicCAS(bad_label, 0, static_cast<int>(r) + 1);
      row_losses[r] = 0;
    }
    return;
  }
  const T* row = logits + r * classes;
  float m = -INFINITY;
  for (std::int64_t j = lane; j < classes; j += 32) m = fmaxf(m, load(row, j));
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  float s = 0;
  for (std::int64_t j = lane; j < classes; j += 32) s += expf(load(row, j) - m);
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
  for (std::int64_t j = lane; j < classes; j += 32) store(probs, r * classes + j, expf(load(row, j) - m) / s);
  if (lane == 0) row_losses[r] = logf(s) - (load(row, label) - m);
}

template <typename T>
__global__ void mean_kernel(const float* row_losses, std::int64_t batch, T* loss) {
  // One block, fixed order: the same mean every run.
  __shared__ float warps[kThreads / 32];
  float s = 0;
  for (std::int64_t i = threadIdx.x; i < batch; i += blockDim.x) s += row_losses[i];
  s = block_sum(s, warps);
  if (threadIdx.x == 0) store(loss, 0, s / static_cast<float>(batch));
}

template <typename T>
__global__ void sce_backward_kernel(const T* probs, const std::int64_t* labels, std::int64_t batch,
                                    std::int64_t classes, const T* dloss, T* dlogits) {
  const float scale = load(dloss, 0) / static_cast<float>(batch);
  GRID_STRIDE_LOOP(i, batch * classes) {
    const std::int64_t r = i / classes, j = i % classes;
    const float onehot = labels[r] == j ? 1.f : 0.f;
    store(dlogits, i, (load(probs, i) - onehot) * scale);
  }
}

}  // namespace

void relu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "relu_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    relu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  check_launch("relu_forward");
}

void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "relu_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(y), static_cast<const T*>(dy),
                                                                 static_cast<T*>(dx), n);
  });
  check_launch("relu_backward");
}

void bias_relu_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer, std::int64_t channels,
                       std::int64_t inner, bool relu, cudaStream_t stream) {
  const std::int64_t total = outer * channels * inner;
  if (total == 0) return;
  const std::int64_t slice = channels * inner;
  if (slice > (std::int64_t{1} << 31)) {
    throw Error("cuda kernel bias_relu_forward: " + std::to_string(slice) +
                " elements per outer index (channels x inner) is above 2^31");
  }
  // x covers one slice (enough blocks to fill the GPU together with y), y the outer index.
  const std::int64_t y_blocks = std::min<std::int64_t>(outer, 65535);
  const std::int64_t x_blocks = std::max<std::int64_t>(
      1, std::min<std::int64_t>((slice + kThreads - 1) / kThreads, std::max<std::int64_t>(1, 65536 / y_blocks)));
  const dim3 grid(static_cast<unsigned>(x_blocks), static_cast<unsigned>(y_blocks));
  dispatch(dtype, "bias_relu_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bias_relu_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(bias),
                                                    static_cast<T*>(y), outer, static_cast<unsigned>(channels),
                                                    static_cast<unsigned>(inner), relu);
  });
  check_launch("bias_relu_forward");
}

void bias_backward_v1(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                      std::int64_t inner, cudaStream_t stream) {
  if (channels == 0) return;
  dispatch(dtype, "bias_backward_v1", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bias_backward_v1_kernel<<<blocks_for(channels), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dbias), outer, channels, inner);
  });
  check_launch("bias_backward_v1");
}

void bias_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                   std::int64_t inner, float* scratch, cudaStream_t stream) {
  if (channels == 0) return;
  if (outer == 0 || inner == 0) {  // nothing to sum (an empty batch): a zero gradient, and no empty grid
    if (cudaMemsetAsync(dbias, 0, static_cast<std::size_t>(channels) * dtype_size(dtype), stream) != cudaSuccess)
      throw Error("cuda kernel bias_backward: cudaMemsetAsync failed");
    return;
  }
  const RbGrid g = rb_grid(outer, channels, inner);
  dispatch(dtype, "bias_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    if (inner == 1) {
      relu_bias_rows_kernel<T, false>
          <<<g.grid, g.block, 0, stream>>>(nullptr, static_cast<const T*>(dy), nullptr, scratch, outer, channels);
    } else {
      relu_bias_planes_kernel<T, false><<<g.grid, g.block, 0, stream>>>(nullptr, static_cast<const T*>(dy), nullptr,
                                                                        scratch, outer, channels, inner);
    }
    relu_bias_finish_kernel<<<blocks_for(channels), kThreads, 0, stream>>>(scratch, g.chunks, channels,
                                                                           static_cast<T*>(dbias));
  });
  check_launch("bias_backward");
}

void relu_bias_backward_v1(DType dtype, const void* y, const void* dy, void* dx, void* dbias, std::int64_t outer,
                           std::int64_t channels, std::int64_t inner, cudaStream_t stream) {
  if (channels == 0) return;
  dispatch(dtype, "relu_bias_backward_v1", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    relu_bias_backward_v1_kernel<<<blocks_for(channels), kThreads, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), static_cast<T*>(dbias), outer,
        channels, inner);
  });
  check_launch("relu_bias_backward_v1");
}

std::int64_t relu_bias_backward_scratch_elements(std::int64_t outer, std::int64_t channels, std::int64_t inner) {
  return channels == 0 ? 0 : static_cast<std::int64_t>(rb_grid(outer, channels, inner).chunks) * channels;
}

void relu_bias_backward(DType dtype, const void* y, const void* dy, void* dx, void* dbias, std::int64_t outer,
                        std::int64_t channels, std::int64_t inner, float* scratch, cudaStream_t stream) {
  if (channels == 0) return;
  if (outer == 0 || inner == 0) {  // an empty batch: nothing to route, a zero bias gradient, no empty grid
    bias_backward(dtype, dy, dbias, outer, channels, inner, scratch, stream);
    return;
  }
  const RbGrid g = rb_grid(outer, channels, inner);
  dispatch(dtype, "relu_bias_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    if (inner == 1) {
      relu_bias_rows_kernel<T, true><<<g.grid, g.block, 0, stream>>>(
          static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), scratch, outer, channels);
    } else {
      relu_bias_planes_kernel<T, true><<<g.grid, g.block, 0, stream>>>(
          static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), scratch, outer, channels, inner);
    }
    relu_bias_finish_kernel<<<blocks_for(channels), kThreads, 0, stream>>>(scratch, g.chunks, channels,
                                                                           static_cast<T*>(dbias));
  });
  check_launch("relu_bias_backward");
}

void max_pool2d_forward(DType dtype, const MaxPoolShape& shape, const void* x, void* y, std::int32_t* argmax,
                        cudaStream_t stream) {
  const std::int64_t outputs = shape.batch * shape.channels * shape.out_h * shape.out_w;
  if (outputs == 0) return;
  if (shape.in_h * shape.in_w > (std::int64_t{1} << 31) - 1) {
    throw Error("cuda kernel max_pool2d_forward: a plane of " + std::to_string(shape.in_h * shape.in_w) +
                " elements is above the int32 argmax");
  }
  dispatch(dtype, "max_pool2d_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    max_pool_forward_kernel<<<blocks_for(outputs), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                          argmax, shape);
  });
  check_launch("max_pool2d_forward");
}

void max_pool2d_backward(DType dtype, const MaxPoolShape& shape, const void* dy, const std::int32_t* argmax, void* dx,
                         cudaStream_t stream) {
  const std::int64_t inputs = shape.batch * shape.channels * shape.in_h * shape.in_w;
  if (inputs == 0) return;
  dispatch(dtype, "max_pool2d_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    max_pool_backward_kernel<<<blocks_for(inputs), kThreads, 0, stream>>>(static_cast<const T*>(dy), argmax,
                                                                          static_cast<T*>(dx), shape);
  });
  check_launch("max_pool2d_backward");
}

void softmax_cross_entropy_forward_v1(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, void* probs, void* loss, float* row_losses, int* bad_label,
                                      cudaStream_t stream) {
  cudaMemsetAsync(bad_label, 0, sizeof(int), stream);
  dispatch(dtype, "softmax_cross_entropy_forward_v1", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    sce_forward_v1_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), labels, batch, classes, static_cast<T*>(probs), row_losses, bad_label);
    mean_kernel<<<1, kThreads, 0, stream>>>(row_losses, batch, static_cast<T*>(loss));
  });
  check_launch("softmax_cross_entropy_forward_v1");
}

void softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                   std::int64_t classes, void* probs, void* loss, float* row_losses, int* bad_label,
                                   cudaStream_t stream) {
  cudaMemsetAsync(bad_label, 0, sizeof(int), stream);
  if (batch == 0) throw Error("cuda kernel softmax_cross_entropy_forward: empty batch");
  const std::int64_t threads = batch * 32;
  dispatch(dtype, "softmax_cross_entropy_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    sce_forward_kernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), labels, batch, classes, static_cast<T*>(probs), row_losses, bad_label);
    mean_kernel<<<1, kThreads, 0, stream>>>(row_losses, batch, static_cast<T*>(loss));
  });
  check_launch("softmax_cross_entropy_forward");
}

void softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                    std::int64_t classes, const void* dloss, void* dlogits, cudaStream_t stream) {
  if (batch * classes == 0) return;
  dispatch(dtype, "softmax_cross_entropy_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    sce_backward_kernel<<<blocks_for(batch * classes), kThreads, 0, stream>>>(
        static_cast<const T*>(probs), labels, batch, classes, static_cast<const T*>(dloss), static_cast<T*>(dlogits));
  });
  check_launch("softmax_cross_entropy_backward");
}

}  // namespace trainlab::kernels
