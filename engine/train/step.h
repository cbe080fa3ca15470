// One training step, shared by every tool: the trainer, `trainlab throughput`, the ladder (through
// the trainer) and the study drivers. A step is `accumulate` micro-steps (each: wait for a batch,
// forward to the loss under autocast, backward, the DDP hooks; the loss scaled by 1/accumulate)
// and then the optimiser (through the f16 loss scaler when there is one). After a few eager steps
// it can capture one micro-step's forward and backward as device graphs and replay them
// (cuda_graph). Every phase is timed with the backend's own timer (CUDA events on a GPU, a steady
// clock on the CPU), with a device synchronise at each boundary so that an asynchronous backend is
// not credited with work it has only queued, and recorded as a profiler span.
//
//   StepRunner runner(backend, model, optimizer, options);
//   StepResult r = runner.step([&] { return loader.next(); });   // r.loss, r.phases, r.seconds
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/loader.h"
#include "engine/nn/module.h"
#include "engine/optim/grad_scaler.h"
#include "engine/optim/optim.h"
#include "engine/train/distributed.h"
#include "engine/train/step_graph.h"

namespace trainlab {

// Seconds spent in each phase of a step (or their totals over several).
struct PhaseTimes {
  double data_wait_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  // data parallel: the gradient all-reduce still running after backward (exposed), plus, with
  // sharded optimiser state, the parameters' all-gather after the update
  double comm_s = 0;
  double total() const { return data_wait_s + forward_s + backward_s + optimizer_s + comm_s; }
  PhaseTimes& operator+=(const PhaseTimes& other);
};

struct StepOptions {
  DType dtype = DType::f32;  // compute dtype; bf16/f16 autocast over f32 master weights
  MemoryFormat layout = MemoryFormat::contiguous;
  std::int64_t accumulate = 1;  // micro-steps per optimiser step
  // Device graphs: eager for this many steps (so that every buffer the step creates exists), then
  // one micro-step captured and replayed from the next step on.
  bool cuda_graph = false;
  std::int64_t eager_steps_before_capture = 2;
  // Labels are checked against this on the host before a replayed forward reads them (a graph
  // cannot report a bad label); 0: not checked.
  std::int64_t num_classes = 0;
  // Without a loss scaler, every step checks its loss and gradients for NaN and inf before the
  // update (one sum per gradient, read back together) and does not apply a non-finite update.
  bool check_finite = true;
  // Clip the gradients' global norm to this before the update (0: off); StepResult::grad_norm
  // says the norm before clipping.
  double grad_clip = 0;
};

// What the backend runs for each op of a step, asked before the first one (the planner, ggml's
// supports_op): the model's ops (Module::ops_used) in the compute dtype and layout, the loss, the
// casts and the optimiser in theirs. An op the backend cannot run is one Unsupported error, naming
// the op, the dtype, the layout, the backend, its ISA and what would work, before any work.
struct PlannedOp {
  BackendOp op;
  DType dtype;
  bool channels_last;
  OpSupport support;
};
struct StepPlan {
  std::string backend, isa;
  std::vector<PlannedOp> ops;
  // The ops that are emulated: "conv2d bf16 (f32 primitives between bf16 reorders: ...); linear
  // bf16 (...)"; "" when every op runs natively.
  std::string emulated() const;
  // Every op in a few words: "conv2d bf16 emulated, linear bf16 emulated, relu bf16 native, ...".
  std::string summary() const;
  // Every op as ("conv2d bf16", "emulated"), for ledger rows and JSON.
  std::vector<std::pair<std::string, std::string>> paths() const;
};
StepPlan plan_step(const Backend& backend, const Module& model, const StepOptions& options);

// A step whose loss or gradient is NaN or inf, under NonFinitePolicy::stop: the run ends with this
// error (the trainlab command exits with status 3), and nothing is updated or saved.
class TrainingDiverged : public Error {
 public:
  explicit TrainingDiverged(const std::string& message) : Error(message) {}
};

struct StepResult {
  double loss = 0;       // the step's mean loss over its micro-steps
  PhaseTimes phases;     // this step's
  double seconds = 0;    // the whole step, as the backend's timer saw it (a graph capture excluded)
  DdpStepStats ddp;      // data parallel: the synchronised micro-step's communication
  bool skipped = false;  // the update was not applied: f16's scaler skipped it, or `nonfinite`
  // What was NaN or inf, when something was ("the loss", "the gradient of conv1.weight"); the
  // update is then not applied, whatever the policy (the trainer stops or counts the skip).
  std::string nonfinite;
  bool replayed = false;  // forward and backward ran from captured graphs
  double grad_norm = -1;  // with grad_clip: the gradients' global norm before clipping (-1: not computed)
};

class StepRunner {
 public:
  // `model` and `optimizer` (over the model's parameters) must outlive the runner; so must
  // `scaler` (f16: required) and `parallel` (data parallel; null: one process) when given.
  StepRunner(Backend& backend, Module& model, Optimizer& optimizer, const StepOptions& options,
             GradScaler* scaler = nullptr, DataParallel* parallel = nullptr);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // One optimiser step on `accumulate` batches from `next_batch` (its time is the data wait).
  StepResult step(const std::function<Batch()>& next_batch);
  // The model's output for `inputs` (images in the run's layout, or token ids) under autocast, recorded for autograd
  // unless grad mode is off (evaluation and inference turn it off).
  Tensor forward(const Tensor& inputs);
  // Inference: one timed forward without gradients (its time in phases.forward_s).
  StepResult infer(const Batch& batch);

  std::int64_t steps() const { return steps_; }  // optimiser steps run by this runner
  const StepOptions& options() const { return options_; }
  DType param_dtype() const { return param_dtype_; }
  bool replaying() const { return graph_ != nullptr; }
  const StepPlan& plan() const { return plan_; }  // what the backend runs, asked before the first step

 private:
  DType autocast_dtype() const;                // the compute dtype under mixed precision, else f32 (off)
  Tensor model_forward(const Tensor& inputs);  // layout, input dtype, the model; inside an autocast scope
  // ZeRO-3 (DataParallel::shards_parameters): the model as its parts, each between the hooks that
  // gather its parameters and release them (the whole model as one unit when it has no parts).
  Tensor sharded_forward(const Tensor& inputs);
  Tensor forward_loss(const Tensor& inputs, const Tensor& labels);
  void stage_for_graph(const Batch& batch);
  Timer& timer(const char* phase);         // one per phase name, made by the backend, reused
  std::string first_nonfinite_gradient();  // "" when every gradient is finite
  // The optimiser's gradients scaled so that their global norm is at most grad_clip; returns the
  // norm before (of the unscaled gradients under f16's loss scale; over the shards with sharded
  // optimiser state). A non-finite norm leaves them as they are.
  double clip_gradients();

  Backend& backend_;
  Module& model_;
  Optimizer& optimizer_;
  StepOptions options_;
  GradScaler* scaler_;
  DataParallel* parallel_;
  DType param_dtype_;  // f32 master weights for bf16/f16, else the compute dtype
  StepPlan plan_;
  std::unique_ptr<StepGraph> graph_;
  std::map<std::string, std::unique_ptr<Timer>> timers_;
  Tensor gradient_sums_;             // one element per parameter, for the finiteness check
  Tensor clip_sums_, clip_scratch_;  // per parameter its sum of squares (f64); a gradient's squares
  std::int64_t steps_ = 0;
  std::vector<ModelPart> parts_;  // ZeRO-3's, taken from the model at the first forward
  bool parts_taken_ = false;
};

// Inference on constant weights for as long as it lives (backends/backend.h, FrozenWeights): the
// backend may keep each weight in its primitive's layout from the first forward on. A backend
// without the capability runs as before. StepRunner::step refuses to run inside one (the update
// would go unseen by what was kept).
class FrozenWeightsScope {
 public:
  explicit FrozenWeightsScope(Backend& backend);
  ~FrozenWeightsScope();
  FrozenWeightsScope(const FrozenWeightsScope&) = delete;
  FrozenWeightsScope& operator=(const FrozenWeightsScope&) = delete;
  bool active() const { return frozen_ != nullptr; }  // whether the backend has the capability

 private:
  FrozenWeights* frozen_;
};

}  // namespace trainlab
