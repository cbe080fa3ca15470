// The cuda backend's transformer layers beyond one kernel launch (backends/cuda/cuda_transformer.h).
#include "backends/cuda/cuda_transformer.h"

#include <string>

#include "backends/cuda/cuda_support.h"

namespace trainlab::cuda::transformer {

namespace {

const float* f32(const void* p) { return static_cast<const float*>(p); }
float* f32(void* p) { return static_cast<float*>(p); }

}  // namespace

void layer_norm_forward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* beta,
                        void* y, void* mean, void* rstd, cudaStream_t stream) {
  kernels::layer_norm_forward(dtype, s.rows, s.width, s.eps, x, f32(gamma), f32(beta), y, f32(mean), f32(rstd), stream);
}

void layer_norm_backward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* mean,
                         const void* rstd, const void* dy, void* dx, void* dgamma, void* dbeta, cudaStream_t stream) {
  kernels::layer_norm_backward(dtype, s.rows, s.width, x, f32(gamma), f32(mean), f32(rstd), dy, dx, f32(dgamma),
                               f32(dbeta), stream);
}

kernels::SoftmaxView softmax_view(const SoftmaxShape& s) {
  return {s.rows, s.cols, static_cast<float>(s.scale), s.causal, s.queries};
}

void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight, std::int64_t vocab,
                       std::int64_t width, void* y, int* flag, bool capturing, cudaStream_t stream) {
  CU(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  kernels::embedding_forward(dtype, indices, n, weight, vocab, width, y, flag, stream);
  if (capturing) return;
  int bad = 0;
  CU(cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, stream));
  CU(cudaStreamSynchronize(stream));
  if (bad == 0) return;
  std::int64_t index = 0;
  CU(cudaMemcpy(&index, indices + (bad - 1), sizeof index, cudaMemcpyDeviceToHost));
  throw Error("embedding: index " + std::to_string(index) + " at position " + std::to_string(bad - 1) +
              " is outside [0, " + std::to_string(vocab) + ")");
}

void matmul(cublasHandle_t blas, bool tf32, DType dtype, const MatmulShape& s, const void* a, const void* b, void* y) {
  const cudaDataType_t type = blas_type(dtype, "matmul");
  const cublasComputeType_t compute = dtype == DType::f32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float one = 1.f, zero = 0.f;
  CU(cublasGemmStridedBatchedEx(
      blas, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(s.n),
      static_cast<int>(s.m), static_cast<int>(s.k), &one, b, type, static_cast<int>(s.trans_b ? s.k : s.n), s.k * s.n,
      a, type, static_cast<int>(s.trans_a ? s.m : s.k), s.m * s.k, &zero, y, type, static_cast<int>(s.n), s.m * s.n,
      static_cast<int>(s.batch), compute, CUBLAS_GEMM_DEFAULT));
}

namespace {

kernels::AttentionView attention_view(const AttentionShape& s) {
  if (s.head_dim > kernels::kMaxHeadDim)
    throw Unsupported("attention: head_dim " + std::to_string(s.head_dim) +
                      " on cuda (its v1 kernels hold a row of at most " + std::to_string(kernels::kMaxHeadDim) + ")");
  return {s.batch_heads, s.queries, s.keys, s.head_dim, static_cast<float>(s.scale), s.causal};
}

}  // namespace

void attention_forward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v, void* y,
                       void* lse, cudaStream_t stream) {
  kernels::attention_forward(dtype, attention_view(s), q, k, v, y, f32(lse), stream);
}

void attention_backward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                        const void* y, const void* lse, const void* dy, void* dq, void* dk, void* dv, float* delta,
                        cudaStream_t stream) {
  kernels::attention_backward(dtype, attention_view(s), q, k, v, y, f32(lse), dy, dq, dk, dv, delta, stream);
}

}  // namespace trainlab::cuda::transformer
