// One training step's tensor memory, measured by category next to the estimate (issue 13): what
// `trainlab memory --config` prints. The step is the trainer's own (warm-up steps first, so the
// optimiser's state and the working copies exist, then one measured step); the estimate comes
// from the parameter count, the optimiser and the model's memory_chain.
#pragma once

#include <cstdint>
#include <string>

#include "engine/instrument/memory_model.h"
#include "engine/instrument/memory_usage.h"
#include "engine/train/config.h"
#include "engine/train/task.h"

namespace trainlab::bench {

struct StepMemoryReport {
  TrainConfig config;  // as run
  std::string model;
  std::int64_t parameters = 0;
  bool described = false;  // the model has a memory chain (else only persistent state is estimated)
  TrainingMemoryEstimate estimate;
  MemoryUsage measured;  // over the measured step
  DeviceType device = DeviceType::cpu;
  std::string backend;
};

// Runs `warmup` steps and one measured step of `config` on `task` (no evaluation, no checkpoint, no
// trace). Throws Error for a config the trainer refuses.
StepMemoryReport measure_step_memory(TrainConfig config, const TrainTask& task, std::int64_t warmup = 2);

// A markdown table: category, estimated, measured peak, estimate vs measured; then the step's
// peak (the input batches are not estimated and are left out of both) with its phase.
std::string step_memory_table(const StepMemoryReport& report);

}  // namespace trainlab::bench
