#include "engine/nn/module.h"

#include <cmath>

#include "engine/core/autograd.h"
#include "engine/instrument/memory_usage.h"

namespace trainlab {

const char* recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::none:
      return "none";
    case Recompute::convs:
      return "convs";
    case Recompute::all:
      return "all";
  }
  return "?";
}

void Module::set_recompute(Recompute mode) {
  TL_CHECK(mode == Recompute::none, std::string("recompute: ") + recompute_name(mode) +
                                        " needs a model that marks blocks to recompute; this one does not (use "
                                        "recompute: none)");
}

void Module::split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  (void)group;
  throw Error("tensor parallelism: this model has no tensor-parallel split (gpt, smallcnn, resnet and mlp have one)");
}

void Module::set_fused(bool fused) {
  for (auto& [name, child] : children_) child->set_fused(fused);
}

// ---- Module ----

void Module::collect(const std::string& prefix, NamedTensors& out, bool parameters, bool buffers) const {
  if (parameters)
    for (const auto& [name, tensor] : parameters_) out.emplace_back(prefix + name, tensor);
  if (buffers)
    for (const auto& [name, tensor] : buffers_) out.emplace_back(prefix + name, tensor);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, parameters, buffers);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out, true, false);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, false, true);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", out, true, true);
  return out;
}

std::vector<std::string> Module::parameter_names(const std::string& prefix) const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : named_parameters())
    if (name.compare(0, prefix.size(), prefix) == 0) names.push_back(name);
  return names;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (auto& [name, tensor] : named_parameters()) n += tensor.numel();
  return n;
}

void Module::load_state_dict(const NamedTensors& state) {
  const NamedTensors own = state_dict();
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, tensor] : state) {
    TL_CHECK(given.emplace(name, &tensor).second, "load_state_dict: tensor '" + name + "' appears twice");
  }
  for (const auto& [name, tensor] : own) {
    auto it = given.find(name);
    TL_CHECK(it != given.end(),
             "load_state_dict: missing tensor '" + name + "' (expected shape " + shape_str(tensor.shape()) + ")");
    const Tensor& source = *it->second;
    TL_CHECK(source.shape() == tensor.shape(), "load_state_dict: tensor '" + name + "' has shape " +
                                                   shape_str(source.shape()) + ", the model expects " +
                                                   shape_str(tensor.shape()));
    TL_CHECK(source.dtype() == tensor.dtype(), "load_state_dict: tensor '" + name + "' is " +
                                                   dtype_name(source.dtype()) + ", the model expects " +
                                                   dtype_name(tensor.dtype()));
    given.erase(it);
  }
  if (!given.empty()) {
    std::string extra;
    for (const auto& [name, tensor] : given) extra += (extra.empty() ? "" : ", ") + name;
    throw Error("load_state_dict: unexpected tensors not in the model: " + extra);
  }
  NoGradGuard no_grad;
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : state) by_name[name] = &tensor;
  for (auto& [name, tensor] : own) {
    Tensor target = tensor;
    target.copy_(*by_name[name]);
  }
}

std::set<BackendOp> Module::ops_used() const {
  std::set<BackendOp> ops;
  declare_ops(ops);
  for (const auto& [name, child] : children_) {
    const std::set<BackendOp> theirs = child->ops_used();
    ops.insert(theirs.begin(), theirs.end());
  }
  return ops;
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [name, tensor] : named_parameters()) {
    Tensor t = tensor;
    t.zero_grad(set_to_none);
  }
}

void Module::train(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->train(training);
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor) {
  tensor.set_requires_grad(true).set_name(name);
  set_memory_category(tensor, MemoryCategory::parameters);
  parameters_.emplace_back(name, tensor);
  return parameters_.back().second;
}

Tensor& Module::replace_parameter(const std::string& name, Tensor tensor) {
  for (auto& [own, t] : parameters_) {
    if (own != name) continue;
    tensor.set_requires_grad(true).set_name(name);
    set_memory_category(tensor, MemoryCategory::parameters);
    t = tensor;
    return t;
  }
  throw Error("replace_parameter: no parameter named '" + name + "' in this module");
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor) {
  TL_CHECK(!tensor.requires_grad(), "register_buffer: buffer '" + name + "' requires grad (a parameter?)");
  tensor.set_name(name);
  set_memory_category(tensor, MemoryCategory::parameters);
  buffers_.emplace_back(name, tensor);
  return buffers_.back().second;
}

// ---- layers ----

namespace {
Backend& init_backend(const InitOptions& init) { return init.backend ? *init.backend : default_backend(); }

Tensor uniform_init(const Shape& shape, std::int64_t fan_in, const InitOptions& init) {
  TL_CHECK(init.generator != nullptr, "layer initialisation needs a generator");
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return Tensor::uniform(shape, -bound, bound, *init.generator, init.dtype, init_backend(init));
}
}  // namespace

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, std::int64_t stride,
               std::int64_t padding, const InitOptions& init, bool has_bias)
    : options(Conv2dOptions::square(stride, padding)) {
  TL_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0, "Conv2d: channels and kernel size must be positive");
  const std::int64_t fan_in = in_channels * kernel_size * kernel_size;
  // kaiming_uniform(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
  weight =
      register_parameter("weight", uniform_init({out_channels, in_channels, kernel_size, kernel_size}, fan_in, init));
  if (has_bias) bias = register_parameter("bias", uniform_init({out_channels}, fan_in, init));
}

Tensor Conv2d::forward(const Tensor& x) {
  return bias.defined() ? conv2d(x, weight, bias, options) : conv2d(x, weight, options);
}

Linear::Linear(std::int64_t in_features, std::int64_t out_features, const InitOptions& init) {
  TL_CHECK(in_features > 0 && out_features > 0, "Linear: feature counts must be positive");
  weight = register_parameter("weight", uniform_init({out_features, in_features}, in_features, init));
  bias = register_parameter("bias", uniform_init({out_features}, in_features, init));
}

Tensor Linear::forward(const Tensor& x) {
  return split_ == LinearSplit::none ? linear(x, weight, bias) : forward_split(x, false, false);
}

Tensor Linear::forward_fused(const Tensor& x, bool relu) {
  return split_ == LinearSplit::none ? linear_fused(x, weight, bias, relu) : forward_split(x, true, relu);
}

void Linear::split(LinearSplit how, const std::shared_ptr<TensorParallelGroup>& group, const std::string& name,
                   std::int64_t blocks) {
  TL_CHECK(group != nullptr, "Linear::split: " + name + " needs a group");
  TL_CHECK(split_ == LinearSplit::none,
           "Linear::split: " + name + " is already split (" + linear_split_name(split_) + ")");
  if (how == LinearSplit::none) return;
  const int r = group->rank(), p = group->size();
  if (how == LinearSplit::columns) {
    const std::int64_t out = weight.size(0), in = weight.size(1);
    TL_CHECK(blocks >= 1 && out % blocks == 0, "Linear::split: " + name + "'s " + std::to_string(out) +
                                                   " output features are not " + std::to_string(blocks) + " blocks");
    const std::string what =
        name + "'s " + std::to_string(out / blocks) + " output features" + (blocks > 1 ? " per block" : "");
    weight = replace_parameter(
        "weight", tensor_slice(weight.view({blocks, out / blocks, in}), 1, r, p, what).view({out / p, in}));
    bias = replace_parameter("bias", tensor_slice(bias.view({blocks, out / blocks}), 1, r, p, what).view({out / p}));
  } else {
    weight = replace_parameter("weight", tensor_slice(weight, 1, r, p, name + "'s input features"));
  }
  split_ = how;
  group_ = group;
  name_ = name;
}

Tensor Linear::forward_split(const Tensor& x, bool fused, bool relu) {
  if (split_ == LinearSplit::columns) {
    const Tensor in = tp_enter(*group_, x, name_);
    if (fused) return linear_fused(in, weight, bias, relu);
    return relu ? trainlab::relu(linear(in, weight, bias)) : linear(in, weight, bias);
  }
  Tensor in = x;
  if (split_ == LinearSplit::rows_of_whole_input) {
    const std::int64_t part = weight.size(1);
    in = tp_enter(*group_, x, name_).narrow(1, group_->rank() * part, part).contiguous();
  }
  const Tensor y = bias_add(tp_reduce(*group_, linear(in, weight), name_), bias);
  return relu ? trainlab::relu(y) : y;
}

BatchNorm2d::BatchNorm2d(std::int64_t channels, const InitOptions& init, bool affine) {
  TL_CHECK(channels > 0, "BatchNorm2d: channels must be positive, got " + std::to_string(channels));
  Backend& be = init_backend(init);
  const DType stat = batch_norm_stat_dtype(init.dtype);
  if (affine) {
    weight = register_parameter("weight", Tensor::full({channels}, 1.0, stat, be));
    bias = register_parameter("bias", Tensor::full({channels}, 0.0, stat, be));
  }
  running_mean = register_buffer("running_mean", Tensor::full({channels}, 0.0, stat, be));
  running_var = register_buffer("running_var", Tensor::full({channels}, 1.0, stat, be));
}

Tensor BatchNorm2d::forward_fused(const Tensor& x, const Tensor& residual, bool relu) const {
  BatchNormOptions o = options;
  o.training = is_training();
  return batch_norm(x, weight, bias, running_mean, running_var, o, residual, relu);
}

LayerNorm::LayerNorm(std::int64_t width, const InitOptions& init, double epsilon) : eps(epsilon) {
  TL_CHECK(width > 0, "LayerNorm: width must be positive, got " + std::to_string(width));
  TL_CHECK(eps > 0, "LayerNorm: eps must be > 0, got " + std::to_string(eps));
  Backend& be = init_backend(init);
  const DType stat = batch_norm_stat_dtype(init.dtype);
  weight = register_parameter("weight", Tensor::full({width}, 1.0, stat, be));
  bias = register_parameter("bias", Tensor::full({width}, 0.0, stat, be));
}

Embedding::Embedding(std::int64_t vocab, std::int64_t width, const InitOptions& init, double std) {
  TL_CHECK(vocab > 0 && width > 0, "Embedding: vocab and width must be positive, got " + std::to_string(vocab) +
                                       " and " + std::to_string(width));
  TL_CHECK(std > 0, "Embedding: the initial std must be > 0, got " + std::to_string(std));
  TL_CHECK(init.generator != nullptr, "Embedding: InitOptions needs a generator");
  Backend& be = init_backend(init);
  weight = register_parameter(
      "weight", mul_scalar(Tensor::normal({vocab, width}, *init.generator, init.dtype, be), std).detach());
}

Dropout::Dropout(double probability) : p(probability) {
  TL_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got " + std::to_string(p));
}

Sequential& Sequential::add(std::shared_ptr<Module> module) { return add(std::to_string(layers_.size()), module); }

Sequential& Sequential::add(const std::string& name, std::shared_ptr<Module> module) {
  TL_CHECK(module != nullptr, "Sequential::add: layer '" + name + "' is null");
  register_module(name, module);
  layers_.push_back(std::move(module));
  return *this;
}

void Sequential::set_fused(bool fused) {
  fused_ = fused;
  Module::set_fused(fused);
}

std::size_t Sequential::forward_fused(std::size_t i, const Tensor& h, Tensor& out) const {
  auto layer = [this, i](std::size_t k) { return i + k < layers_.size() ? layers_[i + k].get() : nullptr; };
  const bool relu_next = dynamic_cast<const ReLU*>(layer(1)) != nullptr;
  if (const auto* conv = dynamic_cast<const Conv2d*>(layer(0))) {
    const auto* pool = dynamic_cast<const MaxPool2d*>(layer(2));
    const Pool2dOptions& po = pool != nullptr ? pool->options : Pool2dOptions{};
    const bool two_by_two = pool != nullptr && po.kernel_h == 2 && po.kernel_w == 2 && po.pad_h == 0 && po.pad_w == 0 &&
                            (po.stride_h == 0 || po.stride_h == 2) && (po.stride_w == 0 || po.stride_w == 2);
    if (relu_next && two_by_two && h.dim() == 4) {
      // conv -> ReLU -> pool is conv -> pool -> ReLU bit for bit (max-pooling commutes with the
      // ReLU: models/smallcnn/smallcnn.cpp), which is what the fused block and its composed form compute.
      out = conv2d_relu_max_pool2d(h, conv->weight, conv->bias, conv->options, po, h.memory_format());
      return 3;
    }
    out = conv2d_fused(h, conv->weight, conv->bias, relu_next, conv->options);
    return relu_next ? 2 : 1;
  }
  if (const auto* fc = dynamic_cast<const Linear*>(layer(0))) {
    out = linear_fused(h, fc->weight, fc->bias, relu_next);
    return relu_next ? 2 : 1;
  }
  if (const auto* pool = dynamic_cast<const MaxPool2d*>(layer(0)); pool != nullptr && relu_next) {
    out = max_pool2d_relu(h, pool->options);
    return 2;
  }
  if (auto* bn = dynamic_cast<BatchNorm2d*>(layers_[i].get()); bn != nullptr && relu_next) {
    out = bn->forward_fused(h, Tensor(), true);
    return 2;
  }
  return 0;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (std::size_t i = 0; i < layers_.size();) {
    Tensor out;
    const std::size_t took = fused_ ? forward_fused(i, h, out) : 0;
    if (took == 0) {
      h = layers_[i]->forward(h);
      ++i;
    } else {
      h = out;
      i += took;
    }
  }
  return h;
}

}  // namespace trainlab
