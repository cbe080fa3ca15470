// What a training run is made of, built in one place from its configuration and task: the backend
// (configured: threads, TF32), the model (seeded from the run's generator, in its parameter
// dtype), the optimiser and its schedule, the f16 loss scaler, and the StepRunner over them. The
// trainer runs one with a data loader, evaluation and checkpoints around it; `trainlab throughput`
// runs the same one on in-memory batches. So both time the same thing.
//
//   Generator generator(config.seed);
//   RunParts run = make_run(config, task, generator);
//   StepResult r = run.runner->step([&] { return batch; });
#pragma once

#include <memory>

#include "engine/core/rng.h"
#include "engine/nn/module.h"
#include "engine/optim/grad_scaler.h"
#include "engine/optim/optim.h"
#include "engine/train/config.h"
#include "engine/train/distributed.h"
#include "engine/train/step.h"
#include "engine/train/task.h"

namespace trainlab {

struct RunParts {
  Backend* backend = nullptr;
  std::shared_ptr<Module> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LRScheduler> scheduler;
  std::unique_ptr<GradScaler> scaler;  // f16 only
  std::unique_ptr<StepRunner> runner;  // last: it refers to the parts above
  DType param_dtype = DType::f32;      // f32 master weights under bf16/f16 autocast, else the compute dtype
};

// The backend the configuration names (its default CPU backend when none).
Backend& run_backend(const ExecutionConfig& execution);

// cuda_graph: the eager steps before the capture (everything the step creates lazily exists by then).
inline constexpr std::int64_t kEagerStepsBeforeCapture = 2;

// Builds the parts of a run of `config` on `task`: the model through the task's factory from
// `generator`, the optimiser over its parameters (or, data parallel with sharded state, over this
// rank's pieces of them: `parallel` is attached first), the schedule, the scaler under f16, and the
// step. Throws before any work when the backend cannot run what the configuration asks (pinned
// uploads, TF32, an op in a dtype: the step's plan).
RunParts make_run(const TrainConfig& config, const TrainTask& task, Generator& generator,
                  DataParallel* parallel = nullptr, std::int64_t eager_steps_before_capture = kEagerStepsBeforeCapture);

}  // namespace trainlab
