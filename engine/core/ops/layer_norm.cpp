// Layer normalisation (Ba et al. 2016, PyTorch's LayerNorm over the last dimension):
//   forward    mean, var = over each row's `width` elements (biased); rstd = 1 / sqrt(var + eps)
//              y = (x - mean) rstd gamma + beta
//   backward   xhat = (x - mean) rstd;  g = dy gamma
//              dx = rstd (g - mean(g) - xhat mean(g xhat))     (means over the row)
//              dgamma = sum over rows of dy xhat;  dbeta = sum over rows of dy
// x is [..., width] in any floating dtype; gamma and beta ([width], may be undefined: no affine) and
// the saved statistics in f32 (f64 for an f64 input), as batch norm keeps them.
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

Tensor layer_norm_param(const Tensor& t, DType stat, std::int64_t width, const char* what) {
  if (!t.defined()) return t;
  TL_CHECK(t.dim() == 1 && t.size(0) == width, std::string("layer_norm: ") + what + " must be [" +
                                                   std::to_string(width) + "], got " + shape_str(t.shape()));
  TL_CHECK(is_floating(t.dtype()),
           std::string("layer_norm: ") + what + " must be floating, got " + dtype_name(t.dtype()));
  return t.dtype() == stat ? t : t.to(stat);
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps) {
  TL_SPAN("layer_norm.forward");
  ops_detail::check_defined("layer_norm", "input", x_in);
  ops_detail::check_floating("layer_norm", x_in);
  TL_CHECK(x_in.dim() >= 1 && x_in.size(x_in.dim() - 1) > 0,
           "layer_norm: input must be [..., width] with width > 0, got " + shape_str(x_in.shape()));
  TL_CHECK(eps > 0, "layer_norm: eps must be > 0, got " + std::to_string(eps));
  const DType dtype = x_in.dtype(), stat = batch_norm_stat_dtype(dtype);
  const std::int64_t width = x_in.size(x_in.dim() - 1);
  const Tensor w = layer_norm_param(weight, stat, width, "weight"), b = layer_norm_param(bias, stat, width, "bias");
  TL_CHECK(!w.defined() || &w.backend() == &x_in.backend(), "layer_norm: weight is on another backend than the input");
  TL_CHECK(!b.defined() || &b.backend() == &x_in.backend(), "layer_norm: bias is on another backend than the input");
  const Tensor x = ops_detail::dense(x_in);
  Backend& be = x.backend();
  const LayerNormShape s{x.numel() / width, width, eps};
  const Tensor sw = w.defined() ? ops_detail::dense(w) : Tensor(), sb = b.defined() ? ops_detail::dense(b) : Tensor();
  Tensor y = Tensor::empty(x.shape(), dtype, be);
  const Tensor mean = Tensor::empty({s.rows}, stat, be), rstd = Tensor::empty({s.rows}, stat, be);
  be.layer_norm_forward(dtype, s, x.raw_data(), sw.defined() ? sw.raw_data() : nullptr,
                        sb.defined() ? sb.raw_data() : nullptr, y.raw_data(), mean.raw_data(), rstd.raw_data());
  std::vector<Tensor> inputs{x_in};
  if (w.defined()) inputs.push_back(w);
  if (b.defined()) inputs.push_back(b);
  const bool has_w = w.defined(), has_b = b.defined();
  return record(y, "layer_norm", inputs, [=](const Tensor& g, const std::vector<bool>& needs) {
    const Tensor dy = ops_detail::dense(g);
    Backend& bk = dy.backend();
    Tensor dx = needs[0] ? Tensor::empty(dy.shape(), dy.dtype(), bk) : Tensor();
    const bool want_w = has_w && needs[1], want_b = has_b && needs[has_w ? 2 : 1];
    Tensor dw = want_w ? Tensor::empty({width}, stat, bk) : Tensor();
    Tensor db = want_b ? Tensor::empty({width}, stat, bk) : Tensor();
    bk.layer_norm_backward(dy.dtype(), s, x.raw_data(), has_w ? sw.raw_data() : nullptr, mean.raw_data(),
                           rstd.raw_data(), dy.raw_data(), dx.defined() ? dx.raw_data() : nullptr,
                           dw.defined() ? dw.raw_data() : nullptr, db.defined() ? db.raw_data() : nullptr);
    std::vector<Tensor> grads{dx};
    if (has_w) grads.push_back(dw);
    if (has_b) grads.push_back(db);
    return grads;
  });
}

}  // namespace trainlab
