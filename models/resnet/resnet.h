// ResNet for small images (He et al. 2016, section 4.2: the CIFAR-10 networks): `--model resnet`.
// A 3x3 stem, three stages of n basic blocks each (widths w, 2w, 4w; the second and third start
// with a stride-2 block), global average pooling and a linear head: 6n + 2 layers, ResNet-20 at
// n = 3 (0.27M parameters at w = 16), ResNet-56 at n = 9, ResNet-110 at n = 18.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/nn/model_registry.h"
#include "engine/nn/module.h"

namespace trainlab {

struct ResNetConfig {
  std::int64_t depth = 3;           // basic blocks per stage (n)
  std::int64_t width = 16;          // the first stage's channels (w)
  bool conv_shortcut = false;       // a downsampling block's shortcut: false the parameter-free option A
                                    // (subsample, zero channels), true option B (1x1 conv + batch norm)
  bool zero_init_residual = false;  // each block's last batch norm starts at gamma 0 (Goyal et al. 2017)
  double dropout = 0;               // before the head (0: none)
  // Eval mode, fused: each convolution and its batch norm as one backend call that folds the norm
  // into the convolution (conv2d_batch_norm, FusedPattern::conv_norm). Off by default: on the
  // oneDNN backend here the convolution with its bias, sum and ReLU post-ops measured slower than
  // the convolution alone and batch norm's own pass (docs/RESULTS.md, the ResNet section).
  bool fold_norm = false;
};

// The basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), both convolutions 3x3 and
// bias-free; the first strided where the block downsamples. The shortcut is x itself, or where the
// shape changes the padded subsample (option A) or downsample.0/1 (option B: 1x1 conv, batch norm).
// Fused (--fuse), each batch norm takes its ReLU, and the second its residual add too, in its own
// passes (FusedPattern::norm); unfused, the ops run one by one.
class BasicBlock : public Module {
 public:
  BasicBlock(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride, const ResNetConfig& config,
             const InitOptions& init);
  Tensor forward(const Tensor& x) override;
  void set_fused(bool fused) override { fused_ = fused; }
  std::shared_ptr<Conv2d> conv1, conv2, down_conv;
  std::shared_ptr<BatchNorm2d> bn1, bn2, down_bn;
  std::int64_t in_channels, out_channels, stride;
  bool fold_norm = false;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override {
    ops.insert({BackendOp::relu, BackendOp::elementwise});  // the composed ReLU and add; the pad's fill and copy
  }

 private:
  bool fused_ = false;
};

class ResNet : public Module {
 public:
  ResNet(const InitOptions& init, const ModelInput& input, const ResNetConfig& config);
  Tensor forward(const Tensor& x) override;
  void set_fused(bool fused) override;
  // convs: each basic block keeps only its input and runs again in backward; all: the stem too.
  void set_recompute(Recompute mode) override { recompute_ = mode; }
  Recompute recompute() const override { return recompute_; }
  // No weight decay on batch norm's parameters and on biases (parameter groups, as the field trains
  // residual networks).
  bool decays(const std::string& name) const override { return no_decay_.count(name) == 0; }
  double flop_per_sample(bool forward_only) const override;
  // The forward as the memory estimate sees it (models/resnet/resnet_memory.cpp): each block's ops in
  // recording order with what they allocate, save and make in backward, the residual's gradient as
  // the chain's second path (ChainSide), fused or composed as set, recomputation per block.
  std::vector<ChainOp> memory_chain(const ChainShape& shape, Backend& backend) const override;
  // stem, each basic block (layer1.0 ...), head (pooling and fc): the forward, for pipeline stages
  // (Module::parts).
  std::vector<ModelPart> parts() override;
  // The head cut by rows (engine/nn/tensor_parallel.h): each rank its slice of the pooled features,
  // the partial logits summed; the convolutions replicated. The last stage's width must divide.
  void split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;
  const ResNetConfig& config() const { return config_; }
  bool fused() const { return fused_; }
  const ModelInput& input() const { return input_; }
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::vector<std::shared_ptr<BasicBlock>> blocks;
  std::shared_ptr<Linear> fc;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override {
    ops.insert({BackendOp::relu, BackendOp::avg_pool, BackendOp::dropout});
  }

 private:
  // The forward's pieces, shared with parts(): the stem, block i (each recomputed as set), the head.
  Tensor stem(const Tensor& x);
  Tensor block(std::size_t i, const Tensor& h);
  Tensor head(const Tensor& h);
  ResNetConfig config_;
  ModelInput input_;
  std::vector<std::string> block_names_;  // "layer1.0", as registered
  bool fused_ = false;
  Recompute recompute_ = Recompute::none;
  std::set<std::string> no_decay_;
};

// The registry's entry (models/registry.cpp): keys depth, width, shortcut, zero_init, dropout.
ModelDef resnet_model();

}  // namespace trainlab
