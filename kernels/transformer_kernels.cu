// A transformer's layers (see kernels.h for the contracts): layer norm, GELU, softmax with the
// causal mask, embedding. First versions, plain as llm.c's v1 kernels: a block per row for the
// row reductions (block_sum's fixed order: the bits do not depend on the launch), one thread per
// element for the elementwise passes, one thread per column for the sums across rows (layer
// norm's dgamma and dbeta, embedding's gradient: in row order, no atomics, the same bits every run).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "backends/error.h"
#include "kernels/kernels.h"
#include "kernels/kernels_common.cuh"

namespace trainlab::kernels {

namespace {

constexpr float kGeluA = 0.044715f;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

// The maximum of v over a block of kThreads threads, broadcast to every thread. `warps` is
// kThreads / 32 floats of shared memory.
__device__ __forceinline__ float block_max_all(float v, float* warps) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  float top = warps[0];
  for (int w = 1; w < kThreads / 32; ++w) top = fmaxf(top, warps[w]);
  __syncthreads();
  return top;
}

// block_sum's result broadcast to every thread.
__device__ __forceinline__ float block_sum_all(float v, float* warps, float* out) {
  v = block_sum(v, warps);
  if (threadIdx.x == 0) *out = v;
  __syncthreads();
  const float total = *out;
  __syncthreads();
  return total;
}

// ---- layer norm: a block per row ----
template <typename T>
__global__ void layer_norm_forward_kernel(const T* x, const float* gamma, const float* beta, T* y, float* mean,
                                          float* rstd, std::int64_t width, float eps) {
  __shared__ float warps[kThreads / 32];
  __shared__ float shared;
  const std::int64_t r = blockIdx.x;
  const T* row = x + r * width;
  float s = 0.f;
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) s += load(row, i);
  const float mu = block_sum_all(s, warps, &shared) / static_cast<float>(width);
  float q = 0.f;
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float d = load(row, i) - mu;
    q += d * d;
  }
  const float var = block_sum_all(q, warps, &shared) / static_cast<float>(width);
  const float k = 1.f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = k;
  }
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = (load(row, i) - mu) * k;
    store(y, r * width + i, v * (gamma ? gamma[i] : 1.f) + (beta ? beta[i] : 0.f));
  }
}

template <typename T>
__global__ void layer_norm_backward_data_kernel(const T* x, const float* gamma, const float* mean, const float* rstd,
                                                const T* dy, T* dx, std::int64_t width) {
  __shared__ float warps[kThreads / 32];
  __shared__ float shared;
  const std::int64_t r = blockIdx.x, base = r * width;
  const float m = mean[r], k = rstd[r];
  float sg = 0.f, sgx = 0.f;
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float g = load(dy, base + i) * (gamma ? gamma[i] : 1.f);
    sg += g;
    sgx += g * (load(x, base + i) - m) * k;
  }
  const float a = block_sum_all(sg, warps, &shared) / static_cast<float>(width);
  const float b = block_sum_all(sgx, warps, &shared) / static_cast<float>(width);
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float g = load(dy, base + i) * (gamma ? gamma[i] : 1.f);
    store(dx, base + i, k * (g - a - (load(x, base + i) - m) * k * b));
  }
}

// A thread per column: dbeta and dgamma over the rows in order.
template <typename T>
__global__ void layer_norm_backward_params_kernel(const T* x, const float* mean, const float* rstd, const T* dy,
                                                  float* dgamma, float* dbeta, std::int64_t rows, std::int64_t width) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= width) return;
  float sb = 0.f, sg = 0.f;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float d = load(dy, r * width + i);
    sb += d;
    sg += d * (load(x, r * width + i) - mean[r]) * rstd[r];
  }
  if (dbeta != nullptr) dbeta[i] = sb;
  if (dgamma != nullptr) dgamma[i] = sg;
}

// ---- GELU ----
template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, std::int64_t n) {
  GRID_STRIDE_LOOP(i, n) {
    const float v = load(x, i);
    store(y, i, 0.5f * v * (1.f + tanhf(kGeluK * (v + kGeluA * v * v * v))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n) {
  GRID_STRIDE_LOOP(i, n) {
    const float v = load(x, i);
    const float t = tanhf(kGeluK * (v + kGeluA * v * v * v));
    const float d = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kGeluK * (1.f + 3.f * kGeluA * v * v);
    store(dx, i, load(dy, i) * d);
  }
}

// ---- softmax: a block per row ----
__device__ __forceinline__ std::int64_t visible_keys(const SoftmaxView& s, std::int64_t r) {
  if (!s.causal) return s.cols;
  const std::int64_t v = r % s.queries + (s.cols - s.queries) + 1;
  return v < s.cols ? v : s.cols;
}

template <typename T>
__global__ void softmax_forward_kernel(const T* x, T* y, SoftmaxView s) {
  __shared__ float warps[kThreads / 32];
  __shared__ float shared;
  const std::int64_t r = blockIdx.x, base = r * s.cols, visible = visible_keys(s, r);
  float top = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) top = fmaxf(top, s.scale * load(x, base + j));
  top = block_max_all(top, warps);
  float total = 0.f;
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) total += expf(s.scale * load(x, base + j) - top);
  const float inv = 1.f / block_sum_all(total, warps, &shared);
  for (std::int64_t j = threadIdx.x; j < s.cols; j += blockDim.x)
    store(y, base + j, j < visible ? expf(s.scale * load(x, base + j) - top) * inv : 0.f);
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, SoftmaxView s) {
  __shared__ float warps[kThreads / 32];
  __shared__ float shared;
  const std::int64_t r = blockIdx.x, base = r * s.cols, visible = visible_keys(s, r);
  float dot = 0.f;
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) dot += load(dy, base + j) * load(y, base + j);
  dot = block_sum_all(dot, warps, &shared);
  for (std::int64_t j = threadIdx.x; j < s.cols; j += blockDim.x)
    store(dx, base + j, j < visible ? s.scale * load(y, base + j) * (load(dy, base + j) - dot) : 0.f);
}

// ---- embedding ----
// A thread per element of y; an index outside [0, vocab) sets *bad_index to 1 + its position and
// writes nothing.
template <typename T>
__global__ void embedding_forward_kernel(const std::int64_t* indices, std::int64_t n, const T* weight,
                                         std::int64_t vocab, std::int64_t width, T* y, int* bad_index) {
  GRID_STRIDE_LOOP(e, n * width) {
    const std::int64_t i = e / width, c = e - i * width, v = indices[i];
    if (v < 0 || v >= vocab) {
      if (c == 0) atomicCAS(bad_index, 0, static_cast<int>(i + 1));
      continue;
    }
    y[e] = weight[v * width + c];
  }
}

// A thread per column: every row of dweight at once, over the positions in order, in f32
// (`acc`, vocab x width), then rounded.
template <typename T>
__global__ void embedding_backward_kernel(const std::int64_t* indices, std::int64_t n, const T* dy, std::int64_t vocab,
                                          std::int64_t width, float* acc) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= width) return;
  for (std::int64_t v = 0; v < vocab; ++v) acc[v * width + c] = 0.f;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t v = indices[i];
    if (v >= 0 && v < vocab) acc[v * width + c] += load(dy, i * width + c);
  }
}

template <typename T>
__global__ void round_kernel(const float* acc, T* out, std::int64_t n) {
  GRID_STRIDE_LOOP(i, n) store(out, i, acc[i]);
}

// ---- fused attention, v1: a thread per query row (forward, dq) or key row (dk, dv), the scores
// recomputed as each loop needs them, the head's row in registers (head_dim <= kMaxHeadDim) ----
__device__ __forceinline__ std::int64_t attention_visible(const AttentionView& s, std::int64_t i) {
  const std::int64_t v = i + (s.keys - s.queries) + 1;
  return s.causal && v < s.keys ? v : s.keys;
}

template <typename T>
__device__ __forceinline__ float row_dot(const T* a, const T* b, std::int64_t d) {
  float total = 0.f;
  for (std::int64_t c = 0; c < d; ++c) total += load(a, c) * load(b, c);
  return total;
}

// Online softmax over the visible keys: m the running maximum, l the running sum, acc the running
// output, rescaled as the maximum moves.
template <typename T>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, T* y, float* lse, AttentionView s) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.batch_heads * s.queries) return;
  const std::int64_t h = row / s.queries, i = row % s.queries, d = s.head_dim;
  const T* qi = q + row * d;
  float acc[kMaxHeadDim];
  for (std::int64_t c = 0; c < d; ++c) acc[c] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (std::int64_t j = 0; j < attention_visible(s, i); ++j) {
    const T* kj = k + (h * s.keys + j) * d;
    const float score = s.scale * row_dot(qi, kj, d);
    const float m_new = fmaxf(m, score), correction = expf(m - m_new), p = expf(score - m_new);
    l = l * correction + p;
    const T* vj = v + (h * s.keys + j) * d;
    for (std::int64_t c = 0; c < d; ++c) acc[c] = acc[c] * correction + p * load(vj, c);
    m = m_new;
  }
  for (std::int64_t c = 0; c < d; ++c) store(y, row * d + c, acc[c] / l);
  lse[row] = m + logf(l);
}

// delta[row] = dy . y over the row.
template <typename T>
__global__ void attention_delta_kernel(const T* y, const T* dy, float* delta, std::int64_t rows, std::int64_t d) {
  GRID_STRIDE_LOOP(row, rows) delta[row] = row_dot(dy + row * d, y + row * d, d);
}

template <typename T>
__global__ void attention_dq_kernel(const T* q, const T* k, const T* v, const float* lse, const float* delta,
                                    const T* dy, T* dq, AttentionView s) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.batch_heads * s.queries) return;
  const std::int64_t h = row / s.queries, i = row % s.queries, d = s.head_dim;
  float acc[kMaxHeadDim];
  for (std::int64_t c = 0; c < d; ++c) acc[c] = 0.f;
  for (std::int64_t j = 0; j < attention_visible(s, i); ++j) {
    const T* kj = k + (h * s.keys + j) * d;
    const float p = expf(s.scale * row_dot(q + row * d, kj, d) - lse[row]);
    const float ds = p * (row_dot(dy + row * d, v + (h * s.keys + j) * d, d) - delta[row]);
    for (std::int64_t c = 0; c < d; ++c) acc[c] += ds * load(kj, c);
  }
  for (std::int64_t c = 0; c < d; ++c) store(dq, row * d + c, s.scale * acc[c]);
}

// A thread per key row: the queries that see key j, in order.
template <typename T>
__global__ void attention_dkv_kernel(const T* q, const T* k, const T* v, const float* lse, const float* delta,
                                     const T* dy, T* dk, T* dv, AttentionView s) {
  const std::int64_t key = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (key >= s.batch_heads * s.keys) return;
  const std::int64_t h = key / s.keys, j = key % s.keys, d = s.head_dim;
  const std::int64_t first = s.causal ? (j - (s.keys - s.queries) > 0 ? j - (s.keys - s.queries) : 0) : 0;
  float gk[kMaxHeadDim], gv[kMaxHeadDim];
  for (std::int64_t c = 0; c < d; ++c) gk[c] = gv[c] = 0.f;
  for (std::int64_t i = first; i < s.queries; ++i) {
    const std::int64_t row = h * s.queries + i;
    const float p = expf(s.scale * row_dot(q + row * d, k + key * d, d) - lse[row]);
    const float ds = p * (row_dot(dy + row * d, v + key * d, d) - delta[row]);
    for (std::int64_t c = 0; c < d; ++c) {
      gk[c] += ds * load(q, row * d + c);
      gv[c] += p * load(dy, row * d + c);
    }
  }
  for (std::int64_t c = 0; c < d; ++c) {
    store(dk, key * d + c, s.scale * gk[c]);
    store(dv, key * d + c, gv[c]);
  }
}

}  // namespace

void layer_norm_forward(DType dtype, std::int64_t rows, std::int64_t width, double eps, const void* x,
                        const float* gamma, const float* beta, void* y, float* mean, float* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  dispatch(dtype, "layer_norm_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    layer_norm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), gamma, beta, static_cast<T*>(y), mean, rstd, width, static_cast<float>(eps));
  });
  check_launch("layer_norm_forward");
}

void layer_norm_backward(DType dtype, std::int64_t rows, std::int64_t width, const void* x, const float* gamma,
                         const float* mean, const float* rstd, const void* dy, void* dx, float* dgamma, float* dbeta,
                         cudaStream_t stream) {
  dispatch(dtype, "layer_norm_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    if (dx != nullptr && rows > 0)
      layer_norm_backward_data_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(x), gamma, mean, rstd, static_cast<const T*>(dy), static_cast<T*>(dx), width);
    if (dgamma != nullptr || dbeta != nullptr)
      layer_norm_backward_params_kernel<<<blocks_for(width), kThreads, 0, stream>>>(
          static_cast<const T*>(x), mean, rstd, static_cast<const T*>(dy), dgamma, dbeta, rows, width);
  });
  check_launch("layer_norm_backward");
}

void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "gelu_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  check_launch("gelu_forward");
}

void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(dtype, "gelu_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(dy),
                                                                 static_cast<T*>(dx), n);
  });
  check_launch("gelu_backward");
}

void softmax_forward(DType dtype, const SoftmaxView& s, const void* x, void* y, cudaStream_t stream) {
  if (s.rows == 0) return;
  dispatch(dtype, "softmax_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    softmax_forward_kernel<<<static_cast<unsigned>(s.rows), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                                                   static_cast<T*>(y), s);
  });
  check_launch("softmax_forward");
}

void softmax_backward(DType dtype, const SoftmaxView& s, const void* y, const void* dy, void* dx, cudaStream_t stream) {
  if (s.rows == 0) return;
  dispatch(dtype, "softmax_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    softmax_backward_kernel<<<static_cast<unsigned>(s.rows), kThreads, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), s);
  });
  check_launch("softmax_backward");
}

void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight, std::int64_t vocab,
                       std::int64_t width, void* y, int* bad_index, cudaStream_t stream) {
  if (n * width == 0) return;
  dispatch(dtype, "embedding_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    embedding_forward_kernel<<<blocks_for(n * width), kThreads, 0, stream>>>(
        indices, n, static_cast<const T*>(weight), vocab, width, static_cast<T*>(y), bad_index);
  });
  check_launch("embedding_forward");
}

void embedding_backward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* dy, std::int64_t vocab,
                        std::int64_t width, void* dweight, float* acc, cudaStream_t stream) {
  if (vocab * width == 0) return;
  dispatch(dtype, "embedding_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    embedding_backward_kernel<<<blocks_for(width), kThreads, 0, stream>>>(indices, n, static_cast<const T*>(dy), vocab,
                                                                          width, acc);
    round_kernel<<<blocks_for(vocab * width), kThreads, 0, stream>>>(acc, static_cast<T*>(dweight), vocab * width);
  });
  check_launch("embedding_backward");
}

void attention_forward(DType dtype, const AttentionView& s, const void* q, const void* k, const void* v, void* y,
                       float* lse, cudaStream_t stream) {
  const std::int64_t rows = s.batch_heads * s.queries;
  if (rows == 0) return;
  dispatch(dtype, "attention_forward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    attention_forward_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(y), lse, s);
  });
  check_launch("attention_forward");
}

void attention_backward(DType dtype, const AttentionView& s, const void* q, const void* k, const void* v, const void* y,
                        const float* lse, const void* dy, void* dq, void* dk, void* dv, float* delta,
                        cudaStream_t stream) {
  const std::int64_t rows = s.batch_heads * s.queries, keys = s.batch_heads * s.keys;
  if (rows == 0 || keys == 0) return;
  dispatch(dtype, "attention_backward", [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    const auto *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k), *tv = static_cast<const T*>(v);
    const auto* tdy = static_cast<const T*>(dy);
    attention_delta_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(static_cast<const T*>(y), tdy, delta, rows,
                                                                      s.head_dim);
    attention_dq_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(tq, tk, tv, lse, delta, tdy, static_cast<T*>(dq), s);
    attention_dkv_kernel<<<blocks_for(keys), kThreads, 0, stream>>>(tq, tk, tv, lse, delta, tdy, static_cast<T*>(dk),
                                                                    static_cast<T*>(dv), s);
  });
  check_launch("attention_backward");
}

}  // namespace trainlab::kernels
