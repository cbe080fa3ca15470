// SmallCNN: the model the trainlab command, the ladder and the comparisons against PyTorch train by
// default (`--model smallcnn`). A Module built from the engine's layers, like any driver's model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/nn/model_registry.h"
#include "engine/nn/module.h"

namespace trainlab {

// The input a SmallCNN is built for: a data set's sample shape and class count. The default is
// SyntheticImages' (3x32x32, 10 classes), the shape every golden weight was recorded with.
struct SmallCNNShape {
  std::int64_t channels = 3, height = 32, width = 32, classes = 10;
  // Throws Error naming the shape when SmallCNN cannot take it (channels 1..4096, height and width
  // 4..4096: two 2x2 pools leave at least one pixel; classes 2..16777216).
  void check() const;
  std::int64_t pooled_height() const { return height / 4; }  // after the two 2x2 pools (floor)
  std::int64_t pooled_width() const { return width / 4; }
  std::int64_t flat() const { return 64 * pooled_height() * pooled_width(); }  // fc1's inputs
  std::string str() const;                                                     // "3x32x32, 10 classes"
  bool operator==(const SmallCNNShape&) const = default;
};

// The model the trainlab command trains, for input [N, C, H, W] (SyntheticImages': [N, 3, 32, 32]) ->
//   conv1 Conv2d(C, 32, 3, pad 1) ReLU MaxPool2d(2) -> conv2 Conv2d(32, 64, 3, pad 1) ReLU
//   MaxPool2d(2) -> flatten -> fc1 Linear(64 * H/4 * W/4, 256) ReLU -> fc2 Linear(256, classes).
// Parameters are initialised in the order conv1, conv2, fc1, fc2 (weight, then bias).
// Activations follow the input's memory format (give it a channels_last input for NHWC). With
// set_fused(true) each conv and linear does its bias and ReLU in the same kernel call; without
// gradients (inference) each conv block is one conv2d_relu_max_pool2d (the second writes NCHW, so
// that fc1 reads it without the flatten's copy), and in training the first one is, where the
// backend fuses it (its input needs no gradient: conv1's output and its gradient stay out of memory).
class SmallCNN : public Module {
 public:
  static constexpr std::int64_t kChannels = 3, kHeight = 32, kWidth = 32, kClasses = 10;
  explicit SmallCNN(const InitOptions& init, const SmallCNNShape& shape = {});
  Tensor forward(const Tensor& x) override;
  // Fused, without gradients, on a backend that fuses a conv block for inference
  // (Backend::supports_fused, FusedPattern::conv_block(false)): the batch as delivered (conv1 reads NCHW where it
  // lies). In training, where conv1's block is one op (FusedPattern::conv_block(true): fused, no recomputation), the
  // batch as delivered too.
  Tensor forward_in(const Tensor& x, MemoryFormat layout) override;
  const SmallCNNShape& shape() const { return shape_; }
  void set_fused(bool fused) override { fused_ = fused; }
  // convs: each conv block (conv, ReLU, pool) keeps only its input and is recomputed in backward;
  // all: the classifier (flatten, fc1, ReLU, fc2) too.
  void set_recompute(Recompute mode) override { recompute_ = mode; }
  Recompute recompute() const override { return recompute_; }
  bool fused() const { return fused_; }
  // Floating-point operations per sample (2 x the multiply-adds of the convolutions and linears):
  // the forward, and for training also the backward-data of every layer but the first and the
  // backward-weights of every layer. Analytic, for GFLOP/s figures.
  static double flops(bool forward_only, const SmallCNNShape& shape = {});
  double flop_per_sample(bool forward_only) const override { return flops(forward_only, shape_); }
  // The forward as the memory estimate sees it (fused or not, as set): every tensor each op
  // allocates and saves, and what its backward allocates.
  std::vector<ChainOp> memory_chain(const ChainShape& shape, Backend& backend) const override;
  // Whether training runs conv1's block as one op (conv2d_relu_max_pool2d with the pool's places:
  // fused, no recomputation, and the backend fuses the shape in `dtype`) for a batch of `batch` in
  // x's layout, the activations in `layout`.
  bool first_block_fused(Backend& backend, DType dtype, std::int64_t batch, bool x_channels_last,
                         MemoryFormat layout) const;
  // conv1, conv2, fc1 (the flatten, fc1 and its ReLU), fc2: the training forward in NCHW without
  // recomputation, for pipeline stages (Module::parts).
  std::vector<ModelPart> parts() override;
  // Megatron's split of the classifier (engine/nn/tensor_parallel.h): fc1 by columns (each rank its
  // hidden units), fc2 by rows; the convolutions replicated. fc1's width must divide over the ranks.
  void split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<Linear> fc1, fc2;

 protected:
  // Beyond its layers': the ReLUs and pools its forward calls, and the flatten's copy.
  void declare_ops(std::set<BackendOp>& ops) const override {
    ops.insert({BackendOp::relu, BackendOp::max_pool2d, BackendOp::elementwise});
  }

 private:
  // The forward with activations in `layout` (x is in it, or read where it lies by the fused
  // inference blocks).
  Tensor forward_layers(const Tensor& x, MemoryFormat layout);
  void check_input(const Tensor& x) const;  // [N, C, H, W] as built for, else Error naming it
  // The layers the forward and the parts share: a conv block (conv, bias, ReLU, 2x2 pool), conv1's
  // block as one op (activations in `layout`), the flatten with fc1 and its ReLU, fc2.
  Tensor block(const Conv2d& conv, const Tensor& in) const;
  Tensor first_block_fused(const Tensor& in, MemoryFormat layout) const;
  Tensor hidden(const Tensor& in) const;
  Tensor logits(const Tensor& h) const;
  bool inference_blocks(const Tensor& x) const;
  SmallCNNShape shape_;
  bool fused_ = false;
  Recompute recompute_ = Recompute::none;
};

// The registry's entry (models/registry.cpp): `--model smallcnn`, no keys of its own, built for any
// image data set of 1..4096 channels and at least 4x4 pixels.
ModelDef smallcnn_model();

}  // namespace trainlab
