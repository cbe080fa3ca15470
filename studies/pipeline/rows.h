// The pipeline study's ledger rows: one `pipeline` row per schedule and micro-batch count
// (bench_pipeline, studies/pipeline/pipeline_study.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"

namespace trainlab::bench {

struct PipelineConfig {
  std::string model;  // its label ("SmallCNN", "GPT (n_layer=4, ...)")
  int stages = 0;
  std::string schedule;            // "gpipe" | "1f1b"
  std::int64_t micro_batches = 0;  // m
  std::int64_t micro_batch = 0;    // samples per micro-batch
  std::string cut;                 // each stage's first part and the parts it runs: "0 (conv1) | 1 (conv2) ..."
  int data_parallel = 1;           // pipelines, each stage's gradients averaged over them (1: one pipeline)
  std::string dtype = "f32";       // the compute dtype (bf16: autocast)
  template <class F>
  void fields(F& f) {
    f("model", model);
    f("stages", stages);
    f("schedule", schedule);
    f("micro_batches", micro_batches);
    f("micro_batch", micro_batch);
    f.optional("cut", cut);
    f.optional("data_parallel", data_parallel);
    f.optional("dtype", dtype);
  }
};

struct PipelineRow {
  static constexpr const char* kKind = "pipeline";
  RowHeader header;
  PipelineConfig config;
  std::vector<double> repeats;  // each measured step's seconds (the slowest stage's), warm-up excluded
  Summary stats;
  int warmup_steps_excluded = 0;
  // The schedule's span (the first stage's batches loaded to the last send complete; the stages
  // start together, after a barrier): what utilisation is measured against, the update excluded.
  Summary schedule_s;
  // Per stage, medians over the measured steps: its forwards' and backwards' seconds, and the
  // fraction of the schedule's span it spent in them.
  std::vector<double> stage_busy_s, stage_utilisation;
  std::vector<std::int64_t> stage_peak_in_flight;  // micro-batches whose activations it held at once
  // Per stage: the activation bytes it held at once (memory_usage's accounting, the received inputs
  // included; the largest over the steps), and the schedule's prediction from one micro-batch's
  // forward on that stage: with k the in-flight bound (GPipe m, 1F1B min(m, p - s)), k - 1 times what
  // it left plus the most it held while it ran.
  std::vector<std::int64_t> stage_activation_peak_bytes, stage_activation_predicted_bytes;
  // One micro-batch's activations summed over the stages, less the inputs the stages received (copies
  // of what the stage before keeps), and the memory estimator's (engine/instrument/memory_model.h)
  // saved activations for the whole model at the micro-batch (0: the model has no chain).
  double measured_saved_bytes = 0, estimator_saved_bytes = 0;
  // The last measured step's forwards and backwards, stage by stage, 2m of them each: kind (0
  // forward, 1 backward), micro-batch, begin and end in seconds from that stage's step start (the
  // stages start together after a barrier): the report's timeline.
  std::vector<double> last_step_events;
  double utilisation = 0;  // the mean of stage_utilisation: measured
  double bound = 0;        // seed 003's fill-and-drain bound m / (m + p - 1), balanced stages
  // The same bound for the stages as measured: sum of m t_s over p ((m - 1) max t_s + sum t_s), with
  // t_s a micro-batch's forward and backward on stage s (what an imbalanced cut costs).
  double bound_measured_stages = 0;
  double loss = 0;             // the last measured step's
  double data_parallel_s = 0;  // stage 0's gradient average over the pipelines, median (data_parallel > 1)
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("config", config);
    f.optional("repeats", repeats);
    f("stats", stats);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f("schedule_s", schedule_s);
    f("stage_busy_s", stage_busy_s);
    f("stage_utilisation", stage_utilisation);
    f.optional("stage_peak_in_flight", stage_peak_in_flight);
    f.optional("stage_activation_peak_bytes", stage_activation_peak_bytes);
    f.optional("stage_activation_predicted_bytes", stage_activation_predicted_bytes);
    f.optional("measured_saved_bytes", measured_saved_bytes);
    f.optional("estimator_saved_bytes", estimator_saved_bytes);
    f.optional("last_step_events", last_step_events);
    f("utilisation", utilisation);
    f("bound", bound);
    f("bound_measured_stages", bound_measured_stages);
    f.optional("loss", loss);
    f.optional("data_parallel_s", data_parallel_s);
  }
};

}  // namespace trainlab::bench
