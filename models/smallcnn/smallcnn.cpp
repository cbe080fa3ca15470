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
  if (!fused_ || GradMode::enabled() || !x.defined()) return false;
  const DType dtype = autocast_dtype() == DType::f32 ? x.dtype() : autocast_dtype();
  return x.backend()
      .supports_fused(FusedPattern::conv_block(false), dtype, x.memory_format() == MemoryFormat::channels_last)
      .runs();
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
  return backend.supports_fused(FusedPattern::conv_block(true), dtype, c.channels_last, {&c, &p}).runs();
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

void SmallCNN::check_input(const Tensor& x) const {
  TL_CHECK(x.dim() == 4 && x.size(1) == shape_.channels && x.size(2) == shape_.height && x.size(3) == shape_.width,
           "SmallCNN: input must be [N, " + std::to_string(shape_.channels) + ", " + std::to_string(shape_.height) +
               ", " + std::to_string(shape_.width) + "], got " + shape_str(x.shape()));
}

Tensor SmallCNN::forward_layers(const Tensor& x, MemoryFormat layout) {
  check_input(x);
  const Pool2dOptions pool = Pool2dOptions::square(2);
  auto conv_block = [this](const Conv2d& conv) { return [this, &conv](const Tensor& in) { return block(conv, in); }; };
  auto classifier = [this](const Tensor& in) { return logits(hidden(in)); };
  if (inference_blocks(x)) {
    // Inference: each block one call, its convolution's output never leaving the backend; pool2
    // writes NCHW, so the flatten below is a view and fc1 reads it as it lies.
    const Tensor h1 = conv2d_relu_max_pool2d(x, conv1->weight, conv1->bias, conv1->options, pool, layout);
    return classifier(
        conv2d_relu_max_pool2d(h1, conv2->weight, conv2->bias, conv2->options, pool, MemoryFormat::contiguous));
  }
  // A block recomputed in backward keeps only its input (engine/core/autograd.h, checkpoint).
  auto run = [](bool recomputed, const char* name, const std::function<Tensor(const Tensor&)>& part, const Tensor& in,
                const std::vector<Tensor>& parameters) {
    return recomputed ? checkpoint(name, part, in, parameters) : part(in);
  };
  const bool convs = recompute_ != Recompute::none, all = recompute_ == Recompute::all;
  // Fused, the first block is one op: where its input needs no gradient and the backend fuses the
  // shape (FusedPattern::conv_block(true)) conv1's output and its gradient never reach memory.
  auto first_block = [this, layout](const Tensor& in) { return first_block_fused(in, layout); };
  Tensor h = run(convs, "recompute(conv1 block)",
                 fused_ && !convs ? std::function<Tensor(const Tensor&)>(first_block) : conv_block(*conv1), x,
                 {conv1->weight, conv1->bias});
  h = run(convs, "recompute(conv2 block)", conv_block(*conv2), h, {conv2->weight, conv2->bias});
  return run(all, "recompute(classifier)", classifier, h, {fc1->weight, fc1->bias, fc2->weight, fc2->bias});
}

// Each block is conv, bias, ReLU, 2x2 max-pool, computed as conv, bias, pool, ReLU: max-pooling
// commutes with ReLU (both keep order; a NaN wins either way; a window of values <= 0 gives +0
// either way), and the gradient reaches the same element, or, where the window's maximum is
// <= 0, none: the same bits forward and backward for a quarter of the ReLU's work. Fused, the
// convolution does its bias in the same call, and the pool its ReLU (max_pool2d_relu, where the
// backend fuses them).
Tensor SmallCNN::block(const Conv2d& conv, const Tensor& in) const {
  const Pool2dOptions pool = Pool2dOptions::square(2);
  if (fused_) return max_pool2d_relu(conv2d_fused(in, conv.weight, conv.bias, false, conv.options), pool);
  return relu(max_pool2d(conv2d(in, conv.weight, conv.bias, conv.options), pool));
}

Tensor SmallCNN::first_block_fused(const Tensor& in, MemoryFormat layout) const {
  return conv2d_relu_max_pool2d(in, conv1->weight, conv1->bias, conv1->options, Pool2dOptions::square(2), layout);
}

Tensor SmallCNN::hidden(const Tensor& in) const {
  const Tensor h = in.flatten(1);
  return fused_ ? fc1->forward_fused(h, true) : relu(fc1->forward(h));
}

Tensor SmallCNN::logits(const Tensor& h) const { return fused_ ? fc2->forward_fused(h, false) : fc2->forward(h); }

void SmallCNN::split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  fc1->split(LinearSplit::columns, group, "fc1");
  fc2->split(LinearSplit::rows, group, "fc2");
}

// The training forward without recomputation, a part per layer with weights, in the layout of the
// batch it is given (ZeRO-3's step gives it in the step's layout; the pipeline as delivered).
std::vector<ModelPart> SmallCNN::parts() {
  auto first = [this](const Tensor& x) {
    check_input(x);
    return fused_ ? first_block_fused(x, x.memory_format()) : block(*conv1, x);
  };
  return {{"conv1", first, parameter_names("conv1.")},
          {"conv2", [this](const Tensor& h) { return block(*conv2, h); }, parameter_names("conv2.")},
          {"fc1", [this](const Tensor& h) { return hidden(h); }, parameter_names("fc1.")},
          {"fc2", [this](const Tensor& h) { return logits(h); }, parameter_names("fc2.")}};
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

namespace {

// The chain as memory_chain builds it: the step's shape, the ops so far and the block they are in.
struct ChainBuilder {
  const ChainShape& shape;
  Backend& backend;
  Recompute recompute;
  double n, a, master;
  bool low;
  std::vector<ChainOp> ops;
  int block = -1;

  double act(double per_sample) const { return per_sample * n * a; }
  double pool_workspace(std::int64_t channels, std::int64_t height, std::int64_t width) const {
    Pool2dShape s{shape.batch, channels, height, width, 2, 2, 2, 2, 0, 0};
    s.channels_last = shape.channels_last;
    return static_cast<double>((backend.max_pool2d_workspace_bytes(shape.dtype, s) + 7) / 8 * 8);
  }
  // Recomputation: forward() checkpoints each conv block (conv, bias, ReLU, pool) and with `all`
  // the classifier (flatten, fc1, ReLU, fc2); the ops of one block carry its number.
  void begin_block(int b) {
    const bool on = b >= 0 && (b < 2 ? recompute != Recompute::none : recompute == Recompute::all);
    block = on ? b : -1;
  }
  void add(ChainOp op) {
    op.block = block;
    ops.push_back(std::move(op));
  }
  // flatten(1) of a channels_last [N, 64, H/4, W/4] is a copy (a reorder; fc1 keeps it), and its
  // gradient goes back to relu2 in NCHW order, which relu2 copies to channels_last again.
  void flatten(double flat) {
    if (shape.channels_last) add({"flatten.reorder", act(flat), ChainLifetime::saved_next, 0, 0, true});
  }
};

// The activations' elements per sample: conv1's output, pool1's (conv2's input), conv2's, pool2's
// (fc1's input), for the shape the model was built for (32768, 8192, 16384, 4096 at 3x32x32), and
// the layers' weights.
struct ChainSizes {
  std::int64_t height, width;
  double input, out1, half1, out2, flat, classes;
  double conv1_w, conv2_w, fc1_w, fc2_w;
  double in_cast;        // conv1's input cast to the compute dtype
  double relu2_scratch;  // relu2's copy of its NCHW-order gradient to channels_last
};

// forward() fused, one statement at a time: a temporary lives to the end of its statement.
// max_pool2d_relu(conv2d_fused(...)): the convolution's output lives through the pool, whose
// output is the next layer's input (conv2 saves pool1's; pool2's is h, held to the end of the
// forward, and fc1's saved input where the flatten is a view). The pool's backward turns a
// gradient that arrives in NCHW order (from the flatten) into channels_last first.
void fused_chain(ChainBuilder& c, const ChainSizes& z, bool first_block) {
  auto pool_relu_fused = [&](const char* name, double in, double out, std::int64_t channels, std::int64_t height,
                             std::int64_t width, ChainLifetime lifetime, double scratch) {
    c.add({name, c.act(out), lifetime, c.pool_workspace(channels, height, width), c.act(in), false, scratch});
  };
  const double a = c.a, master = c.master;
  c.begin_block(0);
  if (first_block) {
    const double places = std::ceil(z.half1 * c.n / 8) * 8;
    c.add({"conv1+bias+pool1+relu1", c.act(z.half1), ChainLifetime::saved_next, places, 0, false, 0,
           (z.conv1_w + 32) * a, (z.conv1_w + 32) * master});
  } else {
    c.add({"conv1+bias", c.act(z.out1), ChainLifetime::next_op, z.in_cast, 0, false, 0, (z.conv1_w + 32) * a,
           (z.conv1_w + 32) * master});
    pool_relu_fused("pool1+relu1", z.out1, z.half1, 32, z.height, z.width, ChainLifetime::saved_next, 0);
  }
  c.begin_block(1);
  c.add({"conv2+bias", c.act(z.out2), ChainLifetime::next_op, 0, c.act(z.half1), false, 0, (z.conv2_w + 64) * a,
         (z.conv2_w + 64) * master});
  pool_relu_fused("pool2+relu2", z.out2, z.flat, 64, z.height / 2, z.width / 2,
                  c.shape.channels_last ? ChainLifetime::forward : ChainLifetime::saved_next, z.relu2_scratch);
  c.begin_block(2);
  c.flatten(z.flat);
  c.add({"fc1+bias+relu", c.act(256), ChainLifetime::saved_self, 0, c.act(z.flat), false, c.act(256),
         (z.fc1_w + 256) * a, (z.fc1_w + 256) * master});
  c.add({"fc2+bias", c.act(z.classes), ChainLifetime::next_op, 0, c.act(256), false, 0, (z.fc2_w + z.classes) * a,
         (z.fc2_w + z.classes) * master});
}

// forward() composed: conv2d and linear with a bias are a node each and a bias_add (its bias cast
// by to(): an f32 copy of the bias gradient on the way back). The bias_add's output is the pool's
// input (the ReLU's for fc1), held to the end of the statement: through the pool and the ReLU.
void composed_chain(ChainBuilder& c, const ChainSizes& z) {
  auto layer = [&](const char* name, const char* bias, double out, double dx, double weights, double channels,
                   double saved, int bias_outlives) {
    c.add({name, c.act(out), ChainLifetime::next_op, saved, dx, false, 0, weights * c.a, weights * c.master});
    c.add({bias, c.act(out), ChainLifetime::next_op, 0, 0, true, 0, channels * c.a, channels * c.master});
    c.ops.back().outlives = bias_outlives;
  };
  // A block's pool and ReLU (forward()'s order): the pool's output lives until the ReLU's exists;
  // the ReLU's is saved for its backward, and is the next layer's input.
  auto pool_relu = [&](const char* pool, const char* relu, double in, double out, std::int64_t channels,
                       std::int64_t height, std::int64_t width, double relu_scratch) {
    c.add({pool, c.act(out), ChainLifetime::next_op, c.pool_workspace(channels, height, width), c.act(in)});
    c.add({relu, c.act(out), ChainLifetime::saved_self, 0, c.act(out), false, relu_scratch});
  };
  c.begin_block(0);
  layer("conv1", "conv1.bias", z.out1, 0, z.conv1_w, 32, z.in_cast, 2);
  pool_relu("pool1", "relu1", z.out1, z.half1, 32, z.height, z.width, 0);
  c.begin_block(1);
  layer("conv2", "conv2.bias", z.out2, c.act(z.half1), z.conv2_w, 64, 0, 2);
  pool_relu("pool2", "relu2", z.out2, z.flat, 64, z.height / 2, z.width / 2, z.relu2_scratch);
  c.begin_block(2);
  c.flatten(z.flat);  // h = h.flatten(1)
  layer("fc1", "fc1.bias", 256, c.act(z.flat), z.fc1_w, 256, 0, 1);
  c.add({"relu3", c.act(256), ChainLifetime::saved_self, 0, c.act(256)});  // fc2 reads it too; relu3 runs later
  layer("fc2", "fc2.bias", z.classes, c.act(256), z.fc2_w, z.classes, 0, 1);
}

}  // namespace

std::vector<ChainOp> SmallCNN::memory_chain(const ChainShape& shape, Backend& backend) const {
  TL_CHECK(shape.batch > 0, "SmallCNN memory chain: batch must be > 0, got " + std::to_string(shape.batch));
  const bool low = shape.dtype == DType::bf16 || shape.dtype == DType::f16;
  ChainBuilder c{shape,
                 backend,
                 recompute_,
                 static_cast<double>(shape.batch),
                 static_cast<double>(dtype_size(shape.dtype)),  // activations and their gradients
                 low ? 4.0 : 0.0,                               // a weight gradient's f32 copy
                 low,
                 {}};
  const SmallCNNShape& m = shape_;
  ChainSizes z{};
  z.height = m.height;
  z.width = m.width;
  z.input = static_cast<double>(m.channels * m.height * m.width);
  z.out1 = 32.0 * static_cast<double>(m.height * m.width);
  z.half1 = 32.0 * static_cast<double>((m.height / 2) * (m.width / 2));
  z.out2 = 64.0 * static_cast<double>((m.height / 2) * (m.width / 2));
  z.flat = static_cast<double>(m.flat());
  z.classes = static_cast<double>(m.classes);
  z.conv1_w = 32.0 * static_cast<double>(m.channels) * 9;
  z.conv2_w = 64 * 32 * 9;
  z.fc1_w = 256 * z.flat;
  z.fc2_w = z.classes * 256;
  z.in_cast = low ? c.act(z.input) : 0.0;
  z.relu2_scratch = shape.channels_last ? c.act(z.flat) : 0.0;
  // The reorder of the f32 batch to channels_last (the step's, timed in the forward): conv1 keeps
  // it as its input in f32; under autocast conv1 keeps its cast and the reorder lives to the end.
  // Fused in training, conv1's block may be one op (first_block_fused): it reads the batch as
  // delivered (no reorder) and keeps its places, one byte per output.
  const bool first_block =
      first_block_fused(backend, shape.dtype, shape.batch, false,
                        shape.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous);
  if (shape.channels_last && !first_block) {
    c.add({"input.reorder", z.input * c.n * 4, low ? ChainLifetime::forward : ChainLifetime::saved_next});
  }
  if (fused_)
    fused_chain(c, z, first_block);
  else
    composed_chain(c, z);
  c.begin_block(-1);
  // The loss in f32 (autocast leaves it there): the softmax probabilities kept, the loss itself.
  c.add({"cross_entropy", 4, ChainLifetime::saved_self, z.classes * c.n * 4, z.classes * c.n * 4});
  return c.ops;
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
