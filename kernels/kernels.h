// Hand-written CUDA kernels for the cuda backend (backends/cuda). Host-side launchers: every
// function enqueues its kernel(s) on `stream` and returns; none synchronises. Pointers are device
// pointers. dtypes: f32, bf16 and f16 storage; arithmetic and accumulation in f32.
//
// As llm.c keeps numbered versions, a kernel that has a faster form keeps its first, plain one as
// `_v1` (one thread per output, no shared memory, the obviously-correct version); the backend
// uses the latest; tests/backends/cuda_kernels_test.cpp checks every version against host computations
// (a GPU test: skipped where there is no GPU, and not yet run on one).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/dtype.h"

namespace trainlab::kernels {

// Throws trainlab::Error naming the kernel when its launch failed (cudaGetLastError).
void check_launch(const char* kernel);

// ---- elementwise ----
// fill and cast also take f64 (and fill i64): the engine reads values back through f64.
void fill(DType dtype, void* y, std::int64_t n, double value, cudaStream_t stream);
void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, cudaStream_t stream);
// Gradient compression (comm/, over NCCL): dst = dst_dtype(float(src) * scale), one rounding; in f64
// when both are f64. Bit for bit the host's Communicator::convert.
void convert_scaled(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n, double scale,
                    cudaStream_t stream);
// op: 0 add, 1 sub, 2 mul, 3 div
void binary(int op, DType dtype, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream);
void affine(DType dtype, const void* x, void* y, std::int64_t n, float scale, float shift, cudaStream_t stream);
void axpy(DType dtype, std::int64_t n, float alpha, const void* x, void* y, cudaStream_t stream);
// The ring all-reduce's reduction (comm/ring_allreduce.cpp, over NCCL): y = y + x, or
// (y + x) * scale when scale != 1, in the host ring's arithmetic (bf16/f16 through f32, f32 and f64
// in their own type), so the ring is bit for bit the same on the host and on the device.
void ring_reduce(DType dtype, void* y, const void* x, std::int64_t n, double scale, cudaStream_t stream);
// Up to 8 dimensions; strides and offsets in elements; any dtype (it moves bits).
void copy_strided(DType dtype, const void* src, const std::int64_t* shape, const std::int64_t* src_strides,
                  std::int64_t src_offset, void* dst, const std::int64_t* dst_strides, std::int64_t dst_offset,
                  int dims, cudaStream_t stream);

// ---- reductions: out[0] = sum of x (f32 accumulation; the output in `dtype`) ----
void sum_v1(DType dtype, const void* x, std::int64_t n, void* out, float* scratch, cudaStream_t stream);
void sum(DType dtype, const void* x, std::int64_t n, void* out, float* scratch, cudaStream_t stream);
// The scratch `sum` needs (f32 elements).
std::int64_t sum_scratch_elements(std::int64_t n);

// ---- ReLU and bias ----
void relu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream);
void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n, cudaStream_t stream);
// y = x + bias[c] (then ReLU when relu) over [outer, channels, inner]; in place allowed (y == x).
void bias_relu_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer, std::int64_t channels,
                       std::int64_t inner, bool relu, cudaStream_t stream);
// dbias[c] = sum of dy over outer and inner: v1 one thread per channel; the current version the
// tiles of relu_bias_backward below (coalesced in both layouts: along the channels for inner == 1,
// the linear and channels_last case), with its per-chunk partial sums in `scratch`
// (relu_bias_backward_scratch_elements f32) added in chunk order. An empty batch (outer or inner
// 0) writes a zero gradient and launches nothing.
void bias_backward_v1(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                      std::int64_t inner, cudaStream_t stream);
void bias_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                   std::int64_t inner, float* scratch, cudaStream_t stream);
// The fused layers' backward through ReLU and bias in one pass: dx = dy * (y > 0) and
// dbias[c] = sum of dx over outer and inner. v1 one thread per channel; the current version a 2-D
// grid (channel tiles x chunks of outer, coalesced in both layouts) writing per-chunk partial sums
// to `scratch` (relu_bias_backward_scratch_elements f32), added in chunk order by a second kernel.
void relu_bias_backward_v1(DType dtype, const void* y, const void* dy, void* dx, void* dbias, std::int64_t outer,
                           std::int64_t channels, std::int64_t inner, cudaStream_t stream);
std::int64_t relu_bias_backward_scratch_elements(std::int64_t outer, std::int64_t channels, std::int64_t inner);
void relu_bias_backward(DType dtype, const void* y, const void* dy, void* dx, void* dbias, std::int64_t outer,
                        std::int64_t channels, std::int64_t inner, float* scratch, cudaStream_t stream);

// ---- max-pool over [N, C, H, W], NCHW or channels_last, the CPU backends' rule: the first maximum
// in window order wins, a NaN beats any number (it propagates), the winner is copied bit for bit;
// a window entirely in the padding gives -inf. The forward writes each output's argmax (ih * W + iw
// in its plane; -1 for an all-padding window) to `argmax`; the backward routes each gradient to it:
// every input element gathers, in window order, the gradients of the windows it won (deterministic,
// no atomics; exactly dy where windows do not overlap). One thread per output / per input.
struct MaxPoolShape {
  std::int64_t batch, channels, in_h, in_w, out_h, out_w;
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  bool channels_last;
};
void max_pool2d_forward(DType dtype, const MaxPoolShape& shape, const void* x, void* y, std::int32_t* argmax,
                        cudaStream_t stream);
void max_pool2d_backward(DType dtype, const MaxPoolShape& shape, const void* dy, const std::int32_t* argmax, void* dx,
                         cudaStream_t stream);

// ---- softmax cross-entropy (rows of `classes` logits; loss = mean over the batch) ----
// A label outside [0, classes) sets *bad_label (device int) to 1 + its row; the caller checks it.
void softmax_cross_entropy_forward_v1(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, void* probs, void* loss, float* row_losses, int* bad_label,
                                      cudaStream_t stream);
void softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                   std::int64_t classes, void* probs, void* loss, float* row_losses, int* bad_label,
                                   cudaStream_t stream);
void softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                    std::int64_t classes, const void* dloss, void* dlogits, cudaStream_t stream);

// ---- batch norm over the [outer, channels, inner] view (backends/backend.h, BatchNormShape), the
// statistics and affine parameters in f32; `scratch` is 3 * channels f32 (the per-channel scale and
// shift of the apply pass, or dx's coefficients), used by the launches of one call. A block per
// channel sums (block_sum's fixed order), then a thread per element. ----
struct BatchNormView {
  std::int64_t outer, channels, inner;
  double eps;
};
void batch_norm_forward_training(DType dtype, const BatchNormView& v, const void* x, const float* gamma,
                                 const float* beta, const void* residual, bool relu, void* y, float* mean,
                                 float* invstd, float* running_mean, float* running_var, float momentum, float* scratch,
                                 cudaStream_t stream);
void batch_norm_forward_inference(DType dtype, const BatchNormView& v, const void* x, const float* gamma,
                                  const float* beta, const float* running_mean, const float* running_var,
                                  const void* residual, bool relu, void* y, float* mean, float* invstd, float* scratch,
                                  cudaStream_t stream);
// relu: the epilogue's ReLU, its sign from y where given (a residual was added), else recomputed
// from x by the saved statistics' scale and shift. scratch: 5 * channels f32 here.
void batch_norm_backward(DType dtype, const BatchNormView& v, const void* x, const void* dy, const void* y, bool relu,
                         const float* gamma, const float* beta, const float* mean, const float* invstd,
                         bool batch_stats, void* dx, float* dgamma, float* dbeta, void* dresidual, float* scratch,
                         cudaStream_t stream);

// ---- global average pooling over [N, C, H, W] (either layout) to [N, C]: a thread per output ----
void global_avg_pool2d_forward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                               bool channels_last, const void* x, void* y, cudaStream_t stream);
void global_avg_pool2d_backward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                bool channels_last, const void* dy, void* dx, cudaStream_t stream);

// ---- dropout: element i kept where counter_draw(seed, offset + i) >= dropout_threshold(p)
// (backends/counter_rng.h: the CPU loops' bits), y = x / (1 - p) there ----
void dropout_forward(DType dtype, const void* x, void* y, std::uint8_t* mask, std::int64_t n, double p,
                     std::uint64_t seed, std::uint64_t offset, cudaStream_t stream);
void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float scale,
                      cudaStream_t stream);

// ---- a transformer's layers (transformer_kernels.cu; the contracts of backends/backend.h's
// layer_norm_*, gelu_*, softmax_*, embedding_*), the statistics and affine parameters in f32 ----
// Layer norm: a block per row (block_sum's order); dgamma and dbeta a thread per column over the
// rows in order.
void layer_norm_forward(DType dtype, std::int64_t rows, std::int64_t width, double eps, const void* x,
                        const float* gamma, const float* beta, void* y, float* mean, float* rstd, cudaStream_t stream);
void layer_norm_backward(DType dtype, std::int64_t rows, std::int64_t width, const void* x, const float* gamma,
                         const float* mean, const float* rstd, const void* dy, void* dx, float* dgamma, float* dbeta,
                         cudaStream_t stream);
void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream);
void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream);
// Softmax of scale * x over each row, a block per row; with causal, row r (query r % queries) sees
// the keys j <= r % queries + cols - queries.
struct SoftmaxView {
  std::int64_t rows, cols;
  float scale;
  bool causal;
  std::int64_t queries;
};
void softmax_forward(DType dtype, const SoftmaxView& s, const void* x, void* y, cudaStream_t stream);
void softmax_backward(DType dtype, const SoftmaxView& s, const void* y, const void* dy, void* dx, cudaStream_t stream);
// An index outside [0, vocab) sets *bad_index (device int) to 1 + its position; the caller checks.
void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight, std::int64_t vocab,
                       std::int64_t width, void* y, int* bad_index, cudaStream_t stream);
// `acc`: vocab * width f32 of scratch (the sums before rounding).
void embedding_backward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* dy, std::int64_t vocab,
                        std::int64_t width, void* dweight, float* acc, cudaStream_t stream);

// Fused attention, v1 (a thread per query row for the forward and dq, per key row for dk and dv;
// the scores recomputed, never stored): q, y [batch_heads, queries, head_dim], k, v [batch_heads,
// keys, head_dim]; lse [batch_heads, queries] f32; head_dim <= kMaxHeadDim (the caller checks).
constexpr std::int64_t kMaxHeadDim = 256;
struct AttentionView {
  std::int64_t batch_heads, queries, keys, head_dim;
  float scale;
  bool causal;
};
void attention_forward(DType dtype, const AttentionView& s, const void* q, const void* k, const void* v, void* y,
                       float* lse, cudaStream_t stream);
// delta: batch_heads * queries f32 of scratch (the row sums of dy * y).
void attention_backward(DType dtype, const AttentionView& s, const void* q, const void* k, const void* v, const void* y,
                        const float* lse, const void* dy, void* dq, void* dk, void* dv, float* delta,
                        cudaStream_t stream);

// ---- optimisers, PyTorch semantics (see backends/backend.h: SgdStep, AdamWStep) ----
// `working` (may be null): a bf16/f16 copy of the updated parameter, written in the same pass
// (the f32-master to working-copy cast fused into the step).
void sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer, float lr,
              float momentum, float dampening, float weight_decay, bool nesterov, bool first_step, DType working_dtype,
              void* working, cudaStream_t stream);
void adamw_step(DType dtype, std::int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, float lr,
                float beta1, float beta2, float eps, float weight_decay, std::int64_t step, DType working_dtype,
                void* working, cudaStream_t stream);

// ---- the whole model in one launch: `slots` is a device array of `count` slots; grid.y walks the
// slots, grid.x the elements of the largest (max_n). Per slot: SGD's first_step, AdamW's step, and
// `working` (may be null): the updated parameter in working_dtype (bf16/f16), written in the same
// pass (the f32-master to working-copy cast fused into the step). ----
struct MultiSlot {
  void* param;
  const void* grad;
  void* state1;
  void* state2;
  std::int64_t n;
  int first_step;
  std::int64_t step;
  void* working;
};
void sgd_step_multi(DType dtype, const MultiSlot* slots, int count, std::int64_t max_n, float lr, float momentum,
                    float dampening, float weight_decay, bool nesterov, DType working_dtype, cudaStream_t stream);
void adamw_step_multi(DType dtype, const MultiSlot* slots, int count, std::int64_t max_n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, DType working_dtype, cudaStream_t stream);

// ---- the f16 loss scaler: x *= inv_scale in place, and *found_inf = 1 if any result is not finite ----
void unscale_and_check(DType dtype, void* x, std::int64_t n, float inv_scale, int* found_inf, cudaStream_t stream);

}  // namespace trainlab::kernels
