// Linear: y = x W^T (+ bias), x: [N, in], W: [out, in].
// dx = dy W;  dW = dy^T x;  the bias is a separate bias_add node.
#include "engine/ops.h"
#include "engine/ops/common.h"

namespace trainlab {

Tensor linear(const Tensor& x, const Tensor& weight) {
  TL_PROFILE_SCOPE("linear.forward");
  ops_detail::check_defined("linear", "input", x);
  ops_detail::check_defined("linear", "weight", weight);
  ops_detail::check_compatible("linear", x, weight);
  ops_detail::check_floating("linear", x);
  ops_detail::check_rank("linear", "input", x, 2, "[N, in_features]");
  ops_detail::check_rank("linear", "weight", weight, 2, "[out_features, in_features]");
  TL_CHECK(x.size(1) == weight.size(1), "linear: input has " + std::to_string(x.size(1)) + " features but weight " +
                                            shape_str(weight.shape()) + " expects " + std::to_string(weight.size(1)));
  const std::int64_t batch = x.size(0), in = x.size(1), out = weight.size(0);
  const Tensor sx = ops_detail::dense(x), sw = ops_detail::dense(weight);
  Tensor y = Tensor::empty({batch, out}, x.dtype(), x.backend());
  x.backend().linear_forward(x.dtype(), sx.raw_data(), sw.raw_data(), y.raw_data(), batch, in, out);
  return record(y, "linear", {x, weight}, [=](const Tensor& g, const std::vector<bool>& needs) {
    const Tensor dy = ops_detail::dense(g);
    Backend& be = dy.backend();
    Tensor dx, dw;
    if (needs[0]) {
      dx = Tensor::empty({batch, in}, dy.dtype(), be);
      TL_PROFILE_SCOPE("linear.backward_data");
      be.linear_backward_data(dy.dtype(), dy.raw_data(), sw.raw_data(), dx.raw_data(), batch, in, out);
    }
    if (needs[1]) {
      dw = Tensor::empty({out, in}, dy.dtype(), be);
      TL_PROFILE_SCOPE("linear.backward_weights");
      be.linear_backward_weights(dy.dtype(), dy.raw_data(), sx.raw_data(), dw.raw_data(), batch, in, out);
    }
    return std::vector<Tensor>{dx, dw};
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return bias_add(linear(x, weight), bias); }

}  // namespace trainlab
