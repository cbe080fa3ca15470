// One validation of a checkpoint for every reader: `trainlab train --resume`, `verify-checkpoint`,
// `inspect` and `diagnose`. A checkpoint that one of them calls complete, --resume takes; one that
// --resume refuses, each of them refuses with the same words.
//
//   Checkpoint c = load_checkpoint(dir, backend);   // the files: marker, sizes, CRCs, headers
//   validate_checkpoint(c, dir);                     // the state: what a resume loads, cross-checked
#pragma once

#include <cstdint>
#include <string>

#include "engine/train/checkpoint.h"
#include "engine/train/run.h"

namespace trainlab {

struct ResumedCounters {
  std::int64_t step = 0;
  std::int64_t nonfinite_total = 0;  // non-finite steps skipped since step 0 (--on-nonfinite skip)
  std::int64_t scaler_skipped = 0;   // f16: updates the loss scaler skipped since step 0
};

// Loads the checkpoint's weights, optimiser state (cut to this rank's pieces when `parallel` shards
// it), schedule, loss scaler and generator into `run` (built from `config`), and checks them against
// each other: every tensor finite (unless config allows otherwise), the optimiser's lr the schedule's
// at the step, the schedule at the step, the optimiser's update count the step's less the skipped.
// Throws Error prefixed by `owner` ("checkpoint 'ck'").
ResumedCounters restore_run(const Checkpoint& checkpoint, const std::string& owner, const TrainConfig& config,
                            RunParts& run, Generator& generator, DataParallel* parallel = nullptr);

// Every step consumes `accumulate` batches and advances the schedule once: the loader's batches
// since step 0 and the schedule's step must agree with `step`. Throws Error prefixed by `owner`.
void check_position(std::int64_t step, std::int64_t accumulate, std::int64_t loader_batches, std::int64_t schedule_step,
                    const std::string& owner);

// The configuration a checkpoint records (a key it lacks keeps its default: it was newer than the
// checkpoint; a key this engine does not know is ignored). Throws Error naming a bad value.
TrainConfig checkpoint_config(const Checkpoint& checkpoint, const std::string& owner);

// Everything --resume checks that does not depend on the resuming run's own flags: the checkpoint
// loaded into a run of the configuration it records, rebuilt on the reference backend (the model
// from its config when it is the trainlab command's SmallCNN; a driver's model as its saved
// tensors), and its loader position checked against the counts it records and its configuration
// (the data set itself is not opened). Throws Error naming the problem.
void validate_checkpoint(const Checkpoint& checkpoint, const std::string& dir);

}  // namespace trainlab
