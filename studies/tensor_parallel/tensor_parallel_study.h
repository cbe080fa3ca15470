// bench_tensor_parallel as a library call (apps/bench_tensor_parallel.cpp parses the command line):
// Megatron's tensor parallelism (engine/nn/tensor_parallel.h) measured on the launched ranks, one
// group of all of them, every rank the whole batch. Interleaved step by step with the unsplit model
// in one process using every rank's threads (the same cores): the step's time and samples/s, the
// all-reduces on its critical path (count, bytes, the algorithm auto chose, their seconds in the
// step and share of it), the same all-reduces timed alone, and the alpha-beta prediction of them
// with alpha and B fitted to this run's stand-alone all-reduces (comm/cost_model.h, each algorithm
// by its own terms). A `tensor_parallel` ledger row per run.
#pragma once

#include <cstdint>
#include <string>

#include "bench/report/section.h"
#include "engine/train/config.h"

namespace trainlab::bench {

struct TensorParallelStudyOptions {
  ModelConfig model;
  std::int64_t batch = 32;  // samples per step, on every rank
  std::string backend = "onednn";
  int threads = 1;  // per rank
  std::string algorithm = "auto";
  bool fuse = false;  // --fuse: the backend's fused ops (the GPT's one attention call)
  int steps = 10, warmup = 2;
  double timeout = 300;
  std::string ledger_path;
  bool no_ledger = false;
};

// Runs it on the launched ranks (MPI initialised by the caller); returns the exit status.
int run_tensor_parallel_study(const TensorParallelStudyOptions& options);

SectionDef tensor_parallel_report_section();

}  // namespace trainlab::bench
