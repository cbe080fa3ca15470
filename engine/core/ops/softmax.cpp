// Softmax over the last dimension, of scale * x, with attention's causal mask as an option:
//   forward    y[r, j] = exp(scale x[r, j] - max) / sum over the visible j' of exp(scale x[r, j'] - max)
//              (causal: in x's [..., queries, keys] blocks, query q sees the keys
//              j <= q + keys - queries; the others get 0)
//   backward   dx = scale y (dy - sum over the row of dy y)
// The backward reads the forward's output.
#include <cmath>

#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

Tensor softmax(const Tensor& x_in, double scale, bool causal) {
  TL_SPAN("softmax.forward");
  ops_detail::check_defined("softmax", "input", x_in);
  ops_detail::check_floating("softmax", x_in);
  TL_CHECK(x_in.dim() >= (causal ? 2 : 1) && x_in.size(x_in.dim() - 1) > 0,
           std::string("softmax: input must be ") + (causal ? "[..., queries, keys]" : "[..., n]") +
               " with a non-empty last dimension, got " + shape_str(x_in.shape()));
  TL_CHECK(std::isfinite(scale) && scale > 0, "softmax: scale must be finite and > 0, got " + std::to_string(scale));
  const Tensor x = ops_detail::dense(x_in);
  SoftmaxShape s;
  s.cols = x.size(x.dim() - 1);
  s.rows = x.numel() / s.cols;
  s.scale = scale;
  s.causal = causal;
  if (causal) {
    s.queries = x.size(x.dim() - 2);
    TL_CHECK(s.queries <= s.cols, "softmax: a causal mask needs at least as many keys as queries, got " +
                                      shape_str(x.shape()) + " (" + std::to_string(s.queries) + " queries, " +
                                      std::to_string(s.cols) + " keys)");
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.backend());
  x.backend().softmax_forward(x.dtype(), s, x.raw_data(), y.raw_data());
  const Tensor saved = y.detach();
  return record(y, causal ? "softmax_causal" : "softmax", {x_in}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g);
    Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.backend());
    dy.backend().softmax_backward(dy.dtype(), s, saved.raw_data(), dy.raw_data(), dx.raw_data());
    return std::vector<Tensor>{dx};
  });
}

}  // namespace trainlab
