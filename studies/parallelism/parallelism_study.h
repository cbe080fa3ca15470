// bench_parallelism as a library call (apps/bench_parallelism.cpp parses the command line): seed
// 004's three doors measured on one machine at the same global batch, side by side. On the launched
// ranks, step by step round-robin so that drift hits them alike:
//   one process    the unsplit model on rank 0 at 1 thread and at every rank's threads (the others
//                  asleep): what the split ones must beat on the same cores
//   data           DDP (comm/ddp.h), each rank batch / ranks of the batch; twice ("data again": the
//                  calibration pair whose gap is the noise floor every other door is judged against)
//   zero1..zero3   DDP with ZeRO-1 (the optimiser state sharded), 2 (the gradients too) or 3 (the
//                  parameters too); asked for
//   pipeline       a stage per rank (comm/pipeline.h), 1F1B, the batch in micro-batches
//   tensor         Megatron's split over every rank (engine/nn/tensor_parallel.h), the whole batch
//   data-pipeline  2 replicas of a pipeline of half the ranks, each half the batch (an even world >= 4)
//   data-tensor    2 replicas of a tensor split over half the ranks, each half the batch
// Each door trains its own copy of the model from the same initial weights with SGD (momentum 0.9). A
// `parallelism` ledger row per door: the step (the slowest rank's), samples/s, the speedup over the
// faster one-process door, which door won, the effect against DDP in noise floors, and per rank
// (the largest) the state between steps, the peak, the bytes a step moved. A door the model cannot take (no parts to
// cut, no split, a batch the ranks or micro-batches do not divide) is refused before anything runs, naming it.
#pragma once

#include <cstdint>
#include <string>

#include "bench/report/section.h"
#include "engine/train/config.h"

namespace trainlab::bench {

struct ParallelismStudyOptions {
  ModelConfig model;
  std::int64_t batch = 32;  // the global batch, every door
  std::string doors = "one,data,pipeline,tensor";
  std::int64_t micro_batches = 4;  // the pipeline's
  std::string backend = "onednn";
  int threads = 1;  // per rank
  bool fuse = false;
  int steps = 10, warmup = 2;
  double timeout = 300;
  std::string ledger_path;
  bool no_ledger = false;
  double memory_gib = 80;  // the budget "parameters whose state fits" divides (an H100's 80 GB by default)
};

// Runs it on the launched ranks (MPI initialised by the caller); returns the exit status.
int run_parallelism_study(const ParallelismStudyOptions& options);

SectionDef parallelism_report_section();

}  // namespace trainlab::bench
