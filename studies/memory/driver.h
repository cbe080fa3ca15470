// The memory study's driver (issue 13, seed 003's capacity levers; apps/memory_study.cpp is its
// command line): every arm (batch x recompute x zero) a short DDP training run over the launched
// ranks, repeats interleaved across arms, the control arm twice per round (the calibration pair),
// each repeat a ledger row (studies/memory/rows.h), and the tables of studies/memory/memory_study.h.
#pragma once

#include <string>

#include "engine/train/config.h"

namespace trainlab::bench {

struct MemoryOptions {
  ModelConfig model;  // what every arm trains
  // Comma-separated; zero "" is the default: 0,1,2,3 over two or more ranks, 0 alone on one (nothing to shard over).
  std::string batches = "32,128,512", recompute = "none,convs,all", zero;
  // --recompute given: a level the model takes no blocks for is refused; by default such levels
  // are left out (an MLP marks no blocks to recompute), and the header says so.
  bool recompute_given = false;
  int repeats = 7, steps = 10, warmup = 3, threads = 1;
  std::string backend, dtype = "f32", optimizer = "sgd", ledger_path;
  bool quick = false, no_ledger = false;
  double timeout = 300;  // seconds any wait may take
};

// Runs the study on MPI's world (MPI initialised by the caller). Returns 0; an Error ends the whole
// job with "memory_study: error: ..." and status 2.
int run_memory_study(const MemoryOptions& options);

}  // namespace trainlab::bench
