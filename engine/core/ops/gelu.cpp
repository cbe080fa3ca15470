// GELU, the tanh approximation GPT-2 uses (Hendrycks and Gimpel 2016; PyTorch's
// gelu(approximate='tanh')):
//   forward    y = x/2 (1 + tanh(k (x + a x^3))),  k = sqrt(2/pi), a = 0.044715
//   backward   dx = dy (1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3 a x^2)),  t = tanh(k (x + a x^3))
// The backward reads the forward's input.
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

Tensor gelu(const Tensor& x_in) {
  TL_SPAN("gelu.forward");
  ops_detail::check_defined("gelu", "input", x_in);
  ops_detail::check_floating("gelu", x_in);
  const MemoryFormat format = ops_detail::elementwise_format(x_in);
  const Tensor x = ops_detail::dense(x_in, format);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.backend(), format);
  x.backend().gelu_forward(x.dtype(), x.raw_data(), y.raw_data(), x.numel());
  return record(y, "gelu", {x_in}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g, format);
    Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.backend(), format);
    dy.backend().gelu_backward(dy.dtype(), x.raw_data(), dy.raw_data(), dx.raw_data(), dy.numel());
    return std::vector<Tensor>{dx};
  });
}

}  // namespace trainlab
