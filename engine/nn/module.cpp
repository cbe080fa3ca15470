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

void Module::set_fused(bool fused) {
  for (auto& [name, child] : children_) child->set_fused(fused);
}

// ---- Module ----

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, tensor] : parameters_) out.emplace_back(prefix + name, tensor);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
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
  const NamedTensors own = named_parameters();
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
               std::int64_t padding, const InitOptions& init)
    : options(Conv2dOptions::square(stride, padding)) {
  TL_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0, "Conv2d: channels and kernel size must be positive");
  const std::int64_t fan_in = in_channels * kernel_size * kernel_size;
  // kaiming_uniform(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
  weight =
      register_parameter("weight", uniform_init({out_channels, in_channels, kernel_size, kernel_size}, fan_in, init));
  bias = register_parameter("bias", uniform_init({out_channels}, fan_in, init));
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, options); }

Linear::Linear(std::int64_t in_features, std::int64_t out_features, const InitOptions& init) {
  TL_CHECK(in_features > 0 && out_features > 0, "Linear: feature counts must be positive");
  weight = register_parameter("weight", uniform_init({out_features, in_features}, in_features, init));
  bias = register_parameter("bias", uniform_init({out_features}, in_features, init));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Sequential& Sequential::add(std::shared_ptr<Module> module) {
  register_module(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace trainlab
