// SmallCNN: the model the trainlab command, the ladder and the comparisons against PyTorch train.
// A Module built from the engine's layers, like any driver's model.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/nn.h"

namespace trainlab {

// The model the trainlab command trains: input [N, 3, 32, 32] ->
//   conv1 Conv2d(3, 32, 3, pad 1) ReLU MaxPool2d(2) -> conv2 Conv2d(32, 64, 3, pad 1) ReLU
//   MaxPool2d(2) -> flatten -> fc1 Linear(4096, 256) ReLU -> fc2 Linear(256, 10).
// Parameters are initialised in the order conv1, conv2, fc1, fc2 (weight, then bias).
// Activations follow the input's memory format (give it a channels_last input for NHWC). With
// set_fused(true) each conv and linear does its bias and ReLU in the same kernel call.
class SmallCNN : public Module {
 public:
  static constexpr std::int64_t kChannels = 3, kHeight = 32, kWidth = 32, kClasses = 10;
  explicit SmallCNN(const InitOptions& init);
  Tensor forward(const Tensor& x) override;
  void set_fused(bool fused) { fused_ = fused; }
  // convs: each conv block (conv, ReLU, pool) keeps only its input and is recomputed in backward;
  // all: the classifier (flatten, fc1, ReLU, fc2) too.
  void set_recompute(Recompute mode) override { recompute_ = mode; }
  Recompute recompute() const override { return recompute_; }
  bool fused() const { return fused_; }
  // Floating-point operations per sample (2 x the multiply-adds of the convolutions and linears):
  // the forward, and for training also the backward-data of every layer but the first and the
  // backward-weights of every layer. Analytic, for GFLOP/s figures.
  static double flop_per_sample(bool forward_only);
  // The forward as the memory estimate sees it (fused or not, as set): every tensor each op
  // allocates and saves, and what its backward allocates.
  std::vector<ChainOp> memory_chain(const ChainShape& shape, Backend& backend) const override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<Linear> fc1, fc2;

 protected:
  // Beyond its layers': the ReLUs and pools its forward calls, and the flatten's copy.
  void declare_ops(std::set<BackendOp>& ops) const override {
    ops.insert({BackendOp::relu, BackendOp::max_pool2d, BackendOp::elementwise});
  }

 private:
  bool fused_ = false;
  Recompute recompute_ = Recompute::none;
};

}  // namespace trainlab
