// Throughput of a registered model's training (or inference) on in-memory batches: the measurement behind
// `trainlab throughput` and the comparison against PyTorch. Data are generated before timing
// starts, so the figure is the engine's compute alone (data-wait is next to zero); each step is the
// trainer's own (StepRunner), timed the same way.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/instrument/memory_usage.h"
#include "engine/nn/model_registry.h"
#include "engine/train/step.h"

namespace trainlab::bench {

struct ThroughputConfig {
  std::string model = "smallcnn";  // a registered model (engine/nn/model_registry.h)
  ModelOptions model_options;
  std::string backend;  // empty: the default CPU backend
  DType dtype = DType::f32;
  MemoryFormat layout = MemoryFormat::contiguous;
  bool fuse = false;
  bool forward_only = false;
  bool cuda_graph = false;  // training: forward and backward replayed from CUDA graphs after the warm-up
  std::int64_t batch = 128;
  int threads = 0;
  double seconds = 5.0;     // measured time (after warm-up); at least min_steps steps run
  std::int64_t warmup = 5;  // steps run first and excluded
  std::int64_t min_steps = 3;
  std::uint64_t seed = 0;
  bool profile = false;  // record op spans over the measured steps (op_seconds in the result)
  // The GEMM ceiling measured after the steps, in the run's dtype through the same backend's linear
  // kernel, for `ceiling_seconds` (0: none): the step's and each phase's share of it.
  double ceiling_seconds = 1.0;
};

// The same process's GEMM ceiling (measure_ceiling): what a step's GFLOP/s is a share of.
struct GemmCeiling {
  std::string skipped;  // why there is none (ceiling_seconds 0, a dtype the linear kernel lacks), else ""
  DType dtype = DType::f32;
  std::int64_t n = 0;          // the products' size: n x n x n
  std::vector<double> gflops;  // each timed product's GFLOP/s (the first, warm-up, excluded)
  double median() const;
};

struct ThroughputResult {
  ThroughputConfig config;
  std::string model;  // the registered model's name
  std::string backend_name;
  std::string backend_describe;
  std::string phase_timer;  // the backend's timer, which timed the phases (samples/s: the wall clock)
  int threads = 0;
  std::int64_t steps = 0;  // measured steps
  double seconds = 0;      // their total
  double samples_per_s = 0;
  std::int64_t tokens_per_sample = 0;  // a token model's window (tokens/s = samples/s x this); 0: images
  std::vector<double> step_seconds;
  PhaseTimes phases;           // totals over the measured steps
  double flop_per_sample = 0;  // analytic: 2 * multiply-adds of the convolutions and linears
  // Backend counters over the measured steps (allocations and primitives created should be 0).
  std::map<std::string, std::int64_t> counter_deltas;
  double peak_rss_mb = 0;  // of this process, so far
  // Tensor memory on the backend's device over the measured steps, by category (peaks reset after
  // the warm-up, so the optimiser's state and the steady buffers are in it, first-step costs not).
  MemoryUsage memory;
  DeviceType memory_device = DeviceType::cpu;
  // With profile: per span name (conv2d.forward, reorder, ...), total seconds and calls over the
  // measured steps; spans nest (an op inside a phase), so they do not add up to the step.
  std::map<std::string, std::pair<double, std::int64_t>> op_seconds;
  StepPlan plan;                       // what the backend ran natively and what it emulated (engine/train/step.h)
  double forward_flop_per_sample = 0;  // the forward's share of flop_per_sample (the rest: backward)
  // Forward only: the weights the backend kept in its primitives' layouts (FrozenWeights); -1 where
  // the backend has no such capability or the run trained.
  std::int64_t frozen_weights_kept = -1;
  GemmCeiling ceiling;
};

ThroughputResult measure_throughput(const ThroughputConfig& config);

// The GEMM ceiling: y[n, n] = x[n, n] w[n, n]^T through the backend's linear kernel (oneDNN's
// inner product), repeated for `seconds` after one warm-up call. Returns each call's GFLOP/s.
std::vector<double> measure_gemm_gflops(const std::string& backend, DType dtype, std::int64_t n, int threads,
                                        double seconds);
std::vector<double> measure_gemm_gflops(Backend& backend, DType dtype, std::int64_t n, double seconds);
// The GEMM ceiling for a step's share: products of n x n matrices through the backend's linear
// kernel in `dtype`, n the largest power of two from 256 to 2048 whose product takes at most half
// of `seconds` (2048 on a fast backend, as `trainlab gemm` and make compare; smaller on the
// reference one, which would take minutes), then timed for `seconds` (at least 3 products). skipped says why where the
// backend's linear lacks `dtype`.
GemmCeiling measure_ceiling(Backend& backend, DType dtype, double seconds);
std::string throughput_json(const ThroughputResult& result);  // one line
// One line for people: the step's GFLOP/s and each phase's, against the ceiling.
std::string throughput_summary(const ThroughputResult& result);
std::string gemm_json(Backend& backend, DType dtype, std::int64_t n, const std::vector<double>& gflops);
double peak_rss_mb();

}  // namespace trainlab::bench
