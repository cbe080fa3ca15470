// The cuda backend's transformer layers beyond one kernel launch (cuda_backend.cpp's only): layer
// norm's f32 operands, softmax's view, the embedding's index check read back from the device, and
// the batch of matrix products through cuBLAS's strided batch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/backend.h"
#include "kernels/kernels.h"

namespace trainlab::cuda::transformer {

void layer_norm_forward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* beta,
                        void* y, void* mean, void* rstd, cudaStream_t stream);
void layer_norm_backward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* mean,
                         const void* rstd, const void* dy, void* dx, void* dgamma, void* dbeta, cudaStream_t stream);
kernels::SoftmaxView softmax_view(const SoftmaxShape& s);
// The lookup, then (unless a graph is being captured: whoever replays it checks its tokens) the
// flag read back: an index outside [0, vocab) is an Error naming it and its position.
void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight, std::int64_t vocab,
                       std::int64_t width, void* y, int* flag, bool capturing, cudaStream_t stream);
// Row-major y[b] = op(a[b]) op(c[b]) is column-major y^T = op(c)^T op(a)^T: cuBLAS is given c first.
void matmul(cublasHandle_t blas, bool tf32, DType dtype, const MatmulShape& s, const void* a, const void* b, void* y);

// Fused attention (kernels' v1); a head wider than kernels::kMaxHeadDim is Unsupported, named.
void attention_forward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v, void* y,
                       void* lse, cudaStream_t stream);
// delta: batch_heads * queries f32 of scratch.
void attention_backward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                        const void* y, const void* lse, const void* dy, void* dq, void* dk, void* dv, float* delta,
                        cudaStream_t stream);

}  // namespace trainlab::cuda::transformer
