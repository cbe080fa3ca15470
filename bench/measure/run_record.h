// What a `trainlab train` run leaves for diagnosis (trainlab diagnose): with a ledger (the config's
// `ledger`), rank 0 appends a `train_progress` row at every progress line (the step, the time, the
// recent step times: a step counter a later reader can watch) and one `train_run` row at the end,
// ok or failed (the config, the environment, the data set, every measured step's time, the phase
// totals, and under DDP each rank's step-time distribution). Without a ledger nothing is written;
// the per-rank distribution is printed in the run's summary either way.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "engine/trainer.h"

namespace trainlab::bench {

// One rank's measured steps: the step (wall) and its work (data wait, forward, backward, optimiser:
// the step less the communication it waited for), in milliseconds.
struct RankStepStats {
  int rank = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double work_p50_ms = 0;
  std::int64_t steps = 0;
};
RankStepStats rank_step_stats(int rank, const std::vector<double>& step_s, const std::vector<double>& work_s);
// The nearest-rank percentile (q in [0, 1]) of `values`; 0 when empty.
double percentile(std::vector<double> values, double q);
// The rank whose work p50 is largest (the straggler candidate), and its excess over the ranks' median.
struct Straggler {
  int rank = -1;
  double work_p50_ms = 0, median_work_p50_ms = 0;
  double excess_percent = 0;
};
Straggler slowest_rank(const std::vector<RankStepStats>& ranks);
std::string rank_stats_text(const std::vector<RankStepStats>& ranks);  // one line for the summary
nlohmann::json rank_stats_json(const std::vector<RankStepStats>& ranks);

class RunRecorder {
 public:
  // Every rank keeps its own work times; only rank 0 with a non-empty `ledger` writes rows.
  RunRecorder(const std::string& ledger, const TrainConfig& config, int rank, int world_size);
  const std::string& run_id() const { return run_id_; }
  bool enabled() const { return ledger_.has_value(); }
  // The training data set: when it is on disk, the summary row says what its readers spent (CPU
  // seconds reading and decoding, the samples read).
  void watch_loader(std::shared_ptr<const Dataset> data);
  // Every step (for the work times); a progress row every config.log_every steps.
  void on_step(const StepReport& report);
  const std::vector<double>& work_seconds() const { return work_s_; }
  void finish(const TrainResult& result, const std::vector<RankStepStats>& ranks, const std::string& data);
  void fail(const std::string& error);

 private:
  nlohmann::json base_row(const char* kind) const;
  std::optional<Ledger> ledger_;
  TrainConfig config_;
  Environment env_;
  std::string run_id_;
  int world_ = 1;
  double start_ = 0;
  std::shared_ptr<const Dataset> data_;
  std::vector<double> work_s_, data_wait_s_, recent_s_;
  bool finished_ = false, wrote_config_ = false;
};

double unix_seconds();

}  // namespace trainlab::bench
