// Global average pooling: the mean of each channel's plane, the head of a residual network.
//   forward    y[n, c] = sum over h, w of x[n, c, h, w] / (H W)
//   backward   dx[n, c, h, w] = dy[n, c] / (H W)
// x is [N, C, H, W] in either memory format; y is [N, C].
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

Tensor global_avg_pool2d(const Tensor& x_in) {
  TL_SPAN("global_avg_pool2d.forward");
  ops_detail::check_defined("global_avg_pool2d", "input", x_in);
  ops_detail::check_floating("global_avg_pool2d", x_in);
  ops_detail::check_rank("global_avg_pool2d", "input", x_in, 4, "[N, C, H, W]");
  TL_CHECK(x_in.size(2) > 0 && x_in.size(3) > 0,
           "global_avg_pool2d: the input's planes are empty: " + shape_str(x_in.shape()));
  const MemoryFormat format = x_in.memory_format();
  const Tensor x = ops_detail::dense(x_in, format);
  const std::int64_t n = x.size(0), c = x.size(1), spatial = x.size(2) * x.size(3);
  const bool channels_last = format == MemoryFormat::channels_last;
  Tensor y = Tensor::empty({n, c}, x.dtype(), x.backend());
  x.backend().global_avg_pool2d_forward(x.dtype(), n, c, spatial, channels_last, x.raw_data(), y.raw_data());
  const Shape shape = x.shape();
  return record(y, "global_avg_pool2d", {x_in}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g);
    Tensor dx = Tensor::empty(shape, dy.dtype(), dy.backend(), format);
    dy.backend().global_avg_pool2d_backward(dy.dtype(), n, c, spatial, channels_last, dy.raw_data(), dx.raw_data());
    return std::vector<Tensor>{dx};
  });
}

}  // namespace trainlab
