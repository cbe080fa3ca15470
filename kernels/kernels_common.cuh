// What the kernel files share (kernels.cu: elementwise, reductions, optimisers, the loss scaler;
// layer_kernels.cu: ReLU and bias, max-pool, softmax cross-entropy): the block size, the loads and
// stores through f32, the dtype dispatch, the grid-stride loop and the block-wide sum. Private to
// kernels/*.cu; kernels.h is the interface.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <utility>

#include "backends/dtype.h"
#include "backends/error.h"

namespace trainlab::kernels {

constexpr int kThreads = 256;

inline int blocks_for(std::int64_t n) {
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

#define GRID_STRIDE_LOOP(i, n)                                                                     \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

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

}  // namespace trainlab::kernels
