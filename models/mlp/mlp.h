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

//   flatten -> fc1 Linear(prod(sample), hidden) ReLU -> fc2 Linear(hidden, classes)
class Mlp : public Module {
 public:
  Mlp(const InitOptions& init, std::int64_t inputs, std::int64_t hidden, std::int64_t classes);
  Tensor forward(const Tensor& x) override;
  double flop_per_sample(bool forward_only) const override;
  std::shared_ptr<Linear> fc1, fc2;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert({BackendOp::relu, BackendOp::elementwise}); }
};

// The registry's entry: key `hidden` (1..65536, default 128).
ModelDef mlp_model();

}  // namespace trainlab
