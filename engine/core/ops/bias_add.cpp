// Bias add along dimension 1: y[n, c, ...] = x[n, c, ...] + bias[c].
// dx = dy;  dbias[c] = sum of dy over every dimension but 1.
#include "engine/core/autocast.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

Tensor bias_add(const Tensor& x, const Tensor& bias_in) {
  TL_SPAN("bias_add.forward");
  ops_detail::check_defined("bias_add", "input", x);
  ops_detail::check_defined("bias_add", "bias", bias_in);
  // Under autocast an f32 bias joins a low-precision activation in its dtype.
  const Tensor bias = autocast_enabled() && bias_in.dtype() == DType::f32 ? bias_in.to(x.dtype()) : bias_in;
  ops_detail::check_compatible("bias_add", x, bias);
  ops_detail::check_floating("bias_add", x);
  TL_CHECK(x.dim() >= 2, "bias_add: input must have at least 2 dimensions [N, C, ...], got " + shape_str(x.shape()));
  TL_CHECK(bias.dim() == 1 && bias.size(0) == x.size(1), "bias_add: bias must be [" + std::to_string(x.size(1)) +
                                                             "] for input " + shape_str(x.shape()) + ", got " +
                                                             shape_str(bias.shape()));
  // Memory as [outer, channels, inner]: NCHW is [N, C, H*W]; channels_last is [N*H*W, C, 1].
  const MemoryFormat format = x.memory_format();
  const std::int64_t channels = x.size(1);
  const std::int64_t rest = x.numel() / std::max<std::int64_t>(1, x.size(0) * channels);
  const std::int64_t outer = format == MemoryFormat::channels_last ? x.size(0) * rest : x.size(0);
  const std::int64_t inner = format == MemoryFormat::channels_last ? 1 : rest;
  const Tensor sx = ops_detail::dense(x, format), sb = ops_detail::dense(bias);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.backend(), format);
  x.backend().bias_add_forward(x.dtype(), sx.raw_data(), sb.raw_data(), y.raw_data(), outer, channels, inner);
  return record(y, "bias_add", {x, bias}, [=](const Tensor& g, const std::vector<bool>& needs) {
    Tensor dbias;
    if (needs[1]) {
      const Tensor dy = ops_detail::dense(g, format);
      dbias = Tensor::empty({channels}, g.dtype(), g.backend());
      g.backend().bias_add_backward(g.dtype(), dy.raw_data(), dbias.raw_data(), outer, channels, inner);
    }
    return std::vector<Tensor>{needs[0] ? g : Tensor(), dbias};
  });
}

}  // namespace trainlab
