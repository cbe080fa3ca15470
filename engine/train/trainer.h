// The trainer: a model on its data (a TrainTask; SmallCNN on SyntheticImages by default), one
// StepRunner step at a time, then the schedule, then the driver's callbacks; held-out evaluation
// every eval_every steps and at the end, a stop rule, checkpoints, progress lines and the
// throughput summary (warm-up steps excluded and counted).
//
//   Trainer trainer(config, task);               // or Trainer(config) for the trainlab command's task
//   trainer.set_callbacks({.on_step = ..., .stop_rule = accuracy_at_least(0.85, 2)});
//   TrainResult result = trainer.train(&std::cout);
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/loader.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/precision_audit.h"
#include "engine/nn/module.h"
#include "engine/optim/grad_scaler.h"
#include "engine/optim/optim.h"
#include "engine/train/config.h"
#include "engine/train/distributed.h"
#include "engine/train/run.h"
#include "engine/train/step.h"
#include "engine/train/task.h"

namespace trainlab {

struct EvalResult {
  std::int64_t step = 0;
  double accuracy = 0;  // fraction in [0, 1]; of token data: of every position's next token
  // The mean cross entropy (token data: per token, in nats; its exp is the perplexity).
  double loss = 0;
  std::int64_t samples = 0;
  // Counts by true label (row) and prediction (column), classes x classes, row-major; kept for up to
  // kMaxConfusionClasses classes (empty beyond).
  static constexpr std::int64_t kMaxConfusionClasses = 1000;
  std::int64_t classes = 0;
  std::vector<std::int64_t> confusion;
  // Per class: the fraction of its held-out samples predicted as it (NaN for a class with none).
  std::vector<double> per_class_accuracy() const;
};

// What a driver sees after each optimiser step.
struct StepReport {
  std::int64_t step = 0;  // the global step just completed (1 after the first)
  double loss = 0;        // its mean loss
  double lr = 0;          // the learning rate it used
  PhaseTimes phases;
  double seconds = 0;
  bool measured = false;  // past the warm-up (counted in the throughput)
  bool skipped = false;   // the update was not applied (f16's scaler, or a non-finite step skipped)
  std::string nonfinite;  // what was NaN or inf, when something was
  double grad_norm = -1;  // with grad_clip: the gradients' global norm before clipping
};

// When to stop before the step cap: asked after every held-out evaluation, with all of them so far.
struct StopRule {
  std::string description;  // recorded in the result: "held-out accuracy >= 0.85 on 2 consecutive evaluations"
  std::function<bool(const std::vector<EvalResult>& evals)> should_stop;
  explicit operator bool() const { return static_cast<bool>(should_stop); }
};
// Held-out accuracy >= `target` on `consecutive` evaluations in a row (seed 000's rule for the cost
// study: two in a row, so that one lucky evaluation does not end a run).
StopRule accuracy_at_least(double target, int consecutive = 2);
// Held-out loss <= `target` (nats per prediction: a language model's cross entropy per token) on
// `consecutive` evaluations in a row.
StopRule loss_at_most(double target, int consecutive = 2);

// A driver observes and stops a run through these, without editing the engine.
struct TrainCallbacks {
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EvalResult&)> on_eval;
  StopRule stop_rule;  // needs eval_every > 0
  // Called on each data loader worker thread as it starts (DataLoaderOptions::worker_init): the
  // pinning study confines the workers to their cores here.
  std::function<void(int worker)> on_loader_worker_start;
};

struct TrainResult {
  std::int64_t first_step = 0;  // the step this run started from (non-zero after a resume)
  std::int64_t last_step = 0;
  std::vector<double> losses;  // one per step run, in order
  std::vector<EvalResult> evals;
  EvalResult final_eval;
  std::int64_t warmup_steps = 0;  // excluded from throughput
  std::int64_t measured_steps = 0;
  double samples_per_s = 0;          // over the measured steps
  PhaseTimes measured;               // phase totals over the measured steps
  std::vector<double> step_seconds;  // every measured step's time, in order
  DdpStepStats ddp;                  // data parallel: totals over the measured steps (bucket sizes of the last)
  std::int64_t skipped_steps = 0;    // f16: optimiser steps the loss scaler skipped (this run)
  std::int64_t nonfinite_steps = 0;  // steps with a NaN or inf loss or gradient, skipped (on_nonfinite skip; this run)
  double loss_scale = 0;             // f16: the loss scale at the end (0 without a scaler)
  double wall_s = 0;
  // How the run was bounded, as it ran: the step cap (steps, or stop_at), the evaluation cadence,
  // the stop rule (empty: none) and what ended the run ("step cap" or "stop rule").
  std::int64_t step_cap = 0;
  std::int64_t eval_every = 0;
  std::string stop_rule;
  std::string stopped_by;
  // Tensor memory on the backend's device from the first measured step to the last step (held-out
  // evaluations in between included, the one at the end not), by category, with the phase of the
  // peak. Without measured steps: from the first step.
  MemoryUsage memory;
  DeviceType memory_device = DeviceType::cpu;
  // audit: every op of this run's first step with the dtypes it ran in (engine/instrument/precision_audit.h).
  std::vector<OpPrecision> op_precision;
};

class Trainer {
 public:
  // With `parallel` (data parallel training, see engine/train/distributed.h), the run is one replica of
  // a world: config.batch is the global batch and this rank takes its share of every batch.
  Trainer(const TrainConfig& config, TrainTask task, DataParallel* parallel = nullptr);
  // The trainlab command's task: SmallCNN on SyntheticImages (model_task(config)).
  explicit Trainer(const TrainConfig& config, DataParallel* parallel = nullptr);
  ~Trainer();

  void set_callbacks(TrainCallbacks callbacks);
  // Trains from the current step up to the step cap (or the stop rule), printing progress to `log`
  // (may be null).
  TrainResult train(std::ostream* log);
  EvalResult evaluate();
  // The precision audit of `run` (this trainer's, with config audit on) against `reference`, an f32
  // run of the same configuration and seed (the run itself when it is f32).
  PrecisionAudit precision_audit(const TrainResult& run, const TrainResult& reference) const;
  void save(const std::string& dir);
  // Restores everything: weights, optimiser, schedule, RNG, loader position and step. Refuses a
  // checkpoint trained with different values of the keys that shape the run (batch, lr, seed, ...).
  void resume(const std::string& dir);

  std::int64_t step() const { return step_; }
  Module& model() { return *run_.model; }
  Optimizer& optimizer() { return *run_.optimizer; }
  DataLoader& loader() { return *loader_; }
  Backend& backend() { return *run_.backend; }
  // What the backend runs for each op, natively or emulated (asked before the first step).
  const StepPlan& step_plan() const;
  Generator& generator() { return generator_; }
  const TrainConfig& config() const { return config_; }
  const TrainTask& task() const { return task_; }
  const GradScaler* scaler() const { return run_.scaler.get(); }  // f16 only
  DataParallel* parallel() const { return parallel_; }
  // Where this process writes its trace: config's trace, or NAME.rank<r>.json for rank r > 0.
  std::string trace_path() const;
  // Non-finite steps skipped since step 0 (--on-nonfinite skip; checkpointed).
  std::int64_t nonfinite_total() const { return nonfinite_total_; }
  void count_nonfinite() { ++nonfinite_total_; }
  // Called with every batch the steps take from the loader, before the step runs it (null: none).
  void tap_batches(std::function<void(const Batch&)> tap) { batch_tap_ = std::move(tap); }

 private:
  void save_local(const std::string& dir, const StateDict& optimizer_state);

  TrainConfig config_;
  TrainTask task_;
  DataParallel* parallel_ = nullptr;
  Generator generator_;
  RunParts run_;  // backend, model, optimiser, schedule, scaler, step (engine/train/run.h)
  std::unique_ptr<DataLoader> loader_;
  TrainCallbacks callbacks_;
  std::int64_t step_ = 0;
  std::int64_t nonfinite_total_ = 0;  // non-finite steps skipped since step 0 (checkpointed)
  std::function<void(const Batch&)> batch_tap_;
};

}  // namespace trainlab
