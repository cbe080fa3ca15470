// The parallelism study's ledger rows: one `parallelism` row per door (a way to divide the step)
// of a run (bench_parallelism, studies/parallelism/parallelism_study.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"

namespace trainlab::bench {

struct ParallelismConfig {
  std::string model;       // its label
  int ranks = 0;           // the launched ranks (the one-process doors use rank 0's core(s))
  std::int64_t batch = 0;  // the global batch of every door
  int threads = 1;         // per rank (the one-process doors: as their name says)
  std::string door;        // "one process, 1 thread" | "one process, 2 threads" | "data" | "data again" |
                           // "zero1" | "zero2" | "zero3" | "pipeline" | "tensor" | "data x pipeline" | "data x tensor"
  std::string detail;      // how: "DDP, native all-reduce, 16 per rank", "1f1b, 4 micro-batches of 8", ...
  template <class F>
  void fields(F& f) {
    f("model", model);
    f("ranks", ranks);
    f("batch", batch);
    f("threads", threads);
    f("door", door);
    f("detail", detail);
  }
};

struct ParallelismRow {
  static constexpr const char* kKind = "parallelism";
  RowHeader header;
  ParallelismConfig config;
  std::vector<double> repeats;  // each measured step's seconds (the slowest rank's), warm-up excluded
  Summary stats;
  int warmup_steps_excluded = 0;
  double samples_per_s = 0;  // the global batch / the median step
  double speedup = 0;        // against the faster one-process door of the run
  bool fastest = false;      // the run's fastest door
  double loss = 0;           // the last measured step's
  // Between steps, the largest rank's: its parameters, their gradients and the optimiser's state
  // (absent in rows written before it).
  std::optional<std::int64_t> state_bytes_per_rank;
  // The largest rank's peak (that state and the most a step allocated on top), and the bytes it
  // handed to collectives and sent point to point in a step; the model's parameters (absent in
  // rows written before them).
  std::optional<std::int64_t> peak_bytes_per_rank, bytes_per_step, parameters;
  // Against DDP ("data"), in units of the noise floor its calibration pair ("data again") measured:
  // "control", "calibration pair", "-12.3% (4.1x the noise floor), separable".
  std::optional<std::string> against_data;
  std::optional<double> noise_floor_percent;
  // The largest rank's communication in the last measured step: what seed 001's alpha-beta model,
  // fitted to this run's ring all-reduces, predicts for what it sent (every collective and send
  // timed as if alone on the wire), and what the median step waited for (the rest overlapped compute):
  // DDP's exposed reductions and ZeRO's gathers, a tensor split's all-reduces; absent where the
  // door does not time it apart (a pipeline's sends and waits are its bubble), and in older rows.
  std::optional<double> predicted_comm_s, waited_comm_s;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("config", config);
    f.optional("repeats", repeats);
    f("stats", stats);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f("samples_per_s", samples_per_s);
    f("speedup", speedup);
    f("fastest", fastest);
    f.optional("loss", loss);
    f.optional("state_bytes_per_rank", state_bytes_per_rank);
    f.optional("peak_bytes_per_rank", peak_bytes_per_rank);
    f.optional("bytes_per_step", bytes_per_step);
    f.optional("parameters", parameters);
    f.optional("against_data", against_data);
    f.optional("noise_floor_percent", noise_floor_percent);
    f.optional("predicted_comm_s", predicted_comm_s);
    f.optional("waited_comm_s", waited_comm_s);
  }
};

}  // namespace trainlab::bench
