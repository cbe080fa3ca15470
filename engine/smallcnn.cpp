#include "engine/smallcnn.h"

#include <functional>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"

namespace trainlab {

SmallCNN::SmallCNN(const InitOptions& init) {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(3, 32, 3, 1, 1, init));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(32, 64, 3, 1, 1, init));
  fc1 = register_module("fc1", std::make_shared<Linear>(64 * 8 * 8, 256, init));
  fc2 = register_module("fc2", std::make_shared<Linear>(256, kClasses, init));
}

Tensor SmallCNN::forward(const Tensor& x) {
  TL_CHECK(x.dim() == 4 && x.size(1) == kChannels && x.size(2) == kHeight && x.size(3) == kWidth,
           "SmallCNN: input must be [N, 3, 32, 32], got " + shape_str(x.shape()));
  const Pool2dOptions pool = Pool2dOptions::square(2);
  auto conv_block = [this, pool](const Conv2d& conv) {
    return [this, pool, &conv](const Tensor& in) {
      return fused_ ? max_pool2d(conv2d_fused(in, conv.weight, conv.bias, true, conv.options), pool)
                    : max_pool2d(relu(conv2d(in, conv.weight, conv.bias, conv.options)), pool);
    };
  };
  auto classifier = [this](const Tensor& in) {
    const Tensor h = in.flatten(1);
    if (fused_) return linear_fused(linear_fused(h, fc1->weight, fc1->bias, true), fc2->weight, fc2->bias, false);
    return fc2->forward(relu(fc1->forward(h)));
  };
  // A block recomputed in backward keeps only its input (engine/autograd.h, checkpoint).
  auto run = [](bool recomputed, const char* name, const std::function<Tensor(const Tensor&)>& block, const Tensor& in,
                const std::vector<Tensor>& parameters) {
    return recomputed ? checkpoint(name, block, in, parameters) : block(in);
  };
  const bool convs = recompute_ != Recompute::none, all = recompute_ == Recompute::all;
  Tensor h = run(convs, "recompute(conv1 block)", conv_block(*conv1), x, {conv1->weight, conv1->bias});
  h = run(convs, "recompute(conv2 block)", conv_block(*conv2), h, {conv2->weight, conv2->bias});
  return run(all, "recompute(classifier)", classifier, h, {fc1->weight, fc1->bias, fc2->weight, fc2->bias});
}

double SmallCNN::flop_per_sample(bool forward_only) {
  const double conv1 = 32.0 * 32 * 32 * 3 * 3 * 3, conv2 = 64.0 * 16 * 16 * 32 * 3 * 3;
  const double fc1 = 4096.0 * 256, fc2 = 256.0 * 10;
  const double forward = conv1 + conv2 + fc1 + fc2;
  return 2 * (forward_only ? forward : forward + (conv2 + fc1 + fc2) + forward);
}

}  // namespace trainlab

namespace trainlab {

std::vector<ChainOp> SmallCNN::memory_chain(const ChainShape& shape, Backend& backend) const {
  TL_CHECK(shape.batch > 0, "SmallCNN memory chain: batch must be > 0, got " + std::to_string(shape.batch));
  const double n = static_cast<double>(shape.batch);
  const bool low = shape.dtype == DType::bf16 || shape.dtype == DType::f16;
  const double a = static_cast<double>(dtype_size(shape.dtype));  // activations and their gradients
  const double master = low ? 4.0 : 0.0;                          // a weight gradient's f32 copy
  auto act = [&](double per_sample) { return per_sample * n * a; };
  auto pool_workspace = [&](std::int64_t channels, std::int64_t size) {
    Pool2dShape s{shape.batch, channels, size, size, 2, 2, 2, 2, 0, 0};
    s.channels_last = shape.channels_last;
    return static_cast<double>((backend.max_pool2d_workspace_bytes(shape.dtype, s) + 7) / 8 * 8);
  };
  const double input = 3.0 * 32 * 32;
  std::vector<ChainOp> ops;
  // Recomputation: forward() checkpoints each conv block (conv, bias, ReLU, pool) and with `all`
  // the classifier (flatten, fc1, ReLU, fc2); the ops of one block carry its number.
  int block = -1;
  auto begin_block = [&](int b) {
    const bool on = b >= 0 && (b < 2 ? recompute_ != Recompute::none : recompute_ == Recompute::all);
    block = on ? b : -1;
  };
  auto add = [&](ChainOp op) {
    op.block = block;
    ops.push_back(std::move(op));
  };
  // The reorder of the f32 batch to channels_last (the step's, timed in the forward): conv1 keeps
  // it as its input in f32; under autocast conv1 keeps its cast and the reorder lives to the end.
  if (shape.channels_last) {
    add({"input.reorder", input * n * 4, low ? ChainLifetime::forward : ChainLifetime::saved_next});
  }
  const double in_cast = low ? act(input) : 0.0;  // conv1's input cast to the compute dtype
  const double conv1_w = 32 * 3 * 9, conv2_w = 64 * 32 * 9, fc1_w = 256 * 4096, fc2_w = 10 * 256;
  // flatten(1) of a channels_last [N, 64, 8, 8] is a copy (a reorder; fc1 keeps it), and its
  // gradient goes back to pool2 in NCHW order, which pool2 copies to channels_last again.
  auto flatten = [&] {
    if (shape.channels_last) add({"flatten.reorder", act(4096), ChainLifetime::saved_next, 0, 0, true});
  };
  const double pool2_scratch = shape.channels_last ? act(4096) : 0.0;
  // forward() below, one statement at a time: a temporary lives to the end of its statement.
  if (fused_) {
    begin_block(0);
    add({"conv1+bias+relu", act(32768), ChainLifetime::saved_self, in_cast, 0, false, act(32768), (conv1_w + 32) * a,
         (conv1_w + 32) * master});
    add({"pool1", act(8192), ChainLifetime::saved_next, pool_workspace(32, 32), act(32768)});
    begin_block(1);
    add({"conv2+bias+relu", act(16384), ChainLifetime::saved_self, 0, act(8192), false, act(16384), (conv2_w + 64) * a,
         (conv2_w + 64) * master});
    // h = linear_fused(h.flatten(1), ...): pool2's output is fc1's input, or the flatten's source
    // (freed when the statement ends).
    add({"pool2", act(4096), shape.channels_last ? ChainLifetime::next_op : ChainLifetime::saved_next,
         pool_workspace(64, 16), act(16384), false, pool2_scratch});
    ops.back().outlives = 2;
    begin_block(2);
    flatten();
    add({"fc1+bias+relu", act(256), ChainLifetime::saved_self, 0, act(4096), false, act(256), (fc1_w + 256) * a,
         (fc1_w + 256) * master});
    add({"fc2+bias", act(10), ChainLifetime::next_op, 0, act(256), false, 0, (fc2_w + 10) * a, (fc2_w + 10) * master});
  } else {
    // conv2d and linear with a bias are a node each and a bias_add (its bias cast by to(): an f32
    // copy of the bias gradient on the way back). The bias_add's output is the ReLU's input, held
    // to the end of the statement: through the pool for the convolutions.
    auto layer = [&](const char* name, const char* bias, double out, double dx, double weights, double channels,
                     double saved, int bias_outlives) {
      add({name, act(out), ChainLifetime::next_op, saved, dx, false, 0, weights * a, weights * master});
      add({bias, act(out), ChainLifetime::next_op, 0, 0, true, 0, channels * a, channels * master});
      ops.back().outlives = bias_outlives;
    };
    begin_block(0);
    layer("conv1", "conv1.bias", 32768, 0, conv1_w, 32, in_cast, 2);
    add({"relu1", act(32768), ChainLifetime::saved_self, 0, act(32768)});
    add({"pool1", act(8192), ChainLifetime::saved_next, pool_workspace(32, 32), act(32768)});
    begin_block(1);
    layer("conv2", "conv2.bias", 16384, act(8192), conv2_w, 64, 0, 2);
    add({"relu2", act(16384), ChainLifetime::saved_self, 0, act(16384)});
    add({"pool2", act(4096), shape.channels_last ? ChainLifetime::next_op : ChainLifetime::saved_next,
         pool_workspace(64, 16), act(16384), false, pool2_scratch});
    begin_block(2);
    flatten();  // h = h.flatten(1): pool2's output goes with the assignment
    layer("fc1", "fc1.bias", 256, act(4096), fc1_w, 256, 0, 1);
    add({"relu3", act(256), ChainLifetime::saved_self, 0, act(256)});  // fc2 reads it too; relu3 runs later
    layer("fc2", "fc2.bias", 10, act(256), fc2_w, 10, 0, 1);
  }
  begin_block(-1);
  // The loss in f32 (autocast leaves it there): the softmax probabilities kept, the loss itself.
  add({"cross_entropy", 4, ChainLifetime::saved_self, 10 * n * 4, 10 * n * 4});
  return ops;
}

}  // namespace trainlab
