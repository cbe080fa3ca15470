// bench_buckets as a library call: the options its command line sets and the run itself (the
// executable, apps/bench_buckets.cpp, parses the command line and calls run_buckets_study).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/report/section.h"
#include "engine/train/config.h"

namespace trainlab::bench {

struct BucketsOptions {
  std::string buckets_spec = "16K..4M", dtype_name = "f32", algorithm_name_ = "ring", ledger_path;
  // The gradient's elements: `params` when given (> 0), else the model's parameter count at its
  // default input (model_parameter_count; SmallCNN's by default).
  ModelConfig model;
  double params = 0, seconds_per_config = 0.3, timeout = 300;
  int warmup = 2, min_iters = 5, max_iters = 200;
  bool no_ledger = false;
};

// Runs it on the launched ranks (MPI is initialised by the caller); returns the exit status.
int run_buckets_study(const BucketsOptions& options);

// The report's section for this study (studies/registry.h).
SectionDef buckets_report_section();

}  // namespace trainlab::bench
