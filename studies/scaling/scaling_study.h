// bench_scaling as a library call: the options its command line sets and the run itself (the
// executable, apps/bench_scaling.cpp, parses the command line and calls run_scaling_study).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/report/section.h"
#include "engine/train/config.h"

namespace trainlab::bench {

struct ScalingOptions {
  ModelConfig model;  // what every run trains (the PyTorch peer only beside SmallCNN)
  std::string worlds = "1,2,4";
  int repeats = 3, trials = 7, steps = 15, warmup = 3, trial_steps = 10, threads = 1;
  std::int64_t batch = 32, global_batch = 128, base_batch = 32, decode_cost = 60;
  double base_lr = 0.01, bucket_cap_mb = 25, first_bucket_mb = 1, timeout = 300;
  std::string backend, dtype = "f32", allreduce = "native", ledger_path, python = "/usr/bin/python3";
  std::string allreduce_tuning;  // allreduce auto's thresholds (bench_allreduce --write-tuning's file; "": built in)
  // The communicator DDP runs over: "mpi", or "nccl" (a CUDA build, --backend cuda, one GPU per
  // rank: world sizes up to the GPUs present). The PyTorch peer (gloo, on the CPU) is not run with nccl.
  std::string comm = "mpi";
  std::string peer_script;  // the PyTorch DDP peer (bench/peers/torch_ddp.py)
  bool ablation = true, peer = true, no_ledger = false, rendezvous = false;
  // Rank-per-core binding: "core" confines rank r (every thread of it) to physical core r mod cores
  // (hwloc); "none" leaves the scheduler free.
  std::string bind = "none";
  // Instead of the scaling tables: weak scaling at worlds 1 and 2 with binding none (measured twice,
  // the calibration pair) and core, interleaved; efficiency per round and the verdict of core vs
  // none against the noise floor.
  bool bind_compare = false;
  // ZeRO stage of every run ("0" or "1"), or several ("0,1"): instead of the scaling tables, weak
  // scaling at each world of 2 or more with every stage, interleaved (the first one twice, the
  // calibration pair): samples/s, communication wait and memory per rank side by side.
  std::string zero = "0";
  // DDP's communication hook for every run ("none", "bf16" or "fp16"), or several ("none,bf16"):
  // instead of the scaling tables, each compared at every world of 2 or more as --zero does, with
  // world 1 in every round (weak-scaling efficiency per arm, against the targets) and, after the
  // timing, accuracy_seeds paired training runs of accuracy_steps per arm at world 2 with held-out
  // evaluation (what compression costs in accuracy, against the seed-to-seed noise).
  std::string grad_compress = "none";
  int accuracy_steps = 300, accuracy_seeds = 3;
  // DDP's gradients as views of its buckets (PyTorch's gradient_as_bucket_view), or copied.
  bool bucket_view = true;
};

// Runs it on the launched ranks (MPI is initialised by the caller); returns the exit status.
int run_scaling_study(const ScalingOptions& options);

// The report's section for this study (studies/registry.h).
SectionDef scaling_report_section();

}  // namespace trainlab::bench
