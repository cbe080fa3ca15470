// The tensor-parallel study's ledger rows: one `tensor_parallel` row per model and rank count
// (bench_tensor_parallel, studies/tensor_parallel/tensor_parallel_study.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"

namespace trainlab::bench {

struct TensorParallelConfig {
  std::string model;       // its label ("SmallCNN", "GPT (n_layer=4, ...)")
  int ranks = 0;           // tensor-parallel ranks (one group: the world)
  std::int64_t batch = 0;  // samples per step: the whole batch on every rank
  int threads = 1;         // per rank
  std::string algorithm;   // the all-reduce asked for ("auto": by size)
  bool fuse = false;
  template <class F>
  void fields(F& f) {
    f("model", model);
    f("ranks", ranks);
    f("batch", batch);
    f("threads", threads);
    f("algorithm", algorithm);
    f.optional("fuse", fuse);
  }
};

struct TensorParallelRow {
  static constexpr const char* kKind = "tensor_parallel";
  RowHeader header;
  TensorParallelConfig config;
  std::vector<double> repeats;  // each measured step's seconds (the slowest rank's), warm-up excluded
  Summary stats;
  int warmup_steps_excluded = 0;
  double samples_per_s = 0;  // batch / the median step
  // The unsplit model in one process on the same cores, at one thread and at every rank's threads,
  // its steps interleaved with the split ones; the speedup is against the faster (baseline_threads).
  std::vector<double> baseline_repeats;  // the faster's
  Summary baseline, unsplit_one_thread, unsplit_all_threads;
  int baseline_threads = 0;
  double speedup = 0;  // baseline median / split median
  // Megatron's sums per step: how many, their bytes per rank, the algorithms auto chose.
  std::int64_t allreduces = 0;
  std::int64_t allreduce_bytes = 0;
  std::string algorithms;
  // Seconds a step spent in them (each rank's sum, the mean over the ranks), per measured step, and
  // its share of the step (medians); split into waiting for the last rank to arrive (the ranks'
  // skew) and the transfer after it (what the cost model describes).
  Summary comm_s, comm_wait_s, comm_transfer_s;
  double comm_share = 0;
  // The same calls outside the step (each size timed alone, the medians summed), with their buffers
  // out of cache as a step's are (walking through 64 MiB of them) and in cache (one buffer), and the
  // cost model's prediction with alpha and B fitted to this run's cold all-reduces alone.
  double standalone_comm_s = 0, standalone_warm_comm_s = 0;
  double predicted_comm_s = 0;
  double alpha_s = 0, bandwidth_Bps = 0, fit_max_residual = 0;
  double loss = 0;  // the last measured step's
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("config", config);
    f.optional("repeats", repeats);
    f("stats", stats);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f("samples_per_s", samples_per_s);
    f.optional("baseline_repeats", baseline_repeats);
    f("baseline", baseline);
    f("unsplit_one_thread", unsplit_one_thread);
    f("unsplit_all_threads", unsplit_all_threads);
    f("baseline_threads", baseline_threads);
    f("speedup", speedup);
    f("allreduces", allreduces);
    f("allreduce_bytes", allreduce_bytes);
    f("algorithms", algorithms);
    f("comm_s", comm_s);
    f("comm_wait_s", comm_wait_s);
    f("comm_transfer_s", comm_transfer_s);
    f("comm_share", comm_share);
    f("standalone_comm_s", standalone_comm_s);
    f("standalone_warm_comm_s", standalone_warm_comm_s);
    f("predicted_comm_s", predicted_comm_s);
    f("alpha_s", alpha_s);
    f("bandwidth_Bps", bandwidth_Bps);
    f("fit_max_residual", fit_max_residual);
    f.optional("loss", loss);
  }
};

}  // namespace trainlab::bench
