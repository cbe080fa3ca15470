// The hand-written kernels of the cuda backend; see kernels.h for the contracts. This file: the
// elementwise kernels, the reductions, the optimisers and the loss scaler's unscale; the layers'
// kernels (ReLU and bias, max-pool, softmax cross-entropy) are in layer_kernels.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "backends/error.h"
#include "kernels/kernels.h"
#include "kernels/kernels_common.cuh"

namespace trainlab::kernels {

namespace {

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
