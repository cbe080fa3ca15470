// bench_allreduce as a library call: the options its command line sets and the run itself (the
// executable, apps/bench_allreduce.cpp, parses the command line and calls run_allreduce_study).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/report/section.h"
#include "comm/ring_allreduce.h"

namespace trainlab::bench {

struct AllreduceOptions {
  std::string sizes_spec = "4K..256M", dtype_name_ = "f32", ledger_path, comm_kind = "mpi";
  double seconds_per_size = 0.4, timeout = 300;
  int warmup = 3, min_iters = 5, max_iters = 500;
  std::size_t segment_bytes = comm::RingOptions{}.segment_bytes;
  bool no_ledger = false;
};

// Runs it on the launched ranks (MPI is initialised by the caller); returns the exit status.
int run_allreduce_study(const AllreduceOptions& options);

// The report's section for this study (studies/registry.h).
SectionDef allreduce_report_section();

}  // namespace trainlab::bench
