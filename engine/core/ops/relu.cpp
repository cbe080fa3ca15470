// ReLU: y = max(x, 0);  dx = dy * (y > 0). The backward reads the saved output, not the input.
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

Tensor relu(const Tensor& x) {
  TL_SPAN("relu.forward");
  ops_detail::check_defined("relu", "input", x);
  ops_detail::check_floating("relu", x);
  const MemoryFormat format = x.memory_format();  // elementwise: any dense layout, kept
  const Tensor sx = ops_detail::dense(x, format);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.backend(), format);
  x.backend().relu_forward(x.dtype(), sx.raw_data(), y.raw_data(), y.numel());
  const Tensor saved_y = y.detach();
  return record(y, "relu", {x}, [saved_y, format](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g, format);
    Tensor grad = Tensor::empty(saved_y.shape(), saved_y.dtype(), saved_y.backend(), format);
    saved_y.backend().relu_backward(saved_y.dtype(), saved_y.raw_data(), dy.raw_data(), grad.raw_data(), grad.numel());
    return std::vector<Tensor>{grad};
  });
}

}  // namespace trainlab
