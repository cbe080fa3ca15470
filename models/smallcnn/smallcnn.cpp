#include "models/smallcnn/smallcnn.h"

#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "engine/core/autocast.h"
#include "engine/core/autograd.h"
#include "engine/core/ops.h"

namespace trainlab {

void SmallCNNShape::check() const {
  TL_CHECK(channels >= 1 && channels <= 4096 && height >= 4 && height <= 4096 && width >= 4 && width <= 4096 &&
               classes >= 2 && classes <= (std::int64_t{1} << 24),
           "SmallCNN cannot take " + str() +
               ": it needs 1..4096 channels, height and width 4..4096 (two 2x2 pools), 2..16777216 classes");
}

std::string SmallCNNShape::str() const {
  return std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width) + ", " +
         std::to_string(classes) + " classes";
}

SmallCNN::SmallCNN(const InitOptions& init, const SmallCNNShape& shape) : shape_(shape) {
  shape_.check();
  conv1 = register_module("conv1", std::make_shared<Conv2d>(shape_.channels, 32, 3, 1, 1, init));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(32, 64, 3, 1, 1, init));
  fc1 = register_module("fc1", std::make_shared<Linear>(shape_.flat(), 256, init));
  fc2 = register_module("fc2", std::make_shared<Linear>(256, shape_.classes, init));
}

bool SmallCNN::inference_blocks(const Tensor& x) const {
  return fused_ && !GradMode::enabled() && x.defined() && x.backend().fuses_conv_pool_inference();
}

Tensor SmallCNN::forward(const Tensor& x) {
  return forward_layers(x, x.defined() ? x.memory_format() : MemoryFormat::contiguous);
}

bool SmallCNN::first_block_fused(Backend& backend, DType dtype, std::int64_t batch, bool x_channels_last,
                                 MemoryFormat layout) const {
  if (!fused_ || recompute_ != Recompute::none) return false;
  Conv2dShape c{batch, shape_.channels, shape_.height, shape_.width, 32, 3, 3, 1, 1, 1, 1};
  c.channels_last = x_channels_last;
  Pool2dShape p{batch, 32, c.out_h(), c.out_w(), 2, 2, 2, 2, 0, 0};
  p.channels_last = layout == MemoryFormat::channels_last;
  p.relu = true;
  return backend.fuses_conv_pool_training(dtype, c, p);
}

Tensor SmallCNN::forward_in(const Tensor& x, MemoryFormat layout) {
  // The batch as delivered where conv1 reads it there: inference's blocks, and training's first
  // block (its input needs no gradient), whose convolution reads an NCHW batch faster than a
  // channels_last copy of it would be made.
  const bool as_delivered =
      inference_blocks(x) ||
      (x.defined() && x.dim() == 4 && GradMode::enabled() && !x.requires_grad() &&
       first_block_fused(x.backend(), autocast_dtype() == DType::f32 ? x.dtype() : autocast_dtype(), x.size(0),
                         x.memory_format() == MemoryFormat::channels_last, layout));
  return forward_layers(as_delivered ? x : x.contiguous(layout), layout);
}

Tensor SmallCNN::forward_layers(const Tensor& x, MemoryFormat layout) {
  TL_CHECK(x.dim() == 4 && x.size(1) == shape_.channels && x.size(2) == shape_.height && x.size(3) == shape_.width,
           "SmallCNN: input must be [N, " + std::to_string(shape_.channels) + ", " + std::to_string(shape_.height) +
               ", " + std::to_string(shape_.width) + "], got " + shape_str(x.shape()));
  const Pool2dOptions pool = Pool2dOptions::square(2);
  // Each block is conv, bias, ReLU, 2x2 max-pool, computed as conv, bias, pool, ReLU: max-pooling
  // commutes with ReLU (both keep order; a NaN wins either way; a window of values <= 0 gives +0
  // either way), and the gradient reaches the same element, or, where the window's maximum is
  // <= 0, none: the same bits forward and backward for a quarter of the ReLU's work. Fused, the
  // convolution does its bias in the same call, and the pool its ReLU (max_pool2d_relu, where the
  // backend fuses them).
  auto conv_block = [this, pool](const Conv2d& conv) {
    return [this, pool, &conv](const Tensor& in) {
      if (fused_) return max_pool2d_relu(conv2d_fused(in, conv.weight, conv.bias, false, conv.options), pool);
      return relu(max_pool2d(conv2d(in, conv.weight, conv.bias, conv.options), pool));
    };
  };
  auto classifier = [this](const Tensor& in) {
    const Tensor h = in.flatten(1);
    if (fused_) return linear_fused(linear_fused(h, fc1->weight, fc1->bias, true), fc2->weight, fc2->bias, false);
    return fc2->forward(relu(fc1->forward(h)));
  };
  if (inference_blocks(x)) {
    // Inference: each block one call, its convolution's output never leaving the backend; pool2
    // writes NCHW, so the flatten below is a view and fc1 reads it as it lies.
    const Tensor h1 = conv2d_relu_max_pool2d(x, conv1->weight, conv1->bias, conv1->options, pool, layout);
    return classifier(
        conv2d_relu_max_pool2d(h1, conv2->weight, conv2->bias, conv2->options, pool, MemoryFormat::contiguous));
  }
  // A block recomputed in backward keeps only its input (engine/core/autograd.h, checkpoint).
  auto run = [](bool recomputed, const char* name, const std::function<Tensor(const Tensor&)>& block, const Tensor& in,
                const std::vector<Tensor>& parameters) {
    return recomputed ? checkpoint(name, block, in, parameters) : block(in);
  };
  const bool convs = recompute_ != Recompute::none, all = recompute_ == Recompute::all;
  // Fused, the first block is one op: where its input needs no gradient and the backend fuses the
  // shape (Backend::fuses_conv_pool_training) conv1's output and its gradient never reach memory.
  auto first_block = [this, pool, layout](const Tensor& in) {
    return conv2d_relu_max_pool2d(in, conv1->weight, conv1->bias, conv1->options, pool, layout);
  };
  Tensor h = run(convs, "recompute(conv1 block)",
                 fused_ && !convs ? std::function<Tensor(const Tensor&)>(first_block) : conv_block(*conv1), x,
                 {conv1->weight, conv1->bias});
  h = run(convs, "recompute(conv2 block)", conv_block(*conv2), h, {conv2->weight, conv2->bias});
  return run(all, "recompute(classifier)", classifier, h, {fc1->weight, fc1->bias, fc2->weight, fc2->bias});
}

double SmallCNN::flops(bool forward_only, const SmallCNNShape& shape) {
  const double h = static_cast<double>(shape.height), w = static_cast<double>(shape.width);
  const double h2 = static_cast<double>(shape.height / 2), w2 = static_cast<double>(shape.width / 2);
  const double conv1 = 32.0 * h * w * static_cast<double>(shape.channels) * 3 * 3, conv2 = 64.0 * h2 * w2 * 32 * 3 * 3;
  const double fc1 = static_cast<double>(shape.flat()) * 256, fc2 = 256.0 * static_cast<double>(shape.classes);
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
  auto pool_workspace = [&](std::int64_t channels, std::int64_t height, std::int64_t width) {
    Pool2dShape s{shape.batch, channels, height, width, 2, 2, 2, 2, 0, 0};
    s.channels_last = shape.channels_last;
    return static_cast<double>((backend.max_pool2d_workspace_bytes(shape.dtype, s) + 7) / 8 * 8);
  };
  // The activations' elements per sample: conv1's output, pool1's (conv2's input), conv2's, pool2's
  // (fc1's input), for the shape the model was built for (32768, 8192, 16384, 4096 at 3x32x32).
  const SmallCNNShape& m = shape_;
  const double input = static_cast<double>(m.channels * m.height * m.width);
  const double out1 = 32.0 * static_cast<double>(m.height * m.width);
  const double half1 = 32.0 * static_cast<double>((m.height / 2) * (m.width / 2));
  const double out2 = 64.0 * static_cast<double>((m.height / 2) * (m.width / 2));
  const double flat = static_cast<double>(m.flat()), classes = static_cast<double>(m.classes);
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
  // Fused in training, conv1's block may be one op (first_block_fused): it reads the batch as
  // delivered (no reorder) and keeps its places, one byte per output.
  const bool first_block =
      first_block_fused(backend, shape.dtype, shape.batch, false,
                        shape.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous);
  if (shape.channels_last && !first_block) {
    add({"input.reorder", input * n * 4, low ? ChainLifetime::forward : ChainLifetime::saved_next});
  }
  const double in_cast = low ? act(input) : 0.0;  // conv1's input cast to the compute dtype
  const double conv1_w = 32.0 * static_cast<double>(m.channels) * 9, conv2_w = 64 * 32 * 9, fc1_w = 256 * flat,
               fc2_w = classes * 256;
  // flatten(1) of a channels_last [N, 64, H/4, W/4] is a copy (a reorder; fc1 keeps it), and its
  // gradient goes back to relu2 in NCHW order, which relu2 copies to channels_last again.
  auto flatten = [&] {
    if (shape.channels_last) add({"flatten.reorder", act(flat), ChainLifetime::saved_next, 0, 0, true});
  };
  const double relu2_scratch = shape.channels_last ? act(flat) : 0.0;
  // A block's pool and ReLU (forward()'s order): the pool's output lives until the ReLU's exists;
  // the ReLU's is saved for its backward, and is the next layer's input.
  auto pool_relu = [&](const char* pool, const char* relu, double in, double out, std::int64_t channels,
                       std::int64_t height, std::int64_t width, double relu_scratch) {
    add({pool, act(out), ChainLifetime::next_op, pool_workspace(channels, height, width), act(in)});
    add({relu, act(out), ChainLifetime::saved_self, 0, act(out), false, relu_scratch});
  };
  // forward() below, one statement at a time: a temporary lives to the end of its statement.
  if (fused_) {
    // max_pool2d_relu(conv2d_fused(...)): the convolution's output lives through the pool, whose
    // output is the next layer's input (conv2 saves pool1's; pool2's is h, held to the end of the
    // forward, and fc1's saved input where the flatten is a view). The pool's backward turns a
    // gradient that arrives in NCHW order (from the flatten) into channels_last first.
    auto pool_relu_fused = [&](const char* name, double in, double out, std::int64_t channels, std::int64_t height,
                               std::int64_t width, ChainLifetime lifetime, double scratch) {
      add({name, act(out), lifetime, pool_workspace(channels, height, width), act(in), false, scratch});
    };
    begin_block(0);
    if (first_block) {
      const double places = std::ceil(half1 * n / 8) * 8;
      add({"conv1+bias+pool1+relu1", act(half1), ChainLifetime::saved_next, places, 0, false, 0, (conv1_w + 32) * a,
           (conv1_w + 32) * master});
    } else {
      add({"conv1+bias", act(out1), ChainLifetime::next_op, in_cast, 0, false, 0, (conv1_w + 32) * a,
           (conv1_w + 32) * master});
      pool_relu_fused("pool1+relu1", out1, half1, 32, m.height, m.width, ChainLifetime::saved_next, 0);
    }
    begin_block(1);
    add({"conv2+bias", act(out2), ChainLifetime::next_op, 0, act(half1), false, 0, (conv2_w + 64) * a,
         (conv2_w + 64) * master});
    pool_relu_fused("pool2+relu2", out2, flat, 64, m.height / 2, m.width / 2,
                    shape.channels_last ? ChainLifetime::forward : ChainLifetime::saved_next, relu2_scratch);
    begin_block(2);
    flatten();
    add({"fc1+bias+relu", act(256), ChainLifetime::saved_self, 0, act(flat), false, act(256), (fc1_w + 256) * a,
         (fc1_w + 256) * master});
    add({"fc2+bias", act(classes), ChainLifetime::next_op, 0, act(256), false, 0, (fc2_w + classes) * a,
         (fc2_w + classes) * master});
  } else {
    // conv2d and linear with a bias are a node each and a bias_add (its bias cast by to(): an f32
    // copy of the bias gradient on the way back). The bias_add's output is the pool's input (the
    // ReLU's for fc1), held to the end of the statement: through the pool and the ReLU.
    auto layer = [&](const char* name, const char* bias, double out, double dx, double weights, double channels,
                     double saved, int bias_outlives) {
      add({name, act(out), ChainLifetime::next_op, saved, dx, false, 0, weights * a, weights * master});
      add({bias, act(out), ChainLifetime::next_op, 0, 0, true, 0, channels * a, channels * master});
      ops.back().outlives = bias_outlives;
    };
    begin_block(0);
    layer("conv1", "conv1.bias", out1, 0, conv1_w, 32, in_cast, 2);
    pool_relu("pool1", "relu1", out1, half1, 32, m.height, m.width, 0);
    begin_block(1);
    layer("conv2", "conv2.bias", out2, act(half1), conv2_w, 64, 0, 2);
    pool_relu("pool2", "relu2", out2, flat, 64, m.height / 2, m.width / 2, relu2_scratch);
    begin_block(2);
    flatten();  // h = h.flatten(1)
    layer("fc1", "fc1.bias", 256, act(flat), fc1_w, 256, 0, 1);
    add({"relu3", act(256), ChainLifetime::saved_self, 0, act(256)});  // fc2 reads it too; relu3 runs later
    layer("fc2", "fc2.bias", classes, act(256), fc2_w, classes, 0, 1);
  }
  begin_block(-1);
  // The loss in f32 (autocast leaves it there): the softmax probabilities kept, the loss itself.
  add({"cross_entropy", 4, ChainLifetime::saved_self, classes * n * 4, classes * n * 4});
  return ops;
}

}  // namespace trainlab

namespace trainlab {

namespace {

SmallCNNShape shape_for(const ModelInput& input) {
  TL_CHECK(input.sample.size() == 3,
           "SmallCNN takes images [C, H, W], not samples of shape " + shape_str(input.sample));
  return SmallCNNShape{input.sample[0], input.sample[1], input.sample[2], input.classes};
}

// The input a checkpoint's SmallCNN was trained for: channels from conv1's weight, classes from
// fc2's, and fc1's width (64 x H/4 x W/4, taken square) from fc1's; nothing where they do not say.
std::optional<ModelInput> input_of_tensors(const NamedTensors& tensors) {
  const auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : tensors)
      if (n == name) return &t;
    return nullptr;
  };
  const Tensor *conv1 = find("conv1.weight"), *fc1 = find("fc1.weight"), *fc2 = find("fc2.weight");
  SmallCNNShape shape;
  if (conv1 && conv1->dim() == 4) shape.channels = conv1->size(1);
  if (fc2 && fc2->dim() == 2) shape.classes = fc2->size(0);
  if (fc1 && fc1->dim() == 2 && fc1->size(1) % 64 == 0) {
    const auto side = static_cast<std::int64_t>(std::lround(std::sqrt(static_cast<double>(fc1->size(1) / 64))));
    if (side >= 1 && side * side * 64 == fc1->size(1)) shape.height = shape.width = side * 4;
  }
  try {
    shape.check();
  } catch (const Error&) {
    return std::nullopt;
  }
  return ModelInput{{shape.channels, shape.height, shape.width}, shape.classes};
}

}  // namespace

ModelDef smallcnn_model() {
  ModelDef def;
  def.name = "smallcnn";
  def.title = "SmallCNN";
  def.description = "two conv blocks (32, 64 channels; 3x3, ReLU, 2x2 max-pool), fc 256, fc classes";
  def.default_input = ModelInput{{SmallCNN::kChannels, SmallCNN::kHeight, SmallCNN::kWidth}, SmallCNN::kClasses};
  def.check = [](const ModelInput& input, const ModelOptions&) { shape_for(input).check(); };
  def.make = [](const InitOptions& init, const ModelInput& input, const ModelOptions&) {
    return std::make_shared<SmallCNN>(init, shape_for(input));
  };
  def.input_of = [](const NamedTensors& tensors, const ModelOptions&) { return input_of_tensors(tensors); };
  def.torch_twin = "smallcnn";
  return def;
}

}  // namespace trainlab
