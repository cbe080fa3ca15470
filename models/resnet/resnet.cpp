#include "models/resnet/resnet.h"

#include <cmath>
#include <optional>
#include <utility>

#include "engine/core/autograd.h"
#include "engine/core/ops.h"

namespace trainlab {

namespace {

// He initialisation (kaiming_normal, fan_out, ReLU gain: std sqrt(2 / (C_out k k)), as torchvision's
// ResNet) of a bias-free convolution, drawn from the model's generator; the layer's own uniform
// draw is made from a scratch generator and overwritten, so the model's stream holds only these.
std::shared_ptr<Conv2d> he_conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                                const InitOptions& init) {
  Generator scratch(0);
  InitOptions layer_init = init;
  layer_init.generator = &scratch;
  auto conv = std::make_shared<Conv2d>(in, out, kernel, stride, kernel / 2, layer_init, /*bias=*/false);
  const double std_dev = std::sqrt(2.0 / static_cast<double>(out * kernel * kernel));
  NoGradGuard no_grad;
  Tensor normal = Tensor::normal(conv->weight.shape(), *init.generator, init.dtype, conv->weight.backend());
  conv->weight.copy_(mul_scalar(normal, std_dev));
  return conv;
}

// A convolution, its batch norm, then the epilogue (a residual added, a ReLU). Unfused, each op on
// its own; fused, batch norm takes the epilogue in its own passes, and in eval mode with `fold` the
// backend may fold the norm into the convolution (conv2d_batch_norm: one call, no pass of its own).
Tensor conv_norm(const Conv2d& conv, const BatchNorm2d& bn, const Tensor& x, bool fused, bool fold,
                 const Tensor& residual, bool relu) {
  if (fused && fold && !bn.is_training())
    return conv2d_batch_norm(x, conv.weight, bn.weight, bn.bias, bn.running_mean, bn.running_var, conv.options,
                             bn.options.eps, residual, relu);
  const Tensor h = conv2d(x, conv.weight, conv.options);
  if (fused) return bn.forward_fused(h, residual, relu);
  Tensor out = bn.forward_fused(h, Tensor(), false);
  if (residual.defined()) out = add(out, residual);
  return relu ? trainlab::relu(out) : out;
}

}  // namespace

BasicBlock::BasicBlock(std::int64_t in, std::int64_t out, std::int64_t s, const ResNetConfig& config,
                       const InitOptions& init)
    : in_channels(in), out_channels(out), stride(s), fold_norm(config.fold_norm) {
  conv1 = register_module("conv1", he_conv(in, out, 3, s, init));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(out, init));
  conv2 = register_module("conv2", he_conv(out, out, 3, 1, init));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(out, init));
  if (config.zero_init_residual) {
    NoGradGuard no_grad;
    bn2->weight.zero_();
  }
  if (config.conv_shortcut && (s != 1 || in != out)) {
    down_conv = register_module("downsample.0", he_conv(in, out, 1, s, init));
    down_bn = register_module("downsample.1", std::make_shared<BatchNorm2d>(out, init));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor h = conv_norm(*conv1, *bn1, x, fused_, fold_norm, Tensor(), true);
  Tensor shortcut = x;
  if (down_conv) {
    shortcut = conv_norm(*down_conv, *down_bn, x, fused_, fold_norm, Tensor(), false);
  } else if (stride != 1 || in_channels != out_channels) {
    shortcut = pad_channels(x, out_channels, stride, (out_channels - in_channels) / 2);
  }
  return conv_norm(*conv2, *bn2, h, fused_, fold_norm, shortcut, true);
}

ResNet::ResNet(const InitOptions& init, const ModelInput& input, const ResNetConfig& config)
    : config_(config), input_(input) {
  const std::int64_t w = config.width;
  conv1 = register_module("conv1", he_conv(input.sample[0], w, 3, 1, init));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(w, init));
  std::int64_t channels = w;
  for (int stage = 0; stage < 3; ++stage) {
    const std::int64_t out = w << stage;
    for (std::int64_t i = 0; i < config.depth; ++i) {
      const std::int64_t stride = stage > 0 && i == 0 ? 2 : 1;
      block_names_.push_back("layer" + std::to_string(stage + 1) + "." + std::to_string(i));
      blocks.push_back(
          register_module(block_names_.back(), std::make_shared<BasicBlock>(channels, out, stride, config, init)));
      channels = out;
    }
  }
  fc = register_module("fc", std::make_shared<Linear>(channels, input.classes, init));
  // Parameter groups: batch norm's weights and biases and the head's bias take no weight decay.
  for (const auto& [name, tensor] : named_parameters()) {
    const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias || tensor.dim() == 1) no_decay_.insert(name);
  }
}

void ResNet::set_fused(bool fused) {
  fused_ = fused;
  for (auto& block : blocks) block->set_fused(fused);
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = stem(x);
  for (std::size_t i = 0; i < blocks.size(); ++i) h = block(i, h);
  return head(h);
}

Tensor ResNet::stem(const Tensor& x) {
  TL_CHECK(x.dim() == 4 && x.size(1) == input_.sample[0] && x.size(2) >= 4 && x.size(3) >= 4,
           "ResNet: input must be [N, " + std::to_string(input_.sample[0]) + ", H >= 4, W >= 4], got " +
               shape_str(x.shape()));
  auto layers = [this](const Tensor& in) {
    return conv_norm(*conv1, *bn1, in, fused_, config_.fold_norm, Tensor(), true);
  };
  // A block recomputed in backward keeps only its input (engine/core/autograd.h, checkpoint).
  if (recompute_ == Recompute::all)
    return checkpoint("recompute(stem)", layers, x, {conv1->weight, bn1->weight, bn1->bias});
  return layers(x);
}

Tensor ResNet::block(std::size_t i, const Tensor& h) {
  BasicBlock& b = *blocks.at(i);
  if (recompute_ == Recompute::none) return b.forward(h);
  return checkpoint(
      "recompute(block " + std::to_string(i) + ")", [&b](const Tensor& t) { return b.forward(t); }, h, b.parameters());
}

Tensor ResNet::head(const Tensor& h) {
  const Tensor pooled = dropout(global_avg_pool2d(h), config_.dropout, is_training());
  return fused_ ? fc->forward_fused(pooled, false) : fc->forward(pooled);
}

void ResNet::split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  fc->split(LinearSplit::rows_of_whole_input, group, "fc");
}

std::vector<ModelPart> ResNet::parts() {
  std::vector<std::string> stem_names = parameter_names("conv1."), bn = parameter_names("bn1.");
  stem_names.insert(stem_names.end(), bn.begin(), bn.end());
  std::vector<ModelPart> out{{"stem", [this](const Tensor& x) { return stem(x); }, stem_names}};
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::string name = block_names_.at(i);
    out.push_back({name, [this, i](const Tensor& h) { return block(i, h); }, parameter_names(name + ".")});
  }
  out.push_back({"head", [this](const Tensor& h) { return head(h); }, parameter_names("fc.")});
  return out;
}

double ResNet::flop_per_sample(bool forward_only) const {
  // 2 x the multiply-adds of every convolution and of the head, at the input's size.
  double first = 0, rest = 0;
  // A convolution of an h x w input: its FLOPs added, its output's size returned.
  auto conv = [&](const Conv2d& c, std::pair<std::int64_t, std::int64_t> in, double& total) {
    const std::int64_t oh = (in.first + 2 * c.options.pad_h - c.weight.size(2)) / c.options.stride_h + 1;
    const std::int64_t ow = (in.second + 2 * c.options.pad_w - c.weight.size(3)) / c.options.stride_w + 1;
    total += 2.0 * static_cast<double>(c.weight.numel() * oh * ow);
    return std::pair{oh, ow};
  };
  auto size = conv(*conv1, {input_.sample[1], input_.sample[2]}, first);
  for (const auto& block : blocks) {
    if (block->down_conv) conv(*block->down_conv, size, rest);
    size = conv(*block->conv2, conv(*block->conv1, size, rest), rest);
  }
  rest += 2.0 * static_cast<double>(fc->weight.numel());
  const double forward = first + rest;
  // backward: every layer's weight gradient, every layer's data gradient but the first's
  return forward_only ? forward : forward + forward + rest;
}

}  // namespace trainlab

namespace trainlab {

namespace {

ResNetConfig config_of(const ModelOptions& options) {
  const ModelDef def = resnet_model();
  ResNetConfig c;
  c.depth = model_option_int(def, options, "depth", 1, 18);
  c.width = model_option_int(def, options, "width", 1, 256);
  c.conv_shortcut = model_option_choice(def, options, "shortcut", {"pad", "conv"}) == "conv";
  c.zero_init_residual = model_option_int(def, options, "zero_init", 0, 1) == 1;
  c.dropout = model_option_number(def, options, "dropout", 0, 0.9);
  c.fold_norm = model_option_int(def, options, "fold", 0, 1) == 1;
  return c;
}

void check_input(const ModelInput& input) {
  TL_CHECK(input.sample.size() == 3, "ResNet takes images [C, H, W], not samples of shape " + shape_str(input.sample));
  TL_CHECK(input.sample[0] >= 1 && input.sample[0] <= 4096 && input.sample[1] >= 4 && input.sample[1] <= 4096 &&
               input.sample[2] >= 4 && input.sample[2] <= 4096,
           "ResNet cannot take " + input.str() +
               ": it needs 1..4096 channels and height and width 4..4096 (two stride-2 stages leave at least 1x1)");
  TL_CHECK(input.classes >= 2 && input.classes <= (std::int64_t{1} << 24), "ResNet needs 2..16777216 classes");
}

}  // namespace

ModelDef resnet_model() {
  ModelDef def;
  def.name = "resnet";
  def.title = "ResNet";
  def.description =
      "He et al. 2016's CIFAR ResNet: a 3x3 stem, 3 stages of `depth` basic blocks (width, 2 width, 4 width "
      "channels; batch norm, residual adds), global average pooling, a linear head (6 depth + 2 layers: "
      "ResNet-20 at depth 3)";
  def.keys = {{"depth", "3", "1..18", "basic blocks per stage (3: ResNet-20, 9: ResNet-56, 18: ResNet-110)"},
              {"width", "16", "1..256", "the first stage's channels"},
              {"shortcut", "pad", "pad | conv",
               "a downsampling block's shortcut: pad (option A: subsample, zero channels) or conv (option B: 1x1 "
               "convolution and batch norm)"},
              {"zero_init", "0", "0 | 1", "1: each block's last batch norm starts with weight 0"},
              {"dropout", "0", "0..0.9", "dropout before the head"},
              {"fold", "0", "0 | 1",
               "1: in eval mode with --fuse, batch norm folded into each convolution where the backend can "
               "(measured slower on oneDNN here: off by default)"}};
  def.default_input = ModelInput{{3, 32, 32}, 10};
  def.check = [](const ModelInput& input, const ModelOptions& options) {
    (void)config_of(options);
    check_input(input);
  };
  def.make = [](const InitOptions& init, const ModelInput& input, const ModelOptions& options) {
    return std::make_shared<ResNet>(init, input, config_of(options));
  };
  // The channels from the stem's weight, the classes from the head's; the image size is not in the
  // weights (global pooling): the default's.
  def.input_of = [](const NamedTensors& tensors, const ModelOptions&) -> std::optional<ModelInput> {
    const Tensor *stem = nullptr, *head = nullptr;
    for (const auto& [name, t] : tensors) {
      if (name == "conv1.weight" && t.dim() == 4) stem = &t;
      if (name == "fc.weight" && t.dim() == 2) head = &t;
    }
    if (stem == nullptr || head == nullptr) return std::nullopt;
    return ModelInput{{stem->size(1), 32, 32}, head->size(0)};
  };
  def.torch_twin = "resnet";
  return def;
}

}  // namespace trainlab
