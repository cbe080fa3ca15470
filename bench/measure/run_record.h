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

#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "engine/train/trainer.h"

namespace trainlab::bench {

// One rank's measured steps: the step (wall) and its work (data wait, forward, backward, optimiser:
// the step less the communication it waited for), in milliseconds.
struct RankStepStats {
  int rank = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double work_p50_ms = 0;
  std::int64_t steps = 0;
  template <class F>
  void fields(F& f) {
    f("rank", rank);
    f.optional("steps", steps);
    f.optional("p50_ms", p50_ms);
    f.optional("p99_ms", p99_ms);
    f.optional("max_ms", max_ms);
    f.optional("work_p50_ms", work_p50_ms);
  }
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

// ---- the rows ----
// The measured steps' phase totals, in seconds.
struct PhaseTotals {
  double data_wait_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0, comm_s = 0;
  double total() const { return data_wait_s + forward_s + backward_s + optimizer_s + comm_s; }
  template <class F>
  void fields(F& f) {
    f.optional("data_wait_s", data_wait_s);
    f.optional("forward_s", forward_s);
    f.optional("backward_s", backward_s);
    f.optional("optimizer_s", optimizer_s);
    f.optional("comm_s", comm_s);
  }
};
// What a data set on disk cost its readers over the run.
struct LoaderUse {
  double samples = 0, bytes = 0, read_cpu_s = 0, decode_cpu_s = 0;
  int workers = 0;
  template <class F>
  void fields(F& f) {
    f.optional("samples", samples);
    f.optional("bytes", bytes);
    f.optional("read_cpu_s", read_cpu_s);
    f.optional("decode_cpu_s", decode_cpu_s);
    f.optional("workers", workers);
  }
};
// What every row of a run says about the process: a reader can tell a dead one from a slow one.
struct RunProcess {
  std::int64_t pid = 0;
  int world_size = 1;
  double unix_time = 0;  // when the row was written
  double elapsed_s = 0;  // since the run started
  template <class F>
  void fields(F& f) {
    f.optional("pid", pid);
    f.optional("world_size", world_size);
    f.optional("unix_time", unix_time);
    f.optional("elapsed_s", elapsed_s);
  }
};
// Every log_every steps: the step counter a later reader can watch.
struct TrainProgressRow {
  static constexpr const char* kKind = "train_progress";
  RowHeader header;
  RunProcess process;
  std::int64_t step = 0, steps = 0;
  std::optional<double> loss;  // null when it was not finite
  std::vector<double> recent_step_seconds;
  std::optional<KnobMap> config;  // the first progress row says what is running
  template <class F>
  void fields(F& f) {
    header.fields(f);
    process.fields(f);
    f("step", step);
    f.optional("steps", steps);
    f.nullable("loss", loss);
    f.optional("recent_step_seconds", recent_step_seconds);
    f.optional("config", config);
  }
};
// The final held-out evaluation by class.
struct HeldOutConfusion {
  std::vector<std::string> class_names;  // in label order; empty when the data names none
  std::int64_t classes = 0;
  std::vector<std::int64_t> counts;  // classes x classes, row-major: true label (row), prediction (column)
  template <class F>
  void fields(F& f) {
    f.optional("class_names", class_names);
    f("classes", classes);
    f("counts", counts);
  }
};
// At the end, ok or failed.
struct TrainRunRow {
  static constexpr const char* kKind = "train_run";
  RowHeader header;
  RunProcess process;
  KnobMap config;
  std::string error;  // failed
  std::string data;   // the data set directory ("" : SyntheticImages)
  std::int64_t first_step = 0, last_step = 0, warmup_steps = 0, measured_steps = 0;
  double samples_per_s = 0;
  std::vector<double> step_seconds, work_seconds, data_wait_seconds;  // per measured step
  std::optional<PhaseTotals> phases;
  std::vector<RankStepStats> ranks;
  std::optional<LoaderUse> loader;
  std::optional<double> accuracy;             // null without a held-out evaluation
  std::optional<HeldOutConfusion> confusion;  // with it (up to 1,000 classes)
  std::string stopped_by;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    process.fields(f);
    f.optional("config", config);
    f.optional("error", error);
    f.optional("data", data);
    f.optional("first_step", first_step);
    f.optional("last_step", last_step);
    f.optional("warmup_steps", warmup_steps);
    f.optional("measured_steps", measured_steps);
    f.optional("samples_per_s", samples_per_s);
    f.optional("step_seconds", step_seconds);
    f.optional("work_seconds", work_seconds);
    f.optional("data_wait_seconds", data_wait_seconds);
    f.optional("phases", phases);
    f.optional("ranks", ranks);
    f.optional("loader", loader);
    f.nullable("accuracy", accuracy);
    f.optional("confusion", confusion);
    f.optional("stopped_by", stopped_by);
  }
};

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
  RowHeader header(const char* kind, const char* status) const;
  RunProcess process() const;
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
