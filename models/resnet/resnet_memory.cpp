// ResNet's forward as the memory estimate's chain (engine/instrument/memory_model.h): what each op
// of the step allocates, how long it keeps it, and what its backward makes, op by op in the order
// the forward records them. The residual's gradient is the chain's second path: made by the op that
// adds the shortcut (fused batch norm: beside its input's gradient; composed: the add passes its
// gradient both ways), turned into the block input's by the shortcut's own ops (the padded subsample,
// or the 1x1 convolution and its batch norm), and summed with the first convolution's at the block's
// input.
#include "models/resnet/resnet.h"

namespace trainlab {

namespace {

struct Builder {
  double n, a, master;  // batch, activation bytes per element, a weight gradient's f32 copy per element
  std::vector<ChainOp> ops;
  int block = -1;

  double act(double per_sample) const { return per_sample * n * a; }
  void add(ChainOp op) {
    op.block = block;
    ops.push_back(std::move(op));
  }
  // A bias-free convolution: its output saved by the batch norm after it.
  void conv(const std::string& name, const Conv2d& c, double in, double out, bool input_grad, double in_cast = 0) {
    const auto w = static_cast<double>(c.weight.numel());
    add({name, act(out), ChainLifetime::saved_next, in_cast, input_grad ? act(in) : 0.0, false, 0, w * a, w * master});
  }
  // Batch norm: its statistics saved (mean and invstd, f32), its affine's gradients in f32.
  ChainOp norm(const std::string& name, double elems, std::int64_t channels, ChainLifetime out) const {
    const double stats = 2.0 * static_cast<double>(channels) * 4;
    return {name, act(elems), out, stats, act(elems), false, 0, stats, 0};
  }
};

// The sizes of one block, per sample.
struct BlockSizes {
  double in, out;
};

}  // namespace

std::vector<ChainOp> ResNet::memory_chain(const ChainShape& shape, Backend& backend) const {
  (void)backend;
  TL_CHECK(shape.batch > 0, "ResNet memory chain: batch must be > 0, got " + std::to_string(shape.batch));
  const bool low = shape.dtype == DType::bf16 || shape.dtype == DType::f16;
  Builder b{static_cast<double>(shape.batch), static_cast<double>(dtype_size(shape.dtype)), low ? 4.0 : 0.0, {}};
  const double image = static_cast<double>(input_.sample[0] * input_.sample[1] * input_.sample[2]);
  // The batch reordered to channels_last (the step's, in the forward) and, under autocast, cast to
  // the compute dtype by the stem's convolution, which keeps the cast.
  if (shape.channels_last)
    b.add({"input.reorder", image * b.n * 4, low ? ChainLifetime::forward : ChainLifetime::saved_next});
  std::int64_t h = input_.sample[1], w = input_.sample[2];
  const auto plane = [&](std::int64_t channels) { return static_cast<double>(channels * h * w); };
  // The stem: recomputed with `all`.
  b.block = recompute_ == Recompute::all ? 0 : -1;
  const std::int64_t width = config_.width;
  b.conv("conv1", *conv1, image, plane(width), false, low ? image * b.n * b.a : 0.0);
  if (fused_) {
    b.add(b.norm("bn1+relu", plane(width), width, ChainLifetime::saved_next));
  } else {
    b.add(b.norm("bn1", plane(width), width, ChainLifetime::next_op));
    b.add({"relu", b.act(plane(width)), ChainLifetime::saved_self, 0, b.act(plane(width))});
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const BasicBlock& k = *blocks[i];
    b.block = recompute_ != Recompute::none ? static_cast<int>(i) + 1 : -1;
    const std::string at = "block" + std::to_string(i) + ".";
    const BlockSizes z{plane(k.in_channels), 0};
    h = (h - 1) / k.stride + 1;
    w = (w - 1) / k.stride + 1;
    const double out = plane(k.out_channels);
    // conv1, and its input's gradient summed with the residual's (the block's input).
    b.conv(at + "conv1", *k.conv1, z.in, out, true);
    b.ops.back().side = ChainSide::join;
    if (fused_) {
      b.add(b.norm(at + "bn1+relu", out, k.out_channels, ChainLifetime::saved_next));
    } else {
      b.add(b.norm(at + "bn1", out, k.out_channels, ChainLifetime::next_op));
      b.add({at + "relu1", b.act(out), ChainLifetime::saved_self, 0, b.act(out)});
    }
    // The shortcut, made before conv2 and held to the block's end (a local of its forward).
    const int to_end = fused_ ? 2 : 4;  // conv2, bn2 (composed: and the add, the ReLU)
    if (k.down_conv) {
      const auto dw = static_cast<double>(k.down_conv->weight.numel());
      ChainOp down{at + "downsample.0", b.act(out), ChainLifetime::saved_next, 0, 0, false, 0, dw * b.a, dw * b.master};
      down.side = ChainSide::transform;
      down.side_bytes = b.act(z.in);
      ChainOp down_bn = b.norm(at + "downsample.1", out, k.out_channels, ChainLifetime::next_op);
      down_bn.outlives = to_end;
      down_bn.side = ChainSide::transform;
      down_bn.side_bytes = down_bn.dx_bytes;
      down_bn.dx_bytes = 0;
      // Backward order: the batch norm first (the later of the two), then the convolution.
      b.add(std::move(down));
      b.add(std::move(down_bn));
    } else if (k.stride != 1 || k.in_channels != k.out_channels) {
      ChainOp pad{at + "pad_channels", b.act(out), ChainLifetime::next_op};
      pad.outlives = to_end;
      pad.side = ChainSide::transform;
      pad.side_bytes = b.act(z.in);
      b.add(std::move(pad));
    }
    b.conv(at + "conv2", *k.conv2, out, out, true);
    if (fused_) {
      ChainOp tail = b.norm(at + "bn2+add+relu", out, k.out_channels, ChainLifetime::saved_self);
      tail.side = ChainSide::branch;  // the residual's gradient, beside the input's
      tail.side_bytes = b.act(out);
      b.add(std::move(tail));
    } else {
      b.add(b.norm(at + "bn2", out, k.out_channels, ChainLifetime::next_op));
      ChainOp add{at + "add", b.act(out), ChainLifetime::next_op, 0, 0, true};
      add.side = ChainSide::alias;
      b.add(std::move(add));
      b.add({at + "relu2", b.act(out), ChainLifetime::saved_self, 0, b.act(out)});
    }
  }
  b.block = -1;
  // The head: the pooled features saved by the linear layer (a dropout in between keeps its mask).
  const auto channels = static_cast<double>(fc->weight.size(1)), classes = static_cast<double>(fc->weight.size(0));
  b.add({"global_avg_pool2d", b.act(channels), config_.dropout > 0 ? ChainLifetime::next_op : ChainLifetime::saved_next,
         0, b.act(plane(fc->weight.size(1)))});
  b.ops.back().saves_input = false;  // its backward spreads the gradient over the plane: the shape is enough
  if (config_.dropout > 0) {
    const double mask = static_cast<double>((static_cast<std::int64_t>(channels * b.n) + 7) / 8 * 8);
    b.add({"dropout", b.act(channels), ChainLifetime::saved_next, mask, b.act(channels)});
  }
  const double fw = channels * classes;
  if (fused_) {
    b.add({"fc+bias", b.act(classes), ChainLifetime::next_op, 0, b.act(channels), false, 0, (fw + classes) * b.a,
           (fw + classes) * b.master});
  } else {
    b.add({"fc", b.act(classes), ChainLifetime::next_op, 0, b.act(channels), false, 0, fw * b.a, fw * b.master});
    b.add({"fc.bias", b.act(classes), ChainLifetime::next_op, 0, 0, true, 0, classes * b.a, classes * b.master});
  }
  // The loss in f32 (autocast leaves it there): the softmax probabilities kept, the loss itself.
  b.add({"cross_entropy", 4, ChainLifetime::saved_self, classes * b.n * 4, classes * b.n * 4});
  return b.ops;
}

}  // namespace trainlab
