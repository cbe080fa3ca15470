// The cost-to-accuracy study's ledger rows: one `cost_repeat` row per training run (a
// configuration's repeat: what it reached, or why it failed), and with --scaling-ledger one
// `cost_break_even` row per world size of the bench_scaling run it read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"

namespace trainlab::bench {

struct CostRepeatRow {
  static constexpr const char* kKind = "cost_repeat";
  RowHeader header;
  // The study and the configuration.
  std::string study;  // the study file's name ("cost_cpu")
  std::string config_name;
  std::int64_t config_index = 0;
  int repeat = 0;  // trains with the configuration's seed + repeat
  std::int64_t batch = 0;
  double lr = 0;
  bool lr_follows_rule = true;
  std::string dtype;
  KnobMap config;                  // as it ran (the trainer's keys)
  std::optional<DataSource> data;  // what it trained on (rows before 2026-12-02 lack it: SyntheticImages)
  double target = 0;
  std::string metric = "accuracy";  // what the target is of: accuracy | loss (rows before 2026-12-06: accuracy)
  int consecutive = 0;
  std::int64_t eval_every = 0, step_cap = 0;
  double rate = 0;  // $/hour
  bool quick = false;
  // What it reached (status ok).
  double samples_per_s = 0;
  bool reached = false;
  std::optional<std::int64_t> steps_to_target;  // null when not reached
  std::string stopped_by, stop_rule;
  std::int64_t measured_steps = 0, warmup_steps_excluded = 0;
  std::vector<double> step_seconds;
  json evals;  // [[step, held-out accuracy or loss (the metric)], ...]
  double wall_s = 0;
  // Why it did not (status failed).
  std::string error;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f.optional("study", study);
    f("config_name", config_name);
    f.optional("config_index", config_index);
    f.optional("repeat", repeat);
    f("batch", batch);
    f("lr", lr);
    f("lr_follows_rule", lr_follows_rule);
    f("dtype", dtype);
    f.optional("config", config);
    f.optional("data", data);
    f("target", target);
    f.optional("metric", metric);
    f.optional("consecutive", consecutive);
    f("eval_every", eval_every);
    f("step_cap", step_cap);
    f("rate", rate);
    f.optional("quick", quick);
    if (header.ok()) {
      f("samples_per_s", samples_per_s);
      f("reached", reached);
      f.nullable("steps_to_target", steps_to_target);
      f.optional("stopped_by", stopped_by);
      f.optional("stop_rule", stop_rule);
      f.optional("measured_steps", measured_steps);
      f.optional("warmup_steps_excluded", warmup_steps_excluded);
      f.optional("step_seconds", step_seconds);
      f.optional("evals", evals);
      f.optional("wall_s", wall_s);
      if (reached && !steps_to_target) throw RowError("reached the target, and no steps_to_target");
    } else {
      f.optional("error", error);
    }
  }
};

struct CostBreakEvenRow {
  static constexpr const char* kKind = "cost_break_even";
  RowHeader header;                         // status ok: measured; skipped: a figure is missing (the note says which)
  std::string scaling_ledger, scaling_run;  // where the weak-scaling samples/s came from
  int world = 0;
  std::int64_t global_batch = 0;
  double samples_per_s = 0;  // median, at that world (bench_scaling)
  std::string config_name;   // the study's configuration at this global batch ("" when none)
  double samples_to_target = 0, hours = 0, dollars = 0;
  double multiplier = 0;              // $ against world 1
  double dollars_per_hour_saved = 0;  // extra $ per hour of time to target saved against world 1
  std::string note;
  double rate = 0;  // $/hour per rank
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f.optional("scaling_ledger", scaling_ledger);
    f.optional("scaling_run", scaling_run);
    f("world", world);
    f("global_batch", global_batch);
    f("samples_per_s", samples_per_s);
    f("config_name", config_name);
    f("samples_to_target", samples_to_target);
    f("hours", hours);
    f("dollars", dollars);
    f("multiplier", multiplier);
    f("dollars_per_hour_saved", dollars_per_hour_saved);
    f("note", note);
    f.optional("rate", rate);
  }
};

}  // namespace trainlab::bench
