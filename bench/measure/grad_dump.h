// A registered model's loss and every parameter gradient for given weights and batch: what
// `trainlab grad-dump` writes, so another framework (PyTorch) can be compared on identical inputs.
#pragma once

#include <string>

#include "engine/core/state_dict.h"
#include "engine/core/tensor.h"
#include "engine/nn/model_registry.h"
#include "engine/train/step.h"

namespace trainlab::bench {

struct GradDumpOptions {
  std::string model = "smallcnn";  // a registered model (engine/nn/model_registry.h)
  ModelOptions model_options;
  std::string backend;       // empty: the default CPU backend
  DType dtype = DType::f32;  // f32 | bf16 (autocast, f32 master weights) | f64
  MemoryFormat layout = MemoryFormat::contiguous;
  bool fuse = false;
};

// weights: the model's state dict (SmallCNN: conv1.weight, ...), f32 (f64 for dtype f64). batch:
// "images" [N, C, H, W] f32 (the model is built for that sample shape and the classes its weights
// say) and "labels" [N] i64. Returns "loss" (a 0-d f32 tensor) and one f32 (f64)
// gradient per parameter under the parameter's name. Errors name the file and what is wrong; a
// combination the backend cannot run is refused before any work (the planner, engine/train/step.h), and
// `plan`, when given, receives what ran natively and what was emulated.
NamedTensors model_gradients(const NamedTensors& weights, const NamedTensors& batch, const GradDumpOptions& options,
                             StepPlan* plan = nullptr);

// The same, reading and writing safetensors files (the output is written atomically; its metadata
// says what was emulated, under "emulated", "" when nothing was).
// Returns the number of gradients written.
std::size_t grad_dump(const std::string& weights_path, const std::string& batch_path, const std::string& out_path,
                      const GradDumpOptions& options);

}  // namespace trainlab::bench
