// Modules: named parameters with PyTorch state-dict names, the layers (Conv2d, Linear, ReLU,
// MaxPool2d, BatchNorm2d, Dropout, GlobalAvgPool2d, LayerNorm, Embedding, GELU, Flatten) and
// Sequential. A model is a Module; SmallCNN (models/smallcnn/smallcnn.h) is one, and a driver builds
// its own from these layers (examples/own_model_and_data).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/ops.h"
#include "engine/core/rng.h"
#include "engine/core/state_dict.h"
#include "engine/core/tensor.h"
#include "engine/instrument/memory_model.h"
#include "engine/nn/tensor_parallel.h"

namespace trainlab {

// Activation recomputation (`recompute`): none; the convolution blocks; every block. A model
// marks its blocks with checkpoint() (engine/core/autograd.h); which blocks a level covers is its own.
enum class Recompute { none, convs, all };
const char* recompute_name(Recompute mode);  // "none", "convs", "all"

// A model's forward as a chain of parts, for cutting it into pipeline stages (comm/pipeline.h):
// parts[0] takes the batch's inputs as the step delivers them, each next part the output of the one
// before, and the last gives the logits; composed, they are the model's forward (the same ops on the
// same values). `parameters` names (dotted, as named_parameters) those a part reads: a tied weight
// appears in two parts.
struct ModelPart {
  std::string name;  // "conv1", "h.0", "head"
  std::function<Tensor(const Tensor&)> forward;
  std::vector<std::string> parameters;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // The forward of a batch as it was delivered, computed in `layout` (the step's --layout): the
  // default reorders the batch to `layout` first. A model that can read it where it lies overrides
  // this (SmallCNN's fused inference blocks read an NCHW batch as it is).
  virtual Tensor forward_in(const Tensor& x, MemoryFormat layout) { return forward(x.contiguous(layout)); }

  // Every parameter, depth first in registration order, with dotted names ("conv1.weight").
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::int64_t num_parameters() const;
  // Every buffer (state that is not trained by gradients: batch norm's running statistics), named
  // as the parameters are.
  NamedTensors named_buffers() const;
  // The parameters and buffers as PyTorch's state_dict() names and orders them: per module its
  // parameters, then its buffers, then its children's (SmallCNN has no buffers: its parameters).
  NamedTensors state_dict() const;
  // Copies values in. Strict: the names must match exactly, and each shape and dtype; the error
  // names the offending tensor.
  void load_state_dict(const NamedTensors& state);
  // Whether the optimiser's weight decay applies to a parameter (by its dotted name): the model's
  // parameter groups. The default: every parameter (SmallCNN, whose PyTorch twin decays them all);
  // a model with norms says no for their weights and for biases (models/resnet/).
  virtual bool decays(const std::string& name) const {
    (void)name;
    return true;
  }
  void zero_grad(bool set_to_none = false);
  void train(bool training = true);
  // This model's forward as a chain of ops at a batch size, compute dtype and layout, for the
  // memory estimate (engine/instrument/memory_model.h); the backend sizes its workspaces. Empty (the
  // default): the model does not describe itself, and only its persistent state is estimated.
  virtual std::vector<ChainOp> memory_chain(const ChainShape& shape, Backend& backend) const {
    (void)shape;
    (void)backend;
    return {};
  }
  // The backend ops this model's forward runs (and so its backward), for the planner that asks the
  // backend about each before the first step (engine/train/step.h): its own (declare_ops) and its
  // children's, depth first.
  std::set<BackendOp> ops_used() const;
  void eval() { train(false); }
  // The recomputation level. The default supports only none: a model without blocks marked for
  // recomputation refuses the others, naming them.
  virtual void set_recompute(Recompute mode);
  virtual Recompute recompute() const { return Recompute::none; }
  // Fusion (--fuse): each conv and linear with its bias and activation in one kernel call, and the
  // backend's fused patterns (backends/fusion.h) wherever it runs them. The default hands it to
  // every child; a model with a forward of its own keeps it too.
  virtual void set_fused(bool fused);
  // Analytic floating-point operations per sample (2 x the multiply-adds of the convolutions and
  // matmuls): the forward, and for training the backward too, for GFLOP/s figures. 0: not said.
  virtual double flop_per_sample(bool forward_only) const {
    (void)forward_only;
    return 0;
  }
  bool is_training() const { return training_; }
  // The forward as parts (ModelPart above); empty (the default): the model cannot be cut.
  virtual std::vector<ModelPart> parts() { return {}; }
  // The dotted names of the parameters under `prefix` ("transformer.h.0."), for a part's list.
  std::vector<std::string> parameter_names(const std::string& prefix) const;
  // Tensor parallelism (engine/nn/tensor_parallel.h): keeps this rank's slice of the layers the
  // model cuts across the group and runs them cut from then on (the whole model built first, from
  // the same seed on every rank). The default: the model has no such split (Error naming it).
  virtual void split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group);

 protected:
  // The ops this module runs itself, beyond its children's: a layer's own, or the relu, add and
  // pooling a custom forward calls directly. An op left undeclared is still refused by its kernel,
  // with the same message, but only when the step reaches it.
  virtual void declare_ops(std::set<BackendOp>& ops) const { (void)ops; }
  Tensor& register_parameter(const std::string& name, Tensor tensor);
  // A buffer: module state outside autograd (never requires grad), saved and loaded with the parameters.
  Tensor& register_buffer(const std::string& name, Tensor tensor);
  // Puts `tensor` in place of the registered parameter `name` (a layer cut to its slice), as
  // register_parameter would have registered it; the caller keeps its member in step.
  Tensor& replace_parameter(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out, bool parameters, bool buffers) const;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Where a layer's parameters live and how they are drawn.
struct InitOptions {
  Generator* generator;  // required
  DType dtype = DType::f32;
  Backend* backend = nullptr;  // nullptr: default_backend()
};

// PyTorch's default init for Conv2d and Linear: weight ~ kaiming_uniform(a = sqrt(5)), which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)); drawn
// weight first, then bias, from the given generator.
class Conv2d : public Module {
 public:
  // bias false: no bias parameter (a convolution followed by batch norm, whose shift is the bias).
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, std::int64_t stride,
         std::int64_t padding, const InitOptions& init, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  Conv2dOptions options;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert({BackendOp::conv2d, BackendOp::bias_add}); }
};

class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, const InitOptions& init);
  Tensor forward(const Tensor& x) override;
  // With the bias and, when `relu`, the ReLU in the linear's kernel call (linear_fused); cut by
  // rows, the bias and ReLU come after the sum.
  Tensor forward_fused(const Tensor& x, bool relu);
  // Keeps rank group->rank()'s slice (engine/nn/tensor_parallel.h): by columns, the weight's output
  // rows and the bias; by rows, the weight's input columns (the bias whole, added after the sum).
  // `name` names the layer in the group's timings and in errors ("transformer.h.0.mlp.c_fc").
  // `blocks` > 1 cuts the output features as that many equal blocks, each sliced alike (the GPT's
  // c_attn: q, k and v, each rank its heads of all three).
  void split(LinearSplit split, const std::shared_ptr<TensorParallelGroup>& group, const std::string& name,
             std::int64_t blocks = 1);
  LinearSplit split_kind() const { return split_; }
  Tensor weight, bias;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert({BackendOp::linear, BackendOp::bias_add}); }

 private:
  Tensor forward_split(const Tensor& x, bool fused, bool relu);
  LinearSplit split_ = LinearSplit::none;
  std::shared_ptr<TensorParallelGroup> group_;
  std::string name_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::relu); }
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0)
      : options(Pool2dOptions::square(kernel_size, stride)) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  Pool2dOptions options;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::max_pool2d); }
};

// Batch norm over the channels of [N, C, H, W] (or [N, C]), PyTorch's BatchNorm2d: weight 1 and
// bias 0 at first (or no affine), running_mean 0 and running_var 1 as buffers (f32, or f64 in an f64
// model), momentum 0.1, eps 1e-5. Training uses and updates the batch's statistics, eval the
// running ones. forward_fused adds a residual and then a ReLU in the same op (FusedPattern::norm).
class BatchNorm2d : public Module {
 public:
  BatchNorm2d(std::int64_t channels, const InitOptions& init, bool affine = true);
  Tensor forward(const Tensor& x) override { return forward_fused(x, Tensor(), false); }
  Tensor forward_fused(const Tensor& x, const Tensor& residual, bool relu) const;
  Tensor weight, bias, running_mean, running_var;
  BatchNormOptions options;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::batch_norm); }
};

// Inverted dropout with probability p in training (engine/core/ops.h, dropout), the identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  double p;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::dropout); }
};

// [N, C, H, W] -> [N, C]: each plane's mean.
class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool2d(x); }

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::avg_pool); }
};

// Layer norm over the last dimension, PyTorch's LayerNorm(width): weight 1 and bias 0 at first
// (f32, or f64 in an f64 model), eps 1e-5.
class LayerNorm : public Module {
 public:
  LayerNorm(std::int64_t width, const InitOptions& init, double eps = 1e-5);
  Tensor forward(const Tensor& x) override { return layer_norm(x, weight, bias, eps); }
  Tensor weight, bias;
  double eps;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::layer_norm); }
};

// A [vocab, width] table of rows picked by i64 indices, PyTorch's Embedding: weight ~ N(0, std^2)
// (PyTorch's default std 1; GPT-2 draws 0.02).
class Embedding : public Module {
 public:
  Embedding(std::int64_t vocab, std::int64_t width, const InitOptions& init, double std = 1.0);
  Tensor forward(const Tensor& indices) override { return embedding(indices, weight); }
  Tensor weight;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::embedding); }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::gelu); }
};

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.flatten(1); }

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::elementwise); }  // the copy
};

// Layers in order, named "0", "1", ... as torch.nn.Sequential names them, or as given. Fused
// (set_fused(true)), its forward takes the runs of layers that form a pattern of backends/fusion.h
// in one op each, wherever the backend runs it (Backend::supports_fused), and composes the rest:
//   Conv2d ReLU MaxPool2d(2x2, stride 2)  conv2d_relu_max_pool2d (the block in one call where fused)
//   Conv2d [ReLU]                         conv2d_fused: the bias and ReLU in the convolution's call
//   Linear [ReLU]                         linear_fused
//   MaxPool2d ReLU                        max_pool2d_relu
//   BatchNorm2d ReLU                      batch_norm with its ReLU in the same passes
// Any model built of these layers gets the backend's fusions with no code of its own.
class Sequential : public Module {
 public:
  Sequential& add(std::shared_ptr<Module> module);
  Sequential& add(const std::string& name, std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  void set_fused(bool fused) override;
  bool fused() const { return fused_; }
  std::size_t size() const { return layers_.size(); }

 private:
  // The fused op for the run of layers starting at `i` where one applies: the layers it took (0:
  // none, compose layer i).
  std::size_t forward_fused(std::size_t i, const Tensor& h, Tensor& out) const;
  std::vector<std::shared_ptr<Module>> layers_;
  bool fused_ = false;
};

}  // namespace trainlab
