// The hand-written kernels of the cuda backend; see kernels.h for the contracts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "backends/error.h"
#include "kernels/kernels.h"

namespace trainlab::kernels {

namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 65535 * 32 ? 65535 * 32 : blocks));
}

// Loads and stores through f32.
__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, std::int64_t i, float v) { p[i] = __float2half_rn(v); }

// Calls f with a typed null pointer for the storage type of `dtype`.
template <typename F>
void dispatch(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(static_cast<float*>(nullptr));
      return;
    case DType::bf16:
      f(static_cast<__nv_bfloat16*>(nullptr));
      return;
    case DType::f16:
      f(static_cast<__half*>(nullptr));
      return;
    default:
      throw Error(std::string("cuda kernel ") + kernel + ": dtype " + dtype_name(dtype) +
                  " is not supported (f32, bf16, f16)");
  }
}

// Storage types for casts: the compute types plus f64 (the engine casts to f64 to read values back).
template <typename F>
void dispatch_storage(DType dtype, const char* kernel, F&& f) {
  if (dtype == DType::f64) {
    f(static_cast<double*>(nullptr));
    return;
  }
  dispatch(dtype, kernel, std::forward<F>(f));
}

// One rounding from the source to the destination type (f64 -> bf16/f16 directly, not via f32).
template <typename D>
__device__ __forceinline__ D convert(double v);
template <>
__device__ __forceinline__ double convert<double>(double v) {
  return v;
}
template <>
__device__ __forceinline__ float convert<float>(double v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(double v) {
  return __double2bfloat16(v);
}
template <>
__device__ __forceinline__ __half convert<__half>(double v) {
  return __double2half(v);
}
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ double widen(float v) { return v; }
__device__ __forceinline__ double widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ double widen(__half v) { return __half2float(v); }

#define GRID_STRIDE_LOOP(i, n)                                                                     \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

template <typename T>
__global__ void fill_kernel(T* y, std::int64_t n, float value) {
  GRID_STRIDE_LOOP(i, n) store(y, i, value);
}

template <typename S, typename D>
__global__ void cast_kernel(const S* x, D* y, std::int64_t n) {
  GRID_STRIDE_LOOP(i, n) y[i] = convert<D>(widen(x[i]));
}

// Gradient compression: y = D(float(x) * scale), or in f64 when both are f64 (the host's
// Communicator::convert, bit for bit).
template <typename S, typename D>
__global__ void convert_scaled_kernel(const S* x, D* y, std::int64_t n, float scale) {
  GRID_STRIDE_LOOP(i, n) y[i] = convert<D>(static_cast<double>(static_cast<float>(widen(x[i])) * scale));
}
__global__ void scale_f64_kernel(const double* x, double* y, std::int64_t n, double scale) {
  GRID_STRIDE_LOOP(i, n) y[i] = x[i] * scale;
}

template <typename T>
__global__ void fill_storage_kernel(T* y, std::int64_t n, T value) {
  GRID_STRIDE_LOOP(i, n) y[i] = value;
}

template <typename T>
__global__ void binary_kernel(int op, const T* a, const T* b, T* y, std::int64_t n) {
  GRID_STRIDE_LOOP(i, n) {
    const float x = load(a, i), z = load(b, i);
    store(y, i, op == 0 ? x + z : op == 1 ? x - z : op == 2 ? x * z : x / z);
  }
}

template <typename T>
__global__ void affine_kernel(const T* x, T* y, std::int64_t n, float scale, float shift) {
  GRID_STRIDE_LOOP(i, n) store(y, i, scale * load(x, i) + shift);
}

// The ring all-reduce's local step: y = y + x, or (y + x) * scale on the step that completes an
// average; through f32 for bf16/f16, in the storage type for f32/f64 (the host loop's arithmetic,
// so the device ring is bit for bit the host ring).
template <typename T>
__global__ void ring_reduce_kernel(T* y, const T* x, std::int64_t n, float scale, bool scaled) {
  if (scaled) {
    GRID_STRIDE_LOOP(i, n) store(y, i, (load(y, i) + load(x, i)) * scale);
  } else {
    GRID_STRIDE_LOOP(i, n) store(y, i, load(y, i) + load(x, i));
  }
}
__global__ void ring_reduce_f64_kernel(double* y, const double* x, std::int64_t n, double scale, bool scaled) {
  if (scaled) {
    GRID_STRIDE_LOOP(i, n) y[i] = (y[i] + x[i]) * scale;
  } else {
    GRID_STRIDE_LOOP(i, n) y[i] += x[i];
  }
}

template <typename T>
__global__ void axpy_kernel(std::int64_t n, float alpha, const T* x, T* y) {
  GRID_STRIDE_LOOP(i, n) store(y, i, load(y, i) + alpha * load(x, i));
}

struct StridedArgs {
  std::int64_t shape[8], src_strides[8], dst_strides[8];
  std::int64_t src_offset, dst_offset;
  int dims;
};

template <typename T>
__global__ void copy_strided_kernel(const T* src, T* dst, std::int64_t n, StridedArgs a) {
  GRID_STRIDE_LOOP(i, n) {
    std::int64_t rest = i, s = a.src_offset, d = a.dst_offset;
    for (int k = a.dims - 1; k >= 0; --k) {
      const std::int64_t index = rest % a.shape[k];
      rest /= a.shape[k];
      s += index * a.src_strides[k];
      d += index * a.dst_strides[k];
    }
    dst[d] = src[s];
  }
}

// ---- reductions ----
template <typename T>
__global__ void sum_v1_kernel(const T* x, std::int64_t n, float* total) {
  GRID_STRIDE_LOOP(i, n) atomicAdd(total, load(x, i));  // order varies: not bit-reproducible
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of v over a block of kThreads threads, in a fixed order; the result is thread 0's.
// `warps` is kThreads / 32 floats of shared memory. Every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v, float* warps) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kThreads / 32 ? warps[threadIdx.x] : 0.f;
    v = warp_sum(v);
  }
  return v;
}

// One partial per block in a fixed order, so the result is the same every run.
template <typename T>
__global__ void sum_partials_kernel(const T* x, std::int64_t n, float* partials) {
  __shared__ float warps[kThreads / 32];
  float v = 0;
  GRID_STRIDE_LOOP(i, n) v += load(x, i);
  v = block_sum(v, warps);
  if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

template <typename T>
__global__ void sum_finish_kernel(const float* partials, int count, T* out) {
  __shared__ float warps[kThreads / 32];
  float v = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) v += partials[i];
  v = block_sum(v, warps);
  if (threadIdx.x == 0) store(out, 0, v);
}

template <typename T>
__global__ void store_total_kernel(const float* total, T* out) {
  store(out, 0, *total);
}

constexpr int kSumBlocks = 1024;

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

// ---- optimisers ----
template <typename T, typename W>
__global__ void sgd_kernel(std::int64_t n, T* param, const T* grad, T* buf, float lr, float momentum, float dampening,
                           float weight_decay, bool nesterov, bool first_step, W* working) {
  GRID_STRIDE_LOOP(i, n) {
    float p = load(param, i);
    float d = load(grad, i) + weight_decay * p;
    if (momentum != 0.f) {
      const float b = first_step ? d : momentum * load(buf, i) + (1.f - dampening) * d;
      store(buf, i, b);
      d = nesterov ? d + momentum * b : b;
    }
    p -= lr * d;
    store(param, i, p);
    if (working != nullptr) store(working, i, p);
  }
}

template <typename T, typename W>
__global__ void adamw_kernel(std::int64_t n, T* param, const T* grad, T* m, T* v, float lr, float beta1, float beta2,
                             float eps, float weight_decay, float bias1, float bias2_sqrt, W* working) {
  GRID_STRIDE_LOOP(i, n) {
    float p = load(param, i) * (1.f - lr * weight_decay);
    const float g = load(grad, i);
    const float mi = beta1 * load(m, i) + (1.f - beta1) * g;
    const float vi = beta2 * load(v, i) + (1.f - beta2) * g * g;
    store(m, i, mi);
    store(v, i, vi);
    p -= lr / bias1 * mi / (sqrtf(vi) / bias2_sqrt + eps);
    store(param, i, p);
    if (working != nullptr) store(working, i, p);
  }
}

template <typename T, typename W>
__global__ void sgd_multi_kernel(const MultiSlot* slots, float lr, float momentum, float dampening, float weight_decay,
                                 bool nesterov) {
  const MultiSlot s = slots[blockIdx.y];
  T* param = static_cast<T*>(s.param);
  const T* grad = static_cast<const T*>(s.grad);
  T* buf = static_cast<T*>(s.state1);
  W* working = static_cast<W*>(s.working);
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.n;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    float p = load(param, i);
    float d = load(grad, i) + weight_decay * p;
    if (buf != nullptr) {
      const float b = s.first_step ? d : momentum * load(buf, i) + (1.f - dampening) * d;
      store(buf, i, b);
      d = nesterov ? d + momentum * b : b;
    }
    p -= lr * d;
    store(param, i, p);
    if (working != nullptr) store(working, i, p);
  }
}

template <typename T, typename W>
__global__ void adamw_multi_kernel(const MultiSlot* slots, float lr, float beta1, float beta2, float eps,
                                   float weight_decay) {
  const MultiSlot s = slots[blockIdx.y];
  W* working = static_cast<W*>(s.working);
  T* param = static_cast<T*>(s.param);
  const T* grad = static_cast<const T*>(s.grad);
  T* m = static_cast<T*>(s.state1);
  T* v = static_cast<T*>(s.state2);
  const float bias1 = 1.f - powf(beta1, static_cast<float>(s.step));
  const float bias2_sqrt = sqrtf(1.f - powf(beta2, static_cast<float>(s.step)));
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.n;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    float p = load(param, i) * (1.f - lr * weight_decay);
    const float g = load(grad, i);
    const float mi = beta1 * load(m, i) + (1.f - beta1) * g;
    const float vi = beta2 * load(v, i) + (1.f - beta2) * g * g;
    store(m, i, mi);
    store(v, i, vi);
    const float updated = p - lr / bias1 * mi / (sqrtf(vi) / bias2_sqrt + eps);
    store(param, i, updated);
    if (working != nullptr) store(working, i, updated);
  }
}

template <typename T>
__global__ void unscale_kernel(T* x, std::int64_t n, float inv_scale, int* found_inf) {
  GRID_STRIDE_LOOP(i, n) {
    const float v = load(x, i) * inv_scale;
    if (!isfinite(v)) *found_inf = 1;
    store(x, i, v);
  }
}

}  // namespace

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw Error(std::string("cuda kernel ") + kernel + ": launch failed: " + cudaGetErrorString(status));
  }
}

void fill(DType dtype, void* y, std::int64_t n, double value, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::f64 || dtype == DType::i64) {  // storage types: exact values
    if (dtype == DType::f64) {
      fill_storage_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<double*>(y), n, value);
    } else {
      fill_storage_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<std::int64_t*>(y), n,
                                                                  static_cast<std::int64_t>(value));
    }
    check_launch("fill");
    return;
  }
  // bf16 and f16: the bits computed here, on the host, as the CPU backends round a fill value (f64
  // to f32, then to nearest even, NaN with dtype.h's payload), so that a fill is the same bits on
  // every backend; the device's own conversion would give NaN another payload.
  if (dtype == DType::bf16 || dtype == DType::f16) {
    const float narrowed = static_cast<float>(value);
    const std::uint16_t bits = dtype == DType::bf16 ? f32_to_bf16_bits(narrowed) : f32_to_f16_bits(narrowed);
    fill_storage_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<std::uint16_t*>(y), n, bits);
    check_launch("fill");
    return;
  }
  dispatch(dtype, "fill", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), n, static_cast<float>(value));
  });
  check_launch("fill");
}

void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_storage(src_dtype, "cast", [&](auto* s) {
    using S = std::remove_pointer_t<decltype(s)>;
    dispatch_storage(dst_dtype, "cast", [&](auto* d) {
      using D = std::remove_pointer_t<decltype(d)>;
      cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
  check_launch("cast");
}

void convert_scaled(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, double scale,
                    cudaStream_t stream) {
  if (n == 0) return;
  if (src_dtype == DType::f64 && dst_dtype == DType::f64) {
    scale_f64_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const double*>(src), static_cast<double*>(dst),
                                                             n, scale);
  } else {
    dispatch_storage(src_dtype, "convert_scaled", [&](auto* s) {
      using S = std::remove_pointer_t<decltype(s)>;
      dispatch_storage(dst_dtype, "convert_scaled", [&](auto* d) {
        using D = std::remove_pointer_t<decltype(d)>;
        convert_scaled_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst),
                                                                      n, static_cast<float>(scale));
      });
    });
  }
  check_launch("convert_scaled");
}

void binary(int op, DType dtype, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "binary", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                          static_cast<T*>(y), n);
  });
  check_launch("binary");
}

void affine(DType dtype, const void* x, void* y, std::int64_t n, float scale, float shift, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "affine", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    affine_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, scale,
                                                          shift);
  });
  check_launch("affine");
}

void ring_reduce(DType dtype, void* y, const void* x, std::int64_t n, double scale, cudaStream_t stream) {
  if (n == 0) return;
  const bool scaled = scale != 1.0;
  if (dtype == DType::f64) {
    ring_reduce_f64_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<double*>(y),
                                                                   static_cast<const double*>(x), n, scale, scaled);
  } else {
    dispatch(dtype, "ring_reduce", [&](auto* t) {
      using T = std::remove_pointer_t<decltype(t)>;
      ring_reduce_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), n,
                                                                 static_cast<float>(scale), scaled);
    });
  }
  check_launch("ring_reduce");
}

void axpy(DType dtype, std::int64_t n, float alpha, const void* x, void* y, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "axpy", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    axpy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, alpha, static_cast<const T*>(x), static_cast<T*>(y));
  });
  check_launch("axpy");
}

void copy_strided(DType dtype, const void* src, const std::int64_t* shape, const std::int64_t* src_strides,
                  std::int64_t src_offset, void* dst, const std::int64_t* dst_strides, std::int64_t dst_offset,
                  int dims, cudaStream_t stream) {
  if (dims > 8) throw Error("cuda kernel copy_strided: at most 8 dimensions, got " + std::to_string(dims));
  StridedArgs args{};
  std::int64_t n = 1;
  for (int k = 0; k < dims; ++k) {
    args.shape[k] = shape[k];
    args.src_strides[k] = src_strides[k];
    args.dst_strides[k] = dst_strides[k];
    n *= shape[k];
  }
  args.src_offset = src_offset;
  args.dst_offset = dst_offset;
  args.dims = dims;
  if (n == 0) return;
  // A copy moves bits: dispatch on the element size, so every dtype (f64 and i64 too) is covered.
  auto launch = [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    copy_strided_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst), n,
                                                                args);
  };
  switch (dtype_size(dtype)) {
    case 2:
      launch(static_cast<std::uint16_t*>(nullptr));
      break;
    case 4:
      launch(static_cast<std::uint32_t*>(nullptr));
      break;
    case 8:
      launch(static_cast<std::uint64_t*>(nullptr));
      break;
    default:
      throw Error(std::string("cuda kernel copy_strided: unsupported element size for dtype ") + dtype_name(dtype));
  }
  check_launch("copy_strided");
}

std::int64_t sum_scratch_elements(std::int64_t) { return kSumBlocks; }

void sum_v1(DType dtype, const void* x, std::int64_t n, void* out, float* scratch, cudaStream_t stream) {
  cudaMemsetAsync(scratch, 0, sizeof(float), stream);
  dispatch(dtype, "sum_v1", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    if (n > 0) sum_v1_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), n, scratch);
    store_total_kernel<<<1, 1, 0, stream>>>(scratch, static_cast<T*>(out));
  });
  check_launch("sum_v1");
}

void sum(DType dtype, const void* x, std::int64_t n, void* out, float* scratch, cudaStream_t stream) {
  const int blocks = static_cast<int>(std::min<std::int64_t>(kSumBlocks, (n + kThreads - 1) / kThreads + 1));
  dispatch(dtype, "sum", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    sum_partials_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), n, scratch);
    sum_finish_kernel<<<1, kThreads, 0, stream>>>(scratch, blocks, static_cast<T*>(out));
  });
  check_launch("sum");
}

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

void sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer, float lr,
              float momentum, float dampening, float weight_decay, bool nesterov, bool first_step, DType working_dtype,
              void* working, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "sgd_step", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    dispatch(working == nullptr ? dtype : working_dtype, "sgd_step (working copy)", [&](auto* w) {
      using W = std::remove_pointer_t<decltype(w)>;
      sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, static_cast<T*>(param), static_cast<const T*>(grad),
                                                         static_cast<T*>(momentum_buffer), lr, momentum, dampening,
                                                         weight_decay, nesterov, first_step, static_cast<W*>(working));
    });
  });
  check_launch("sgd_step");
}

void adamw_step(DType dtype, std::int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, float lr,
                float beta1, float beta2, float eps, float weight_decay, std::int64_t step, DType working_dtype,
                void* working, cudaStream_t stream) {
  if (n == 0) return;
  const float bias1 = 1.f - powf(beta1, static_cast<float>(step));
  const float bias2_sqrt = sqrtf(1.f - powf(beta2, static_cast<float>(step)));
  dispatch(dtype, "adamw_step", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    dispatch(working == nullptr ? dtype : working_dtype, "adamw_step (working copy)", [&](auto* w) {
      using W = std::remove_pointer_t<decltype(w)>;
      adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
          n, static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq),
          lr, beta1, beta2, eps, weight_decay, bias1, bias2_sqrt, static_cast<W*>(working));
    });
  });
  check_launch("adamw_step");
}

// The whole-model launches: grid.y walks the slots, grid.x the largest slot's elements; `launch`
// gets null pointers of the parameter type T and the working-copy type W, and the grid.
template <typename Launch>
void launch_multi(const char* kernel, DType dtype, DType working_dtype, int count, std::int64_t max_n,
                  Launch&& launch) {
  if (count == 0 || max_n == 0) return;
  if (count > 65535) {
    throw Error(std::string("cuda kernel ") + kernel + ": at most 65535 tensors, got " + std::to_string(count));
  }
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>(1024, (max_n + kThreads - 1) / kThreads)),
                  static_cast<unsigned>(count));
  dispatch(dtype, kernel, [&](auto* t) { dispatch(working_dtype, kernel, [&](auto* w) { launch(t, w, grid); }); });
  check_launch(kernel);
}

void sgd_step_multi(DType dtype, const MultiSlot* slots, int count, std::int64_t max_n, float lr, float momentum,
                    float dampening, float weight_decay, bool nesterov, DType working_dtype, cudaStream_t stream) {
  launch_multi("sgd_step_multi", dtype, working_dtype, count, max_n, [&](auto* t, auto* w, dim3 grid) {
    using T = std::remove_pointer_t<decltype(t)>;
    using W = std::remove_pointer_t<decltype(w)>;
    sgd_multi_kernel<T, W><<<grid, kThreads, 0, stream>>>(slots, lr, momentum, dampening, weight_decay, nesterov);
  });
}

void adamw_step_multi(DType dtype, const MultiSlot* slots, int count, std::int64_t max_n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, DType working_dtype, cudaStream_t stream) {
  launch_multi("adamw_step_multi", dtype, working_dtype, count, max_n, [&](auto* t, auto* w, dim3 grid) {
    using T = std::remove_pointer_t<decltype(t)>;
    using W = std::remove_pointer_t<decltype(w)>;
    adamw_multi_kernel<T, W><<<grid, kThreads, 0, stream>>>(slots, lr, beta1, beta2, eps, weight_decay);
  });
}

void unscale_and_check(DType dtype, void* x, std::int64_t n, float inv_scale, int* found_inf, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "unscale_and_check", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    unscale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), n, inv_scale, found_inf);
  });
  check_launch("unscale_and_check");
}

}  // namespace trainlab::kernels
