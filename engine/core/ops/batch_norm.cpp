// Batch normalisation (Ioffe and Szegedy 2015, PyTorch's BatchNorm semantics), optionally with a
// residual block's tail in the same passes:
//   forward (training)   mean, var = per channel over the batch (and space), biased
//                        y = relu?((x - mean) / sqrt(var + eps) * gamma + beta + residual?)
//                        running = (1 - momentum) running + momentum (mean, var * m / (m - 1))
//   forward (eval)       the running statistics in place of the batch's
//   backward             dz = relu? ? dy * (y > 0) : dy;  dresidual = dz
//                        dbeta = sum dz, dgamma = sum dz * xhat
//                        dx = gamma invstd (dz - dbeta / m - xhat dgamma / m)   (training)
//                        dx = gamma invstd dz                                    (eval)
// x is [N, C, ...] in its memory format; gamma, beta and the running statistics are [C] in f32
// (f64 for f64 input): mixed precision keeps them there, as oneDNN and cuDNN do. A recomputed
// forward (activation checkpointing) leaves the running statistics alone.
#include "engine/core/autograd.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

BatchNormShape view_of(const Tensor& x, double eps) {
  BatchNormShape s{x.size(0), x.size(1), 1, eps};
  for (std::int64_t d = 2; d < x.dim(); ++d) s.inner *= x.size(d);
  if (x.memory_format() == MemoryFormat::channels_last) {
    s.outer *= s.inner;
    s.inner = 1;
  }
  return s;
}

// A [C] tensor of the statistics dtype: the affine parameters cast (differentiably) when they are
// not in it; undefined when not given (no affine).
Tensor stat_param(const Tensor& t, DType stat, std::int64_t channels, const char* what) {
  if (!t.defined()) return t;
  TL_CHECK(t.dim() == 1 && t.size(0) == channels, std::string("batch_norm: ") + what + " must be [" +
                                                      std::to_string(channels) + "], got " + shape_str(t.shape()));
  TL_CHECK(is_floating(t.dtype()),
           std::string("batch_norm: ") + what + " must be floating, got " + dtype_name(t.dtype()));
  return t.dtype() == stat ? t : t.to(stat);
}

void check_running(const Tensor& t, DType stat, std::int64_t channels, const char* what) {
  TL_CHECK(t.defined(), std::string("batch_norm: ") + what + " is undefined (eval mode reads it)");
  TL_CHECK(t.dim() == 1 && t.size(0) == channels && t.is_contiguous(),
           std::string("batch_norm: ") + what + " must be a dense [" + std::to_string(channels) + "], got " +
               shape_str(t.shape()));
  TL_CHECK(t.dtype() == stat, std::string("batch_norm: ") + what + " must be " + dtype_name(stat) + " for " +
                                  "this input, got " + dtype_name(t.dtype()));
  TL_CHECK(!t.requires_grad(), std::string("batch_norm: ") + what + " is a buffer and must not require grad");
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, const BatchNormOptions& o, const Tensor& residual_in, bool relu) {
  TL_SPAN("batch_norm.forward");
  ops_detail::check_defined("batch_norm", "input", x_in);
  ops_detail::check_floating("batch_norm", x_in);
  TL_CHECK(x_in.dim() >= 2, "batch_norm: input must be [N, C, ...], got " + shape_str(x_in.shape()));
  TL_CHECK(o.eps > 0 && o.momentum >= 0 && o.momentum <= 1,
           "batch_norm: eps must be > 0 and momentum in [0, 1], got eps " + std::to_string(o.eps) + ", momentum " +
               std::to_string(o.momentum));
  const std::int64_t channels = x_in.size(1);
  const DType dtype = x_in.dtype(), stat = batch_norm_stat_dtype(dtype);
  Backend& be = x_in.backend();
  const bool channels_last = x_in.memory_format() == MemoryFormat::channels_last;
  // Composed where the backend does not take the epilogue in batch norm's own passes.
  if ((residual_in.defined() || relu) &&
      !be.supports_fused(FusedPattern::norm(residual_in.defined(), relu ? Activation::relu : Activation::none), dtype,
                         channels_last)
           .runs()) {
    Tensor y = batch_norm(x_in, weight, bias, running_mean, running_var, o);
    if (residual_in.defined()) y = add(y, residual_in);
    return relu ? trainlab::relu(y) : y;
  }
  const Tensor w = stat_param(weight, stat, channels, "weight"), b = stat_param(bias, stat, channels, "bias");
  TL_CHECK(!w.defined() || &w.backend() == &be, "batch_norm: weight is on another backend than the input");
  TL_CHECK(!b.defined() || &b.backend() == &be, "batch_norm: bias is on another backend than the input");
  const bool training = o.training;
  if (!training || running_mean.defined() || running_var.defined()) {
    check_running(running_mean, stat, channels, "running_mean");
    check_running(running_var, stat, channels, "running_var");
  }
  TL_CHECK(!training || x_in.numel() / channels > 1,
           "batch_norm: training needs more than one value per channel, got input " + shape_str(x_in.shape()));
  const MemoryFormat format = x_in.memory_format();
  const Tensor x = ops_detail::dense(x_in, format);
  Tensor residual;
  if (residual_in.defined()) {
    TL_CHECK(residual_in.shape() == x_in.shape(), "batch_norm: residual " + shape_str(residual_in.shape()) +
                                                      " differs from the input " + shape_str(x_in.shape()));
    TL_CHECK(&residual_in.backend() == &be, "batch_norm: residual is on another backend than the input");
    residual = residual_in.dtype() == dtype ? residual_in : residual_in.to(dtype);
  }
  const Tensor dense_residual = residual.defined() ? ops_detail::dense(residual, format) : Tensor();
  const BatchNormShape s = view_of(x, o.eps);
  Tensor y = Tensor::empty(x.shape(), dtype, be, format);
  const Tensor mean = Tensor::empty({channels}, stat, be), invstd = Tensor::empty({channels}, stat, be);
  const BatchNormEpilogue e{dense_residual.defined() ? dense_residual.raw_data() : nullptr, relu};
  auto raw = [](const Tensor& t) -> void* { return t.defined() ? t.raw_data() : nullptr; };
  if (training) {
    const bool update = running_mean.defined() && !RecomputeScope::active();
    be.batch_norm_forward_training(dtype, s, x.raw_data(), raw(w), raw(b), e, y.raw_data(), mean.raw_data(),
                                   invstd.raw_data(), update ? running_mean.raw_data() : nullptr,
                                   update ? running_var.raw_data() : nullptr, o.momentum);
  } else {
    be.batch_norm_forward_inference(dtype, s, x.raw_data(), raw(w), raw(b), running_mean.raw_data(),
                                    running_var.raw_data(), e, y.raw_data(), mean.raw_data(), invstd.raw_data());
  }
  // The ReLU's mask: from y where a residual was added; else the backward recomputes the
  // pre-activation's sign from x (no pass over y, nothing more kept).
  const Tensor saved_y = relu && residual.defined() ? y.detach() : Tensor();
  const Tensor saved_w = w.defined() ? w.detach() : Tensor(), saved_b = b.defined() ? b.detach() : Tensor();
  std::vector<Tensor> inputs{x_in};
  const int wi = w.defined() ? static_cast<int>(inputs.size()) : -1;
  if (w.defined()) inputs.push_back(w);
  const int bi = b.defined() ? static_cast<int>(inputs.size()) : -1;
  if (b.defined()) inputs.push_back(b);
  const int ri = residual.defined() ? static_cast<int>(inputs.size()) : -1;
  if (residual.defined()) inputs.push_back(residual);
  const std::size_t count = inputs.size();
  return record(y, relu ? (residual.defined() ? "batch_norm_add_relu" : "batch_norm_relu") : "batch_norm", inputs,
                [=](const Tensor& g, const std::vector<bool>& needs) {
                  TL_SPAN("batch_norm.backward");
                  const Tensor dy = ops_detail::dense(g, format);
                  Backend& backend = dy.backend();
                  auto wanted = [&](int i, const Shape& shape, DType type, MemoryFormat f) {
                    return i >= 0 && needs[static_cast<std::size_t>(i)] ? Tensor::empty(shape, type, backend, f)
                                                                        : Tensor();
                  };
                  const Tensor dx = wanted(0, x.shape(), dtype, format);
                  const Tensor dw = wanted(wi, {channels}, stat, MemoryFormat::contiguous);
                  const Tensor db = wanted(bi, {channels}, stat, MemoryFormat::contiguous);
                  const Tensor dr = wanted(ri, x.shape(), dtype, format);
                  const BatchNormSaved saved{x.raw_data(),      raw(saved_w), raw(saved_b), mean.raw_data(),
                                             invstd.raw_data(), training,     relu,         raw(saved_y)};
                  backend.batch_norm_backward(dtype, s, saved, dy.raw_data(), raw(dx), raw(dw), raw(db), raw(dr));
                  std::vector<Tensor> grads(count);
                  grads[0] = dx;
                  if (wi >= 0) grads[static_cast<std::size_t>(wi)] = dw;
                  if (bi >= 0) grads[static_cast<std::size_t>(bi)] = db;
                  if (ri >= 0) grads[static_cast<std::size_t>(ri)] = dr;
                  return grads;
                });
}

}  // namespace trainlab
