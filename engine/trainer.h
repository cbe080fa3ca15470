// The trainer: SmallCNN on SyntheticImages. One step = wait for data, forward, loss, backward,
// optimiser step; each phase timed with the backend's timer (CUDA events on a GPU, a steady clock
// on the CPU), with a device synchronise at each boundary, and recorded as a profiler span. Warm-up steps are excluded
// from throughput and counted.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/data.h"
#include "engine/distributed.h"
#include "engine/grad_scaler.h"
#include "engine/nn.h"
#include "engine/optim.h"
#include "engine/step_graph.h"

namespace trainlab {

struct PhaseTimes {
  double data_wait_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  double comm_s = 0;  // data parallel: the gradient all-reduce still running after backward (exposed)
  double total() const { return data_wait_s + forward_s + backward_s + optimizer_s + comm_s; }
  PhaseTimes& operator+=(const PhaseTimes& other);
};

struct EvalResult {
  std::int64_t step = 0;
  double accuracy = 0;  // fraction in [0, 1]
  double loss = 0;
  std::int64_t samples = 0;
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
  std::int64_t skipped_steps = 0;    // f16: optimiser steps skipped for non-finite gradients (this run)
  double loss_scale = 0;             // f16: the loss scale at the end (0 without a scaler)
  double wall_s = 0;
};

class Trainer {
 public:
  // With `parallel` (data parallel training, see engine/distributed.h), the run is one replica of
  // a world: config.batch is the global batch and this rank takes its share of every batch.
  explicit Trainer(const TrainConfig& config, DataParallel* parallel = nullptr);
  ~Trainer();

  // Trains from the current step up to config.steps, printing progress to `log` (may be null).
  TrainResult train(std::ostream* log);
  EvalResult evaluate();
  void save(const std::string& dir);
  // Restores everything: weights, optimiser, schedule, RNG, loader position and step. Refuses a
  // checkpoint trained with different values of the keys that shape the run (batch, lr, seed, ...).
  void resume(const std::string& dir);

  std::int64_t step() const { return step_; }
  SmallCNN& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  DataLoader& loader() { return *loader_; }
  Backend& backend() { return backend_; }
  Generator& generator() { return generator_; }
  const TrainConfig& config() const { return config_; }

 private:
  TrainConfig config_;
  // One micro-step's forward: the input in the run's layout and dtype, the model under autocast
  // when the dtype is bf16/f16, and the loss in f32, scaled by 1/accumulate.
  Tensor forward_loss(const Tensor& images, const Tensor& labels);
  Tensor prepare_input(const Tensor& images) const;
  void save_local(const std::string& dir);
  std::string trace_path() const;
  // cuda_graph: one micro-step's forward (with the loss) and backward, captured once on the
  // batch in `staged` and replayed from then on (see train()); each batch is staged into the
  // graphs' inputs.
  void capture_step(const Batch& staged);
  void stage_for_graph(const Batch& batch);
  // One timer per phase name, made by the backend (CUDA events on a GPU), reused every step.
  Timer& phase_timer(const char* phase);

  Backend& backend_;
  DataParallel* parallel_ = nullptr;
  DType dtype_;        // the compute dtype
  DType param_dtype_;  // f32 master weights for bf16, else the compute dtype
  MemoryFormat layout_;
  Generator generator_;
  std::unique_ptr<SmallCNN> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LRScheduler> scheduler_;
  std::unique_ptr<GradScaler> scaler_;  // f16 only
  std::shared_ptr<const SyntheticImages> train_data_, held_out_data_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<StepGraph> graph_;
  std::map<std::string, std::unique_ptr<Timer>> phase_timers_;
  std::int64_t step_ = 0;
};

}  // namespace trainlab
