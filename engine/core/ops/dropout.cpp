// Dropout (inverted, as PyTorch's): in training each element is dropped with probability p and
// the kept ones scaled by 1 / (1 - p), so evaluation is the identity.
//   forward    mask = draw(seed, offset + i) >= p's threshold;  y = x * mask / (1 - p)
//   backward   dx = dy * mask / (1 - p)
// The draws come from the dropout stream (engine/core/rng.h: seeded by the run, kept by
// checkpoints, replayed by recomputation), counter-based, so every backend drops the same elements.
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"
#include "engine/core/rng.h"

namespace trainlab {

Tensor dropout(const Tensor& x_in, double p, bool training) {
  ops_detail::check_defined("dropout", "input", x_in);
  ops_detail::check_floating("dropout", x_in);
  TL_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got " + std::to_string(p));
  if (!training || p == 0) return x_in;
  TL_SPAN("dropout.forward");
  const MemoryFormat format = x_in.memory_format();
  const Tensor x = ops_detail::dense(x_in, format);
  Backend& be = x.backend();
  const std::int64_t n = x.numel();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), be, format);
  const Tensor mask = Tensor::empty({(n + 7) / 8}, DType::i64, be);  // one byte per element, 8-aligned
  CounterStream& stream = dropout_stream();
  be.dropout_forward(x.dtype(), x.raw_data(), y.raw_data(), static_cast<std::uint8_t*>(mask.raw_data()), n,
                     DropoutDraw{p, stream.seed, stream.offset});
  stream.offset += static_cast<std::uint64_t>(n);
  const double scale = 1.0 / (1.0 - p);
  return record(y, "dropout", {x_in}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g, format);
    Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.backend(), format);
    dy.backend().dropout_backward(dy.dtype(), dy.raw_data(), static_cast<const std::uint8_t*>(mask.raw_data()),
                                  dx.raw_data(), n, scale);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace trainlab
