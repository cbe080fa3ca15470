// The memory study's ledger rows: one `memory_repeat` row per repeat of each arm (batch x recompute x
// ZeRO stage), written by rank 0 as it ends (studies/memory/driver.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"

namespace trainlab::bench {

// The arm's configuration as it ran.
struct MemoryConfig {
  std::int64_t batch = 0;  // global, split over the ranks
  std::int64_t per_rank_batch = 0;
  std::string recompute;  // "none" | "convs" | "all"
  int zero = 0;           // ZeRO stage
  int world = 0;
  std::string dtype = "?", optimizer = "?";
  std::int64_t steps = 0;  // warm-up included
  int warmup_steps_excluded = 0;
  std::string allreduce;
  std::string model = "smallcnn";  // the registered model trained (rows before --model: SmallCNN)
  std::string model_options;       // its keys, "hidden=64" ("" none)
  template <class F>
  void fields(F& f) {
    f("batch", batch);
    f.optional("per_rank_batch", per_rank_batch);
    f("recompute", recompute);
    f("zero", zero);
    f.optional("world", world);
    f.optional("dtype", dtype);
    f.optional("optimizer", optimizer);
    f.optional("steps", steps);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f.optional("allreduce", allreduce);
    f.optional("model", model);
    f.optional("model_options", model_options);
  }
};

// Tensor bytes by category (engine/instrument/memory_usage.h's names; a category absent is 0), the largest
// rank's: each category's own peak over the ranks, and the breakdown when the largest rank's total
// peaked.
struct MemoryPerRank {
  std::map<std::string, std::int64_t> peak_bytes, at_peak_bytes;
  std::int64_t total_peak_bytes = 0;
  std::int64_t peak_rank = 0;
  std::string peak_phase;  // "forward", "backward", ...
  std::int64_t activations_after_forward_bytes = 0;
  // Between steps (after the run's last step): the bytes still held by category, the largest
  // rank's per category, and the model's parameter count: the persistent state the ZeRO stages cut
  // (absent in rows written before them).
  std::optional<std::map<std::string, std::int64_t>> held_bytes;
  std::optional<std::int64_t> parameters;
  // Beside the measured peaks, seed 003's formula and the estimator, per rank (absent in rows
  // before them; a key absent: not estimated): "activations" (both; the model's memory chain at the
  // per-rank batch: the peak; seed 003's term is what backward keeps, beside the estimator's
  // "activations_saved"), and "communication" (the estimator only, from DDP's plan: seed 003 has no
  // term for the buffers); what the estimator's buffers are.
  std::optional<std::map<std::string, double>> formula_bytes, estimated_bytes;
  std::optional<std::string> communication_estimate;
  std::string note;
  template <class F>
  void fields(F& f) {
    f("peak_bytes", peak_bytes);
    f("at_peak_bytes", at_peak_bytes);
    f("total_peak_bytes", total_peak_bytes);
    f.optional("peak_rank", peak_rank);
    f("peak_phase", peak_phase);
    f("activations_after_forward_bytes", activations_after_forward_bytes);
    f.optional("held_bytes", held_bytes);
    f.optional("parameters", parameters);
    f.optional("formula_bytes", formula_bytes);
    f.optional("estimated_bytes", estimated_bytes);
    f.optional("communication_estimate", communication_estimate);
    f.optional("note", note);
  }
};

struct MemoryRepeatRow {
  static constexpr const char* kKind = "memory_repeat";
  RowHeader header;
  std::string arm;  // "b128 none z0", "b128 none z0 again"
  int repeat = 0;
  MemoryConfig config;
  double step_s_median = 0;  // the slowest rank's median measured step
  std::vector<double> step_s_median_per_rank;
  std::vector<double> step_seconds_rank0;
  double samples_per_s = 0;  // rank 0's
  MemoryPerRank memory_per_rank;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("arm", arm);
    f.optional("repeat", repeat);
    f("config", config);
    f("step_s_median", step_s_median);
    f.optional("step_s_median_per_rank", step_s_median_per_rank);
    f.optional("step_seconds_rank0", step_seconds_rank0);
    f.optional("samples_per_s", samples_per_s);
    f("memory_per_rank", memory_per_rank);
  }
};

}  // namespace trainlab::bench
