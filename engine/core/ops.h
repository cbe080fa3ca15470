// The differentiable ops. Each lives in engine/core/ops/<op>.cpp with its forward and its backward
// side by side; shapes are checked here, arithmetic happens in the backend.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"

namespace trainlab {

// ---- elementwise (same shape, dtype and backend; no broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor mul_scalar(const Tensor& x, double scale);
Tensor add_scalar(const Tensor& x, double shift);
Tensor neg(const Tensor& x);
Tensor sum(const Tensor& x);   // all elements, to a 0-d tensor
Tensor mean(const Tensor& x);  // all elements, to a 0-d tensor

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(const Tensor& x, double s) { return mul_scalar(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul_scalar(x, s); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

// ---- layers ----
Tensor relu(const Tensor& x);

// x: [N, C, ...], bias: [C]; adds bias[c] along dimension 1.
Tensor bias_add(const Tensor& x, const Tensor& bias);

// x: [N, in], weight: [out, in] (PyTorch's layout) -> [N, out]; the bias, when given, is [out].
// linear(x, W, b) is two nodes (linear, then bias_add); linear_fused does the bias and, when
// `relu`, the ReLU in the same kernel call (oneDNN's fused bias and post-op).
Tensor linear(const Tensor& x, const Tensor& weight);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu);

struct Conv2dOptions {
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  static Conv2dOptions square(std::int64_t stride, std::int64_t padding) { return {stride, stride, padding, padding}; }
};
// x: [N, C_in, H, W], weight: [C_out, C_in, kH, kW] -> [N, C_out, outH, outW]; bias: [C_out].
// The output keeps the input's memory format (NCHW or channels_last). conv2d(x, W, b) is two
// nodes (conv2d, then bias_add); conv2d_fused does the bias and, when `relu`, the ReLU in the same
// kernel call (oneDNN's post-ops).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dOptions& options = {});
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options = {});
Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu,
                    const Conv2dOptions& options = {});

struct Pool2dOptions {
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 0, stride_w = 0;  // 0 means the kernel size, as in PyTorch
  std::int64_t pad_h = 0, pad_w = 0;        // at most half the kernel
  static Pool2dOptions square(std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0) {
    return {kernel, kernel, stride, stride, padding, padding};
  }
};
// x: [N, C, H, W] -> [N, C, outH, outW], in the input's memory format; the gradient goes to each
// window's first maximum.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options = {});
// relu(max_pool2d(x)), bit for bit, in one pass where the backend fuses the two (CPU backends).
Tensor max_pool2d_relu(const Tensor& x, const Pool2dOptions& options = {});

// A convolution block, relu(max_pool2d(conv2d_fused(x, weight, bias))), its output in `format`
// (which may differ from x's). Where no gradient is needed (grad mode off, or no input requires
// one) and the backend fuses it (Backend::supports_fused(FusedPattern::conv_block(false))), one call that reads x where
// it lies and keeps the convolution's output to itself, in the layout its convolution writes fastest: the same values
// up to that convolution's rounding. In training, where x needs no gradient (a network's first layer) and the backend
// fuses the shape (FusedPattern::conv_block(true)), the same forward keeping the pool's places, and a backward that
// gives the weight and bias gradients without the convolution's output or its gradient in memory. Else the composed
// ops, then a reorder to `format` when x's differs.
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& conv,
                              const Pool2dOptions& pool, MemoryFormat format);

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;  // the running statistics' update weight, as PyTorch's
  bool training = true;   // batch statistics (and the running ones updated); false: the running ones
};
// Batch norm over dimension 1 of x ([N, C, ...], either memory format; engine/core/ops/batch_norm.cpp):
// weight and bias ([C], may be undefined: no affine) and the running statistics ([C] buffers,
// updated in place in training; may be undefined in training: none kept) are in f32 (f64 for an
// f64 input) whatever x's dtype. `residual` (x's shape; may be undefined) is added after the
// affine, then a ReLU when `relu`: a residual block's tail, in batch norm's own passes where the
// backend fuses it (Backend::supports_fused, FusedPattern::norm), composed otherwise.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, const BatchNormOptions& options, const Tensor& residual = {},
                  bool relu = false);

// Inference's convolution and batch norm (eval: its running statistics), then the epilogue:
// batch_norm(conv2d(x, weight), ..., training false, residual, relu). One backend call where no
// gradient is needed and the backend folds the pattern (FusedPattern::conv_norm: the statistics
// folded into the convolution's weights and bias); else the ops composed.
Tensor conv2d_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& gamma, const Tensor& beta,
                         const Tensor& running_mean, const Tensor& running_var, const Conv2dOptions& options,
                         double eps, const Tensor& residual = {}, bool relu = false);

// x: [N, C, H, W] -> [N, C], the mean of each plane.
Tensor global_avg_pool2d(const Tensor& x);

// Inverted dropout with probability p in [0, 1) when `training` (the identity otherwise), its draws
// from the dropout stream (engine/core/rng.h).
Tensor dropout(const Tensor& x, double p, bool training);

// x: [N, C, H, W] -> [N, channels, ceil(H/stride), ceil(W/stride)]: x[:, :, ::stride, ::stride] in
// channels [before, before + C), zeros elsewhere (a residual network's parameter-free shortcut).
Tensor pad_channels(const Tensor& x, std::int64_t channels, std::int64_t stride, std::int64_t before);

// ---- a transformer's layers ----
// Layer norm over the last dimension of x ([..., width]; engine/core/ops/layer_norm.cpp): weight
// and bias are [width] (may be undefined: no affine), kept in f32 (f64 for an f64 input).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// GELU, the tanh approximation (GPT-2's; PyTorch's gelu(approximate='tanh')).
Tensor gelu(const Tensor& x);

// softmax(scale * x) over the last dimension; with `causal`, x is [..., queries, keys] scores and
// query q sees the keys j <= q + keys - queries (the others get 0).
Tensor softmax(const Tensor& x, double scale = 1.0, bool causal = false);

// indices (i64, any shape) -> indices.shape + [width]: rows of weight [vocab, width].
Tensor embedding(const Tensor& indices, const Tensor& weight);

// [..., m, k] x [..., k, n] -> [..., m, n], the same batch dimensions; a transposed view
// (t.transpose(-2, -1)) is read in place.
Tensor matmul(const Tensor& a, const Tensor& b);

// softmax(q k^T / sqrt(D), causal?) v in one backend call that never keeps the scores whole (flash
// attention's form; engine/core/ops/attention.cpp): q [B, H, T, D], k and v [B, H, S, D].
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
// The same on q, k and v packed as qkv [3, B, H, T, D] (keys = queries); its gradient one tensor.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, bool causal);

// Mean over the batch of -log softmax(logits)[label], computed stably (log-sum-exp).
// logits: [N, classes] floating; labels: [N] i64 in [0, classes). Returns a 0-d tensor.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);

}  // namespace trainlab
