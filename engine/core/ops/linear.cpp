// Linear: y = relu?(x W^T + b), x: [N, in], W: [out, in]; the bias and ReLU fused into the
// kernel call in linear_fused, a separate bias_add node in linear(x, W, b).
//   backward  dz = relu? ? dy * (y > 0) : dy;  dx = dz W;  dW = dz^T x;  db = sum(dz) over N
#include "engine/core/autocast.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

Tensor linear_node(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, bool relu, const char* name) {
  TL_SPAN("linear.forward");
  ops_detail::check_defined("linear", "input", x_in);
  ops_detail::check_defined("linear", "weight", w_in);
  const Tensor x = autocast_low(x_in), w = autocast_low(w_in);
  const Tensor b = b_in.defined() ? autocast_low(b_in) : Tensor();
  ops_detail::check_compatible("linear", x, w);
  if (b.defined()) ops_detail::check_compatible("linear", x, b);
  ops_detail::check_floating("linear", x);
  ops_detail::check_rank("linear", "input", x, 2, "[N, in_features]");
  ops_detail::check_rank("linear", "weight", w, 2, "[out_features, in_features]");
  TL_CHECK(x.size(1) == w.size(1), "linear: input has " + std::to_string(x.size(1)) + " features but weight " +
                                       shape_str(w.shape()) + " expects " + std::to_string(w.size(1)));
  TL_CHECK(
      !b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)),
      "linear: bias must be [" + std::to_string(w.size(0)) + "], got " + (b.defined() ? shape_str(b.shape()) : ""));
  const std::int64_t batch = x.size(0), in = x.size(1), out = w.size(0);
  const Tensor sx = ops_detail::dense(x), sw = ops_detail::dense(w);
  const Tensor sb = b.defined() ? ops_detail::dense(b) : Tensor();
  Tensor y = Tensor::empty({batch, out}, x.dtype(), x.backend());
  // When the backward will need dx = dz W, the weight as the backend prepared it for the forward is
  // kept for it (one reorder a step instead of two on the onednn backend).
  std::shared_ptr<const PreparedWeight> kept;
  if (GradMode::enabled() && x.requires_grad())
    kept = x.backend().linear_forward_keeping_weight(x.dtype(), sx.raw_data(), sw.raw_data(),
                                                     sb.defined() ? sb.raw_data() : nullptr, relu, y.raw_data(), batch,
                                                     in, out);
  else
    x.backend().linear_forward(x.dtype(), sx.raw_data(), sw.raw_data(), sb.defined() ? sb.raw_data() : nullptr, relu,
                               y.raw_data(), batch, in, out);
  const Tensor saved_y = relu ? y.detach() : Tensor();
  const bool has_bias = b.defined();
  std::vector<Tensor> inputs{x, w};
  if (has_bias) inputs.push_back(b);
  return record(y, name, inputs, [=](const Tensor& g, const std::vector<bool>& needs) {
    Tensor dz = ops_detail::dense(g);
    Backend& be = dz.backend();
    Tensor dx, dw, db;
    bool bias_done = false;  // the bias gradient came out of the ReLU backward (a fused kernel)
    if (has_bias && needs[2]) db = Tensor::empty({out}, dz.dtype(), be);
    if (relu) {
      Tensor masked = Tensor::empty(dz.shape(), dz.dtype(), be);
      bias_done = be.relu_bias_backward(dz.dtype(), saved_y.raw_data(), dz.raw_data(), masked.raw_data(),
                                        db.defined() ? db.raw_data() : nullptr, batch, out, 1);
      dz = masked;
    }
    if (needs[0]) {
      dx = Tensor::empty({batch, in}, dz.dtype(), be);
      TL_SPAN("linear.backward_data");
      be.linear_backward_data_prepared(dz.dtype(), dz.raw_data(), sw.raw_data(), kept.get(), dx.raw_data(), batch, in,
                                       out);
    }
    if (needs[1] || (db.defined() && !bias_done)) {
      dw = Tensor::empty({out, in}, dz.dtype(), be);
      TL_SPAN("linear.backward_weights");
      be.linear_backward_weights(dz.dtype(), dz.raw_data(), sx.raw_data(), dw.raw_data(),
                                 db.defined() && !bias_done ? db.raw_data() : nullptr, batch, in, out);
    }
    std::vector<Tensor> grads{dx, needs[1] ? dw : Tensor()};
    if (has_bias) grads.push_back(needs[2] ? db : Tensor());
    return grads;
  });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight) { return linear_node(x, weight, Tensor(), false, "linear"); }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return bias_add(linear(x, weight), bias); }

Tensor linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu) {
  return linear_node(x, weight, bias, relu, relu ? "linear_bias_relu" : "linear_bias");
}

}  // namespace trainlab
