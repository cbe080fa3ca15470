// MLP: the smallest registered model (`--model mlp`): the sample flattened, one hidden layer with a
// ReLU, a linear head. Any sample shape; a model for the tests and for checking a tool's --model
// path end to end in seconds, and the example of what adding a model takes (this folder and one
// line of models/registry.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "engine/nn/model_registry.h"
#include "engine/nn/module.h"

namespace trainlab {

//   flatten -> fc1 Linear(prod(sample), hidden) -> relu ReLU -> fc2 Linear(hidden, classes)
// A Sequential of the engine's layers: fused (--fuse), fc1 and its ReLU are one linear_fused call on
// every backend, with no code here (engine/nn/module.h).
class Mlp : public Sequential {
 public:
  Mlp(const InitOptions& init, std::int64_t inputs, std::int64_t hidden, std::int64_t classes);
  Tensor forward(const Tensor& x) override;
  double flop_per_sample(bool forward_only) const override;
  // Megatron's MLP (engine/nn/tensor_parallel.h): fc1 by columns (each rank its hidden units), fc2
  // by rows; `hidden` must divide over the ranks.
  void split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;
  std::shared_ptr<Linear> fc1, fc2;
};

// The registry's entry: key `hidden` (1..65536, default 128).
ModelDef mlp_model();

}  // namespace trainlab
