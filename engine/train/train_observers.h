// What watches a training run, one concern each, in the order Trainer::train calls them: the
// non-finite policy, the throughput bookkeeping, the precision audit's record of the first step,
// the driver's callback, held-out evaluation with the stop rule, periodic checkpoints, the trace,
// and the progress log. Trainer::train is the step, the schedule, then this list.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "engine/train/step.h"

namespace trainlab {

class Trainer;
struct TrainCallbacks;
struct TrainResult;
struct StepReport;

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(TrainResult& /*result*/) {}
  // Before the run's step number `run_step` (0 for the first step of this run).
  virtual void before_step(std::int64_t /*run_step*/) {}
  // After a step and its schedule; true asks the run to stop here.
  virtual bool after_step(const StepReport& /*report*/, const StepResult& /*step*/, TrainResult& /*result*/) {
    return false;
  }
  // After the last step, in list order: bookkeeping, the trace, the final evaluation, the save.
  virtual void on_end(TrainResult& /*result*/) {}
  // Last, once the result is complete (wall time included): the summary.
  virtual void on_summary(const TrainResult& /*result*/) {}
};

// The trainer's observers for one run, printing to `log` (may be null).
std::vector<std::unique_ptr<TrainObserver>> train_observers(Trainer& trainer, const TrainCallbacks& callbacks,
                                                            std::ostream* log);

}  // namespace trainlab
