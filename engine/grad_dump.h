// SmallCNN's loss and every parameter gradient for given weights and batch: what
// `trainlab grad-dump` writes, so another framework (PyTorch) can be compared on identical inputs.
#pragma once

#include <string>

#include "engine/state_dict.h"
#include "engine/step.h"
#include "engine/tensor.h"

namespace trainlab {

struct GradDumpOptions {
  std::string backend;       // empty: the default CPU backend
  DType dtype = DType::f32;  // f32 | bf16 (autocast, f32 master weights) | f64
  MemoryFormat layout = MemoryFormat::contiguous;
  bool fuse = false;
};

// weights: SmallCNN's state dict (conv1.weight, ...), f32 (f64 for dtype f64). batch: "images"
// [N, 3, 32, 32] f32 and "labels" [N] i64. Returns "loss" (a 0-d f32 tensor) and one f32 (f64)
// gradient per parameter under the parameter's name. Errors name the file and what is wrong; a
// combination the backend cannot run is refused before any work (the planner, engine/step.h), and
// `plan`, when given, receives what ran natively and what was emulated.
NamedTensors smallcnn_gradients(const NamedTensors& weights, const NamedTensors& batch, const GradDumpOptions& options,
                                StepPlan* plan = nullptr);

// The same, reading and writing safetensors files (the output is written atomically; its metadata
// says what was emulated, under "emulated", "" when nothing was).
// Returns the number of gradients written.
std::size_t grad_dump(const std::string& weights_path, const std::string& batch_path, const std::string& out_path,
                      const GradDumpOptions& options);

}  // namespace trainlab
