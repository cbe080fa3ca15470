// Max-pool 2-D, NCHW. Forward keeps each window's argmax (its offset in the input plane);
// backward routes dy to exactly those positions.
#include "engine/ops.h"
#include "engine/ops/common.h"

namespace trainlab {

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) {
  TL_PROFILE_SCOPE("max_pool2d.forward");
  ops_detail::check_defined("max_pool2d", "input", x);
  ops_detail::check_floating("max_pool2d", x);
  ops_detail::check_rank("max_pool2d", "input", x, 4, "[N, C, H, W]");
  const std::int64_t stride_h = o.stride_h == 0 ? o.kernel_h : o.stride_h;
  const std::int64_t stride_w = o.stride_w == 0 ? o.kernel_w : o.stride_w;
  TL_CHECK(o.kernel_h >= 1 && o.kernel_w >= 1,
           "max_pool2d: kernel must be >= 1, got " + std::to_string(o.kernel_h) + "x" + std::to_string(o.kernel_w));
  TL_CHECK(stride_h >= 1 && stride_w >= 1, "max_pool2d: stride must be >= 0 (0 = kernel size)");
  TL_CHECK(o.pad_h >= 0 && o.pad_w >= 0 && 2 * o.pad_h <= o.kernel_h && 2 * o.pad_w <= o.kernel_w,
           "max_pool2d: padding " + std::to_string(o.pad_h) + "x" + std::to_string(o.pad_w) +
               " must be between 0 and half the kernel " + std::to_string(o.kernel_h) + "x" +
               std::to_string(o.kernel_w));
  const Pool2dShape s{x.size(0),  x.size(1), x.size(2), x.size(3), o.kernel_h,
                      o.kernel_w, stride_h,  stride_w,  o.pad_h,   o.pad_w};
  TL_CHECK(s.in_h + 2 * s.pad_h >= s.kernel_h && s.in_w + 2 * s.pad_w >= s.kernel_w,
           "max_pool2d: input " + shape_str(x.shape()) + " is smaller than the kernel " + std::to_string(s.kernel_h) +
               "x" + std::to_string(s.kernel_w));
  const Tensor sx = ops_detail::dense(x);
  Tensor y = Tensor::empty({s.batch, s.channels, s.out_h(), s.out_w()}, x.dtype(), x.backend());
  Tensor indices = Tensor::empty(y.shape(), DType::i64, x.backend());
  x.backend().max_pool2d_forward(x.dtype(), s, sx.raw_data(), y.raw_data(),
                                 static_cast<std::int64_t*>(indices.raw_data()));
  const Shape in_shape = x.shape();
  return record(y, "max_pool2d", {x}, [s, indices, in_shape](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g);
    Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.backend());
    dy.backend().max_pool2d_backward(dy.dtype(), s, dy.raw_data(), static_cast<const std::int64_t*>(indices.raw_data()),
                                     dx.raw_data());
    return std::vector<Tensor>{dx};
  });
}

}  // namespace trainlab
