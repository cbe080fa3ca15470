// 2-D convolution (cross-correlation, as PyTorch), NCHW, with stride and zero padding.
// Forward y = conv(x, W); backward-data dx = conv_transpose(dy, W); backward-weights
// dW = correlate(x, dy). The bias is a separate bias_add node.
#include "engine/ops.h"
#include "engine/ops/common.h"

namespace trainlab {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dOptions& o) {
  TL_PROFILE_SCOPE("conv2d.forward");
  ops_detail::check_defined("conv2d", "input", x);
  ops_detail::check_defined("conv2d", "weight", weight);
  ops_detail::check_compatible("conv2d", x, weight);
  ops_detail::check_floating("conv2d", x);
  ops_detail::check_rank("conv2d", "input", x, 4, "[N, C_in, H, W]");
  ops_detail::check_rank("conv2d", "weight", weight, 4, "[C_out, C_in, kH, kW]");
  TL_CHECK(x.size(1) == weight.size(1), "conv2d: input has " + std::to_string(x.size(1)) + " channels but weight " +
                                            shape_str(weight.shape()) + " expects " + std::to_string(weight.size(1)));
  TL_CHECK(o.stride_h >= 1 && o.stride_w >= 1,
           "conv2d: stride must be >= 1, got " + std::to_string(o.stride_h) + "x" + std::to_string(o.stride_w));
  TL_CHECK(o.pad_h >= 0 && o.pad_w >= 0,
           "conv2d: padding must be >= 0, got " + std::to_string(o.pad_h) + "x" + std::to_string(o.pad_w));
  const Conv2dShape s{x.size(0),      x.size(1),  x.size(2),  x.size(3), weight.size(0), weight.size(2),
                      weight.size(3), o.stride_h, o.stride_w, o.pad_h,   o.pad_w};
  TL_CHECK(x.size(2) + 2 * o.pad_h >= s.kernel_h && x.size(3) + 2 * o.pad_w >= s.kernel_w,
           "conv2d: kernel " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
               " is larger than the padded input " + shape_str(x.shape()));
  const Tensor sx = ops_detail::dense(x), sw = ops_detail::dense(weight);
  Tensor y = Tensor::empty({s.batch, s.out_channels, s.out_h(), s.out_w()}, x.dtype(), x.backend());
  x.backend().conv2d_forward(x.dtype(), s, sx.raw_data(), sw.raw_data(), y.raw_data());
  return record(y, "conv2d", {x, weight}, [s, sx, sw](const Tensor& g, const std::vector<bool>& needs) {
    const Tensor dy = ops_detail::dense(g);
    Backend& be = dy.backend();
    Tensor dx, dw;
    if (needs[0]) {
      dx = Tensor::empty(sx.shape(), dy.dtype(), be);
      TL_PROFILE_SCOPE("conv2d.backward_data");
      be.conv2d_backward_data(dy.dtype(), s, dy.raw_data(), sw.raw_data(), dx.raw_data());
    }
    if (needs[1]) {
      dw = Tensor::empty(sw.shape(), dy.dtype(), be);
      TL_PROFILE_SCOPE("conv2d.backward_weights");
      be.conv2d_backward_weights(dy.dtype(), s, dy.raw_data(), sx.raw_data(), dw.raw_data());
    }
    return std::vector<Tensor>{dx, dw};
  });
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  return bias_add(conv2d(x, weight, options), bias);
}

}  // namespace trainlab
