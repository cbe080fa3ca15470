// Max-pool 2-D, NCHW or channels_last (the output keeps the input's layout). The forward leaves a
// backend-defined workspace recording each window's first maximum; the backward routes dy to
// exactly those positions. max_pool2d_relu adds the ReLU in the same pass where the backend fuses
// it (a window whose maximum is <= 0: +0, and no position gets a gradient), else composes the two.
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

Tensor max_pool2d_node(const Tensor& x, const Pool2dOptions& o, bool relu) {
  TL_SPAN(relu ? "max_pool2d_relu.forward" : "max_pool2d.forward");
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
  const MemoryFormat format = x.memory_format();
  Pool2dShape s{x.size(0),  x.size(1), x.size(2), x.size(3), o.kernel_h,
                o.kernel_w, stride_h,  stride_w,  o.pad_h,   o.pad_w};
  s.channels_last = format == MemoryFormat::channels_last;
  s.relu = relu;
  TL_CHECK(s.in_h + 2 * s.pad_h >= s.kernel_h && s.in_w + 2 * s.pad_w >= s.kernel_w,
           "max_pool2d: input " + shape_str(x.shape()) + " is smaller than the kernel " + std::to_string(s.kernel_h) +
               "x" + std::to_string(s.kernel_w));
  const Tensor sx = ops_detail::dense(x, format);
  Backend& be = x.backend();
  Tensor y = Tensor::empty({s.batch, s.channels, s.out_h(), s.out_w()}, x.dtype(), be, format);
  const std::size_t workspace_bytes = be.max_pool2d_workspace_bytes(x.dtype(), s);
  const Tensor workspace =
      Tensor::empty({static_cast<std::int64_t>((workspace_bytes + 7) / 8)}, DType::i64, be);  // bytes, 8-aligned
  be.max_pool2d_forward(x.dtype(), s, sx.raw_data(), y.raw_data(), workspace.raw_data());
  const Shape in_shape = x.shape();
  return record(y, relu ? "max_pool2d_relu" : "max_pool2d", {x},
                [s, workspace, in_shape, format](const Tensor& g, const std::vector<bool>&) {
                  const Tensor dy = ops_detail::dense(g, format);
                  Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.backend(), format);
                  dy.backend().max_pool2d_backward(dy.dtype(), s, dy.raw_data(), workspace.raw_data(), dx.raw_data());
                  return std::vector<Tensor>{dx};
                });
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) { return max_pool2d_node(x, o, false); }

Tensor max_pool2d_relu(const Tensor& x, const Pool2dOptions& o) {
  if (x.defined() &&
      !x.backend()
           .supports_fused(FusedPattern::pool_relu(), x.dtype(), x.memory_format() == MemoryFormat::channels_last)
           .runs())
    return relu(max_pool2d_node(x, o, false));
  return max_pool2d_node(x, o, true);
}

}  // namespace trainlab
