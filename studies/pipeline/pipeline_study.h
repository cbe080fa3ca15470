// bench_pipeline as a library call (apps/bench_pipeline.cpp parses the command line): pipeline
// parallelism measured against its bound (seed 003: the fill-and-drain bubble). A stage per rank;
// for each schedule (GPipe, 1F1B) and micro-batch count m, round-robin over the configurations so
// that drift hits them alike: the step's time, each stage's busy time and utilisation, the bound
// m / (m + p - 1) and the bound for the stage times as measured, the micro-batches each stage held
// at once; a `pipeline` ledger row per configuration and, with --trace, every configuration's last
// step as a timeline in Perfetto's JSON (a process per configuration, a thread per stage).
#pragma once

#include <cstdint>
#include <string>

#include "bench/report/section.h"
#include "engine/train/config.h"

namespace trainlab::bench {

struct PipelineStudyOptions {
  ModelConfig model;
  std::string schedules = "gpipe,1f1b";
  std::string micro_batches = "1,2,4,8,16,32";
  std::int64_t micro_batch = 8;  // samples per micro-batch (fixed: m scales the step)
  std::string cut;               // "0,2": each stage's first part; "balanced": by measured time; empty: even
  std::string dtype = "f32";     // f32 | bf16 (autocast over f32 masters)
  int data_parallel = 1;         // pipelines (each world / data_parallel stages), gradients averaged over them
  std::string backend = "onednn";
  int threads = 1;  // per rank
  int steps = 3, warmup = 1;
  double timeout = 300;
  std::string ledger_path, trace_path;
  bool no_ledger = false;
};

// Runs it on the launched ranks (MPI initialised by the caller); returns the exit status.
int run_pipeline_study(const PipelineStudyOptions& options);

SectionDef pipeline_report_section();

}  // namespace trainlab::bench
