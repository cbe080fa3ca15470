// Bias add along dimension 1: y[n, c, ...] = x[n, c, ...] + bias[c].
// dx = dy;  dbias[c] = sum of dy over every dimension but 1.
#include "engine/ops.h"
#include "engine/ops/common.h"

namespace trainlab {

Tensor bias_add(const Tensor& x, const Tensor& bias) {
  TL_PROFILE_SCOPE("bias_add.forward");
  ops_detail::check_defined("bias_add", "input", x);
  ops_detail::check_defined("bias_add", "bias", bias);
  ops_detail::check_compatible("bias_add", x, bias);
  ops_detail::check_floating("bias_add", x);
  TL_CHECK(x.dim() >= 2, "bias_add: input must have at least 2 dimensions [N, C, ...], got " + shape_str(x.shape()));
  TL_CHECK(bias.dim() == 1 && bias.size(0) == x.size(1), "bias_add: bias must be [" + std::to_string(x.size(1)) +
                                                             "] for input " + shape_str(x.shape()) + ", got " +
                                                             shape_str(bias.shape()));
  const std::int64_t outer = x.size(0), channels = x.size(1),
                     inner = x.numel() / std::max<std::int64_t>(1, outer * channels);
  const Tensor dx = ops_detail::dense(x), db = ops_detail::dense(bias);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.backend());
  x.backend().bias_add_forward(x.dtype(), dx.raw_data(), db.raw_data(), y.raw_data(), outer, channels, inner);
  return record(y, "bias_add", {x, bias}, [=](const Tensor& g, const std::vector<bool>& needs) {
    Tensor dbias;
    if (needs[1]) {
      const Tensor dy = ops_detail::dense(g);
      dbias = Tensor::empty({channels}, g.dtype(), g.backend());
      g.backend().bias_add_backward(g.dtype(), dy.raw_data(), dbias.raw_data(), outer, channels, inner);
    }
    return std::vector<Tensor>{needs[0] ? g : Tensor(), dbias};
  });
}

}  // namespace trainlab
