// The CPU pinning study's driver (seed 000; apps/pinning.cpp is its command line): five arms on a
// workload where loader work competes with compute, every repeat of every arm its own process started
// with its CPU mask already set, repeats interleaved across arms, each repeat a ledger row
// (studies/pinning/rows.h), and the tables of studies/pinning/pinning_study.h printed at the end.
#pragma once

#include <cstdint>
#include <string>

#include "engine/train/config.h"

namespace trainlab::bench {

struct PinningWorkload {
  ModelConfig model;  // what every repeat trains (each child is given it on its command line)
  std::int64_t batch = 32, decode_cost = 60, steps = 40, warmup = 5;
  int workers = 0;  // 0: the physical cores of the workers' half
};

struct PinningOptions {
  int repeats = 7, contend = 0;
  bool quick = false, no_ledger = false;
  PinningWorkload workload;
  std::string ledger_path, trace_path, backend;
  double timeout = 300;
  // The child's side (one arm's one repeat, started by the study itself).
  std::string child_arm, child_workers_cpus;
  int child_threads = 0;
};

// The study: the arms planned from the machine's topology (hwloc), the rounds (quiet, and with
// --contend a contended condition too), a row per repeat, the tables. Returns the exit status: 0,
// or 1 when the --trace repeat failed (the measurements stand). Throws Error.
int run_pinning(const PinningOptions& options);

// The child's side: one arm's one repeat in this process (started by the study as this program with
// --child-arm ...; the CPU mask was set before exec), its result printed on one line for the parent.
int run_pinning_child(const PinningOptions& options);

// `threads` busy threads that spin until the process is killed (--contend's load).
int run_pinning_spinners(int threads);

}  // namespace trainlab::bench
