// The alpha-beta model of a ring all-reduce (seed 001): for P ranks, per-hop latency alpha and
// link bandwidth B, an all-reduce of S bytes takes
//     T = 2 (P - 1) alpha  +  2 (P - 1) / P * S / B
// (latency term + bandwidth term). Buckets pay the latency term once each. The crossover
// S* = P alpha B is the bucket size at which the two terms of one bucket are equal.
// Units: bytes, seconds, bytes per second; MiB = 2^20 bytes and GB/s = 1e9 bytes/s in printouts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/distributed.h"

namespace trainlab::comm {

struct RingModel {
  int ranks = 2;
  double alpha_s = 0;          // per-hop latency
  double bandwidth_Bps = 1e9;  // per-link bandwidth

  double latency_term_s() const { return 2.0 * (ranks - 1) * alpha_s; }
  double bandwidth_term_s(double bytes) const { return 2.0 * (ranks - 1) / ranks * bytes / bandwidth_Bps; }
  double time_s(double bytes) const { return latency_term_s() + bandwidth_term_s(bytes); }
  double crossover_bytes() const { return ranks * alpha_s * bandwidth_Bps; }
  // `total` bytes in buckets of `bucket` bytes: ceil(total / bucket) latency terms, one bandwidth term.
  std::int64_t bucket_count(double total, double bucket) const;
  double bucketed_time_s(double total, double bucket) const;
};

struct CostQuestion {
  RingModel model;
  double params = 0;  // parameters
  double bytes_per_param = 2;
  double step_s = 0.4;                // the training step without communication
  double backward_share = 2.0 / 3.0;  // backward's share of the step (about 4 of its 6 FLOPs per parameter)
  std::vector<double> buckets_mib;
  int scale_to = 0;  // also the scaling table at this many ranks (0: none)
  // Part (e), the three fixes, each printed when asked:
  int accumulate = 0;   // micro-steps per optimiser step (the all-reduce fires once per K)
  int zero_stage = -1;  // bytes moved and memory per rank under ZeRO 0-3 (-1: not asked)
  // Persistent bytes per parameter for the memory line (seed 003's mixed-precision Adam: 2 + 2 +
  // 4 master + 8 moments = 16).
  double param_bytes = 2, grad_bytes = 2, master_bytes = 4, moment_bytes = 8;
  // A hierarchical all-reduce: reduce-scatter inside each node of node_size ranks (intra_* link),
  // all-reduce of the 1/node_size partials across the nodes (the model's link), all-gather inside.
  int node_size = 0;  // 0: not asked
  double intra_bandwidth_Bps = 0, intra_alpha_s = 0;
};

// ZeRO stage s's communication per rank and step, as ring collectives over P ranks of S bytes:
// stages 0-2 move 2(P-1)/P S (an all-reduce, or its two halves: the gradients reduce-scattered
// and the parameters all-gathered), stage 3 gathers the parameters again for backward,
// 3(P-1)/P S. Time: the same collectives' latency and bandwidth terms.
struct ZeroTraffic {
  double bytes_per_rank = 0;
  double time_s = 0;
  int collectives = 0;  // ring collectives (reduce-scatter or all-gather halves) per step
};
ZeroTraffic zero_traffic(const RingModel& model, double bytes, int stage);

// The hierarchical all-reduce's three phases (seed 001's model: the partials of S / node_size bytes
// all-reduced across the nodes at the model's bandwidth), against a flat ring of all P ranks at
// that bandwidth. The message that crosses nodes is node_size times smaller.
struct Hierarchical {
  int nodes = 0;
  double intra_reduce_scatter_s = 0, inter_allreduce_s = 0, intra_all_gather_s = 0;
  double total_s() const { return intra_reduce_scatter_s + inter_allreduce_s + intra_all_gather_s; }
  double inter_message_bytes = 0;  // S / node_size
};
Hierarchical hierarchical_allreduce(const CostQuestion& question, double bytes);

// The seed's whole analysis as text: message size, latency and bandwidth terms, total, fraction of
// the step, the exposed/overlapped brackets, the backward-window check, the crossover and the
// bucket table, and (with scale_to) the scaling table.
std::string collective_cost_report(const CostQuestion& question);

// A fit of T(S) = a + b S to measured (bytes, seconds) points, least squares on the relative error
// (each point weighted 1/T^2, so a 4 KiB point counts as much as a 256 MiB one), mapped to alpha =
// a / 2(P-1) and B = 2(P-1)/P / b.
struct Fit {
  RingModel model;
  std::vector<double> relative_residuals;  // (measured - fitted) / measured, per point
  double max_abs_relative_residual = 0;
  double rms_relative_residual = 0;
  bool alpha_unresolved = false;  // the best line had a < 0: refitted with alpha = 0 (pure bandwidth)
  bool physical = true;           // b > 0; otherwise B is meaningless
};
Fit fit_ring_model(int ranks, const std::vector<std::pair<double, double>>& points);

// One line, or two regimes: the best split of the sizes (sorted) into a lower and an upper range,
// each fitted on its own (at least `min_points` per side: two points always fit a line exactly, so
// a two-point regime would say nothing), when one line fits poorly.
struct FitAnalysis {
  Fit one_line;
  bool one_line_fits = true;  // max |residual| <= tolerance and physical
  double tolerance = 0.2;
  bool split = false;
  double split_bytes = 0;  // the first size of the upper regime
  Fit lower, upper;
};
FitAnalysis analyse_fit(int ranks, std::vector<std::pair<double, double>> points, double tolerance = 0.2,
                        std::size_t min_points = 3);
// The fit as text: alpha, B, S*, the per-size table of measured, fitted and residual, and the verdict.
std::string fit_report(const FitAnalysis& analysis, const std::vector<std::pair<double, double>>& points);

// One all-reduce of S bytes per rank by `algorithm` over P ranks, as comm/ring_allreduce.h and
// comm/latency_allreduce.h run it, in the alpha-beta terms: T = steps alpha + bytes_factor S / B,
//   ring                2(P - 1) steps,      2(P - 1)/P S
//   recursive doubling  log2(p) steps,       log2(p) S
//   halving-doubling    2 log2(p) steps,     2(p - 1)/p S
// with p the largest power of two <= P; a world that is not one adds the fold in and out, 2 steps
// of S. The library's own (native) is modelled as the ring. `automatic` must be resolved first
// (choose_algorithm).
struct AllreduceCost {
  double steps = 0, bytes_factor = 0;
  double time_s(double alpha_s, double bandwidth_Bps, double bytes) const {
    return steps * alpha_s + bytes_factor * bytes / bandwidth_Bps;
  }
};
AllreduceCost allreduce_cost(AllreduceAlgorithm algorithm, int ranks);

// alpha and B fitted to measured all-reduces, each by its own algorithm's terms (least squares on
// the relative error, alpha >= 0): what the tensor-parallel bench predicts its step's all-reduces with.
struct AllreducePoint {
  AllreduceCost cost;
  double bytes = 0, seconds = 0;
};
struct AllreduceFit {
  double alpha_s = 0, bandwidth_Bps = 0;
  double max_abs_relative_residual = 0;
  bool alpha_unresolved = false;  // the best fit had alpha < 0: refitted with alpha = 0
};
AllreduceFit fit_allreduce(const std::vector<AllreducePoint>& points);

}  // namespace trainlab::comm
