// 2-D convolution (cross-correlation, as PyTorch), NCHW or channels_last, with stride and zero
// padding; optionally with the bias and a ReLU fused into the same kernel call.
//   forward           y = relu?(conv(x, W) + b)
//   backward          dz = relu? ? dy * (y > 0) : dy
//                     dx = conv_transpose(dz, W)       (backward-data)
//                     dW = correlate(x, dz), db = sum(dz) over N, H, W   (backward-weights)
// The unfused conv2d(x, W, b) is conv2d(x, W) followed by a separate bias_add node.
#include "engine/core/autocast.h"
#include "engine/core/autograd.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

// The checks every convolution's forward makes on its (autocast) operands, naming `op`, and the
// shape they give, in x's layout.
Conv2dShape checked_shape(const std::string& op, const Tensor& x, const Tensor& w, const Tensor& b,
                          const Conv2dOptions& o) {
  ops_detail::check_compatible(op.c_str(), x, w);
  if (b.defined()) ops_detail::check_compatible(op.c_str(), x, b);
  ops_detail::check_floating(op.c_str(), x);
  ops_detail::check_rank(op.c_str(), "input", x, 4, "[N, C_in, H, W]");
  ops_detail::check_rank(op.c_str(), "weight", w, 4, "[C_out, C_in, kH, kW]");
  TL_CHECK(x.size(1) == w.size(1), op + ": input has " + std::to_string(x.size(1)) + " channels but weight " +
                                       shape_str(w.shape()) + " expects " + std::to_string(w.size(1)));
  TL_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)),
           op + ": bias must be [" + std::to_string(w.size(0)) + "], got " + (b.defined() ? shape_str(b.shape()) : ""));
  TL_CHECK(o.stride_h >= 1 && o.stride_w >= 1,
           op + ": stride must be >= 1, got " + std::to_string(o.stride_h) + "x" + std::to_string(o.stride_w));
  TL_CHECK(o.pad_h >= 0 && o.pad_w >= 0,
           op + ": padding must be >= 0, got " + std::to_string(o.pad_h) + "x" + std::to_string(o.pad_w));
  Conv2dShape s{x.size(0), x.size(1),  x.size(2),  x.size(3), w.size(0), w.size(2),
                w.size(3), o.stride_h, o.stride_w, o.pad_h,   o.pad_w};
  s.channels_last = x.memory_format() == MemoryFormat::channels_last;
  TL_CHECK(x.size(2) + 2 * o.pad_h >= s.kernel_h && x.size(3) + 2 * o.pad_w >= s.kernel_w,
           op + ": kernel " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
               " is larger than the padded input " + shape_str(x.shape()));
  return s;
}

Tensor conv2d_node(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, bool relu, const Conv2dOptions& o,
                   const char* name) {
  TL_SPAN("conv2d.forward");
  ops_detail::check_defined("conv2d", "input", x_in);
  ops_detail::check_defined("conv2d", "weight", w_in);
  const Tensor x = autocast_low(x_in), w = autocast_low(w_in);
  const Tensor b = b_in.defined() ? autocast_low(b_in) : Tensor();
  const Conv2dShape s = checked_shape("conv2d", x, w, b, o);
  const MemoryFormat format = x.memory_format();
  const Tensor sx = ops_detail::dense(x, format), sw = ops_detail::dense(w);
  const Tensor sb = b.defined() ? ops_detail::dense(b) : Tensor();
  Tensor y = Tensor::empty({s.batch, s.out_channels, s.out_h(), s.out_w()}, x.dtype(), x.backend(), format);
  x.backend().conv2d_forward(x.dtype(), s, sx.raw_data(), sw.raw_data(), sb.defined() ? sb.raw_data() : nullptr, relu,
                             y.raw_data());
  const Tensor saved_y = relu ? y.detach() : Tensor();
  const bool has_bias = b.defined();
  std::vector<Tensor> inputs{x, w};
  if (has_bias) inputs.push_back(b);
  return record(y, name, inputs, [=](const Tensor& g, const std::vector<bool>& needs) {
    Tensor dz = ops_detail::dense(g, format);
    Backend& be = dz.backend();
    Tensor dx, dw, db;
    bool bias_done = false;  // the bias gradient came out of the ReLU backward (a fused kernel)
    if (has_bias && needs[2]) db = Tensor::empty({s.out_channels}, dz.dtype(), be);
    if (relu) {
      Tensor masked = Tensor::empty(dz.shape(), dz.dtype(), be, format);
      const std::int64_t hw = s.out_h() * s.out_w();
      bias_done = be.relu_bias_backward(
          dz.dtype(), saved_y.raw_data(), dz.raw_data(), masked.raw_data(), db.defined() ? db.raw_data() : nullptr,
          s.channels_last ? s.batch * hw : s.batch, s.out_channels, s.channels_last ? 1 : hw);
      dz = masked;
    }
    if (needs[0]) {
      dx = Tensor::empty(sx.shape(), dz.dtype(), be, format);
      TL_SPAN("conv2d.backward_data");
      be.conv2d_backward_data(dz.dtype(), s, dz.raw_data(), sw.raw_data(), dx.raw_data());
    }
    if (needs[1] || (db.defined() && !bias_done)) {
      dw = Tensor::empty(sw.shape(), dz.dtype(), be);
      TL_SPAN("conv2d.backward_weights");
      be.conv2d_backward_weights(dz.dtype(), s, dz.raw_data(), sx.raw_data(), dw.raw_data(),
                                 db.defined() && !bias_done ? db.raw_data() : nullptr);
    }
    std::vector<Tensor> grads{dx, needs[1] ? dw : Tensor()};
    if (has_bias) grads.push_back(needs[2] ? db : Tensor());
    return grads;
  });
}

// Training's one-call block (FusedPattern::conv_block(true), Backend::conv2d_pool_forward): y and the pool's places;
// the backward gives the weight and bias gradients from them and the input (which needs none).
Tensor conv_pool_training_node(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dShape& s,
                               const Pool2dShape& p, MemoryFormat format) {
  TL_SPAN("conv2d_relu_max_pool2d.forward");
  Backend& be = x.backend();
  const Tensor sx = ops_detail::dense(x, x.memory_format()), sw = ops_detail::dense(w);
  const Tensor sb = b.defined() ? ops_detail::dense(b) : Tensor();
  Tensor y = Tensor::empty({p.batch, p.channels, p.out_h(), p.out_w()}, x.dtype(), be, format);
  const std::int64_t place_bytes = p.batch * p.channels * p.out_h() * p.out_w();
  const Tensor places = Tensor::empty({(place_bytes + 7) / 8}, DType::i64, be);  // bytes, 8-aligned
  be.conv2d_pool_forward(x.dtype(), s, p, sx.raw_data(), sw.raw_data(), sb.defined() ? sb.raw_data() : nullptr,
                         y.raw_data(), static_cast<std::uint8_t*>(places.raw_data()));
  const bool has_bias = b.defined();
  std::vector<Tensor> inputs{w};
  if (has_bias) inputs.push_back(b);
  return record(y, "conv2d_relu_max_pool2d", inputs, [=](const Tensor& g, const std::vector<bool>& needs) {
    const Tensor dy = ops_detail::dense(g, format);
    Backend& backend = dy.backend();
    Tensor dw = Tensor::empty(sw.shape(), dy.dtype(), backend);
    Tensor db = has_bias && needs[1] ? Tensor::empty({s.out_channels}, dy.dtype(), backend) : Tensor();
    backend.conv2d_pool_backward_weights(dy.dtype(), s, p, sx.raw_data(), dy.raw_data(),
                                         static_cast<const std::uint8_t*>(places.raw_data()), dw.raw_data(),
                                         db.defined() ? db.raw_data() : nullptr);
    std::vector<Tensor> grads{needs[0] ? dw : Tensor()};
    if (has_bias) grads.push_back(db);
    return grads;
  });
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dOptions& options) {
  return conv2d_node(x, weight, Tensor(), false, options, "conv2d");
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  return bias_add(conv2d(x, weight, options), bias);
}

Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu,
                    const Conv2dOptions& options) {
  return conv2d_node(x, weight, bias, relu, options, relu ? "conv2d_bias_relu" : "conv2d_bias");
}

Tensor conv2d_relu_max_pool2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dOptions& o,
                              const Pool2dOptions& pool, MemoryFormat format) {
  ops_detail::check_defined("conv2d_relu_max_pool2d", "input", x_in);
  ops_detail::check_defined("conv2d_relu_max_pool2d", "weight", w_in);
  auto composed = [&] { return max_pool2d_relu(conv2d_fused(x_in, w_in, b_in, false, o), pool).contiguous(format); };
  const bool grad = GradMode::enabled();
  const bool x_grad = grad && x_in.requires_grad();
  const bool needs_grad = x_grad || (grad && (w_in.requires_grad() || (b_in.defined() && b_in.requires_grad())));
  const bool two_by_two = pool.kernel_h == 2 && pool.kernel_w == 2 && (pool.stride_h == 0 || pool.stride_h == 2) &&
                          (pool.stride_w == 0 || pool.stride_w == 2) && pool.pad_h == 0 && pool.pad_w == 0;
  Backend& be = x_in.backend();
  if (x_grad || !two_by_two || x_in.dim() != 4 || w_in.dim() != 4) return composed();
  // A backend without the fused block at all composes before any cast or shape check.
  const DType low = autocast_dtype() != DType::f32 && x_in.dtype() == DType::f32 ? autocast_dtype() : x_in.dtype();
  const bool x_channels_last = x_in.memory_format() == MemoryFormat::channels_last;
  if (!be.supports_fused(FusedPattern::conv_block(needs_grad), low, x_channels_last).runs()) return composed();
  const Tensor x = autocast_low(x_in), w = autocast_low(w_in);
  const Tensor b = b_in.defined() ? autocast_low(b_in) : Tensor();
  const Conv2dShape s = checked_shape("conv2d_relu_max_pool2d", x, w, b, o);
  TL_CHECK(s.out_h() >= 2 && s.out_w() >= 2, "conv2d_relu_max_pool2d: the convolution's output " +
                                                 std::to_string(s.out_h()) + "x" + std::to_string(s.out_w()) +
                                                 " is smaller than the 2x2 pool");
  Pool2dShape p{s.batch, s.out_channels, s.out_h(), s.out_w(), 2, 2, 2, 2, 0, 0};
  p.channels_last = format == MemoryFormat::channels_last;
  p.relu = true;
  // Fused where the backend runs the block for these shapes: in training only where the input
  // needs no gradient (above), in inference wherever it fuses at all.
  if (!be.supports_fused(FusedPattern::conv_block(needs_grad), x.dtype(), s.channels_last, {&s, &p}).runs())
    return composed();
  if (needs_grad) return conv_pool_training_node(x, w, b, s, p, format);
  TL_SPAN("conv2d_relu_max_pool2d.forward");
  const MemoryFormat in_format = x.memory_format();
  const Tensor sx = ops_detail::dense(x, in_format), sw = ops_detail::dense(w);
  const Tensor sb = b.defined() ? ops_detail::dense(b) : Tensor();
  Tensor y = Tensor::empty({p.batch, p.channels, p.out_h(), p.out_w()}, x.dtype(), be, format);
  be.conv2d_pool_forward(x.dtype(), s, p, sx.raw_data(), sw.raw_data(), sb.defined() ? sb.raw_data() : nullptr,
                         y.raw_data(), nullptr);
  return y;
}

Tensor conv2d_batch_norm(const Tensor& x_in, const Tensor& w_in, const Tensor& gamma, const Tensor& beta,
                         const Tensor& running_mean, const Tensor& running_var, const Conv2dOptions& o, double eps,
                         const Tensor& residual_in, bool relu) {
  ops_detail::check_defined("conv2d_batch_norm", "input", x_in);
  ops_detail::check_defined("conv2d_batch_norm", "weight", w_in);
  auto composed = [&] {
    BatchNormOptions bn;
    bn.eps = eps;
    bn.training = false;
    return batch_norm(conv2d(x_in, w_in, o), gamma, beta, running_mean, running_var, bn, residual_in, relu);
  };
  const bool grad = GradMode::enabled();
  bool needs_grad = false;
  for (const Tensor* t : {&x_in, &w_in, &gamma, &beta, &residual_in})
    needs_grad = needs_grad || (grad && t->defined() && t->requires_grad());
  if (needs_grad || x_in.dim() != 4 || w_in.dim() != 4) return composed();
  Backend& be = x_in.backend();
  const DType low = autocast_dtype() != DType::f32 && x_in.dtype() == DType::f32 ? autocast_dtype() : x_in.dtype();
  const FusedPattern pattern =
      FusedPattern::conv_norm(residual_in.defined(), relu ? Activation::relu : Activation::none);
  if (!be.supports_fused(pattern, low, x_in.memory_format() == MemoryFormat::channels_last).runs()) return composed();
  TL_SPAN("conv2d_batch_norm.forward");
  const Tensor x = autocast_low(x_in), w = autocast_low(w_in);
  const Conv2dShape s = checked_shape("conv2d_batch_norm", x, w, Tensor(), o);
  const DType stat = batch_norm_stat_dtype(x.dtype());
  auto stat_tensor = [&](const Tensor& t, const char* what) {
    if (!t.defined()) return t;
    TL_CHECK(t.dim() == 1 && t.size(0) == s.out_channels, std::string("conv2d_batch_norm: ") + what + " must be [" +
                                                              std::to_string(s.out_channels) + "], got " +
                                                              shape_str(t.shape()));
    return ops_detail::dense(t.dtype() == stat ? t : t.to(stat));
  };
  TL_CHECK(running_mean.defined() && running_var.defined(),
           "conv2d_batch_norm: the running statistics are undefined (inference reads them)");
  const Tensor g = stat_tensor(gamma, "weight"), b = stat_tensor(beta, "bias");
  const Tensor rm = stat_tensor(running_mean, "running_mean"), rv = stat_tensor(running_var, "running_var");
  const MemoryFormat format = x.memory_format();
  const Shape out_shape{s.batch, s.out_channels, s.out_h(), s.out_w()};
  Tensor residual;
  if (residual_in.defined()) {
    TL_CHECK(residual_in.shape() == out_shape, "conv2d_batch_norm: residual " + shape_str(residual_in.shape()) +
                                                   " differs from the output " + shape_str(out_shape));
    residual = ops_detail::dense(residual_in.dtype() == x.dtype() ? residual_in : residual_in.to(x.dtype()), format);
  }
  const Tensor sx = ops_detail::dense(x, format), sw = ops_detail::dense(w);
  Tensor y = Tensor::empty(out_shape, x.dtype(), be, format);
  auto raw = [](const Tensor& t) -> const void* { return t.defined() ? t.raw_data() : nullptr; };
  be.conv2d_norm_forward(x.dtype(), s, sx.raw_data(), sw.raw_data(),
                         BatchNormFold{raw(g), raw(b), rm.raw_data(), rv.raw_data(), eps},
                         BatchNormEpilogue{raw(residual), relu}, y.raw_data());
  return y;
}

}  // namespace trainlab
