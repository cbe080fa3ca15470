#include "comm/cost_model.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <sstream>

#include "backends/error.h"
#include "engine/instrument/memory_model.h"

namespace trainlab::comm {

namespace {
constexpr double kMebibyte = 1024.0 * 1024.0;
}

std::int64_t RingModel::bucket_count(double total, double bucket) const {
  TL_CHECK(bucket > 0, "bucket size must be > 0");
  return static_cast<std::int64_t>(std::ceil(total / bucket - 1e-9));
}

double RingModel::bucketed_time_s(double total, double bucket) const {
  return static_cast<double>(bucket_count(total, bucket)) * latency_term_s() + bandwidth_term_s(total);
}

ZeroTraffic zero_traffic(const RingModel& m, double bytes, int stage) {
  TL_CHECK(stage >= 0 && stage <= 3, "collective-cost: --zero must be 0, 1, 2 or 3, got " + std::to_string(stage));
  ZeroTraffic z;
  z.collectives = stage == 3 ? 3 : 2;  // an all-reduce is a reduce-scatter and an all-gather
  const double halves = static_cast<double>(z.collectives);
  z.bytes_per_rank = halves * (m.ranks - 1) / m.ranks * bytes;
  z.time_s = halves * (m.ranks - 1) * m.alpha_s + z.bytes_per_rank / m.bandwidth_Bps;
  return z;
}

Hierarchical hierarchical_allreduce(const CostQuestion& q, double bytes) {
  const int g = q.node_size, p = q.model.ranks;
  TL_CHECK(g >= 1 && g <= p && p % g == 0, "collective-cost: --node-size " + std::to_string(g) +
                                               " must divide --gpus " + std::to_string(p) + " (ranks per node)");
  TL_CHECK(q.intra_bandwidth_Bps > 0 && q.intra_alpha_s >= 0,
           "collective-cost: --node-size needs --intra-bw > 0 (and --intra-latency >= 0)");
  Hierarchical h;
  h.nodes = p / g;
  // One reduce-scatter (and one all-gather) inside each node: (g-1) hops of S/g bytes.
  const double within = (g - 1) * q.intra_alpha_s + static_cast<double>(g - 1) / g * bytes / q.intra_bandwidth_Bps;
  h.intra_reduce_scatter_s = within;
  h.intra_all_gather_s = within;
  RingModel across = q.model;
  across.ranks = h.nodes;
  h.inter_allreduce_s = h.nodes > 1 ? across.time_s(bytes / g) : 0.0;
  h.inter_message_bytes = bytes / g;
  return h;
}

namespace {

// Part (e): accumulation, ZeRO, the hierarchical all-reduce; each when asked.
void fixes_report(const CostQuestion& q, double S, double T, std::ostringstream& out) {
  const RingModel& m = q.model;
  if (q.accumulate == 0 && q.zero_stage < 0 && q.node_size == 0) return;
  out << "(e) the fixes, quantified\n";
  if (q.accumulate > 0) {
    const double k = q.accumulate, compute = k * q.step_s;
    out << fmt::format(
        "  accumulate {}: one all-reduce per optimiser step of {} micro-steps: T = {:.1f} ms (unchanged) against "
        "{:.0f} ms of compute: {:.1f}% of it (was {:.1f}%), fully exposed {:.0f}/({:.0f} + {:.1f}) = {:.1f}% "
        "efficiency (was {:.1f}%); no extra memory, a {}x larger global batch (watch the critical batch size). "
        "Only the last micro-step's backward ({:.1f} ms) can hide it (the others do not synchronise)\n",
        q.accumulate, q.accumulate, T * 1e3, compute * 1e3, 100 * T / compute, 100 * T / q.step_s, compute * 1e3,
        compute * 1e3, T * 1e3, 100 * compute / (compute + T), 100 * q.step_s / (q.step_s + T), q.accumulate,
        q.step_s * q.backward_share * 1e3);
  }
  if (q.zero_stage >= 0) {
    const ZeroTraffic zero = zero_traffic(m, S, q.zero_stage), plain = zero_traffic(m, S, 0);
    StateBytes bytes;
    bytes.param = q.param_bytes;
    bytes.grad = q.grad_bytes;
    bytes.master = q.master_bytes;
    bytes.moments = q.moment_bytes;
    const PersistentState was = persistent_state(q.params, m.ranks, 0, bytes);
    const PersistentState now = persistent_state(q.params, m.ranks, q.zero_stage, bytes);
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    out << fmt::format(
        "  ZeRO-{}: {} ring collectives of {:.0f} MiB per step, {:.1f} MiB sent per rank (all-reduce: {:.1f}), "
        "{:.1f} ms (all-reduce: {:.1f} ms){}\n",
        q.zero_stage, zero.collectives, S / kMebibyte, zero.bytes_per_rank / kMebibyte,
        plain.bytes_per_rank / kMebibyte, zero.time_s * 1e3, plain.time_s * 1e3,
        q.zero_stage == 3 ? ": the parameters are gathered again for backward, 1.5x the volume"
                          : ": the same volume, rearranged (which halves each rank keeps)");
    out << fmt::format(
        "    memory per rank: {:g} bytes/param ({:g} params + {:g} grads + {:g} master + {:g} moments) -> "
        "params {:.2f} + grads {:.2f} + optimiser {:.2f} = {:.2f} GiB (was {:.2f} GiB)\n",
        bytes.param + bytes.grad + bytes.optimizer(), bytes.param, bytes.grad, bytes.master, bytes.moments,
        now.params / kGiB, now.grads / kGiB, now.optimizer / kGiB, now.total() / kGiB, was.total() / kGiB);
    if (q.zero_stage == 2) {
      out << "    (seed 001 prints 3.48 GiB here for its case; its 1.06 GiB second term is 14 Psi/16, and 14 Psi/32 "
             "is what 32 ranks give)\n";
    }
  }
  if (q.node_size > 0) {
    const Hierarchical h = hierarchical_allreduce(q, S);
    out << fmt::format(
        "  hierarchical all-reduce, {} nodes of {}: reduce-scatter inside each node {:.2f} ms ({:g} GB/s, {:g} us) "
        "+ all-reduce of the {:.0f} MiB partials across {} node{} {:.2f} ms ({:g} GB/s) + all-gather inside {:.2f} "
        "ms = {:.1f} ms, against {:.1f} ms for the flat ring ({:.1f}x faster): the message crossing nodes is "
        "{:.0f} MiB instead of {:.0f} MiB. NCCL's topology-aware algorithms try this already, which is why a measured "
        "all-reduce often beats the flat model: verify with nccl-tests\n",
        h.nodes, q.node_size, h.intra_reduce_scatter_s * 1e3, q.intra_bandwidth_Bps / 1e9, q.intra_alpha_s * 1e6,
        S / q.node_size / kMebibyte, h.nodes, h.nodes == 1 ? "" : "s", h.inter_allreduce_s * 1e3, m.bandwidth_Bps / 1e9,
        h.intra_all_gather_s * 1e3, h.total_s() * 1e3, T * 1e3, T / h.total_s(), h.inter_message_bytes / kMebibyte,
        S / kMebibyte);
  }
}

// Part (f)'s table: each listed bucket size's count and time against the ideal, and the smallest
// within 15% of it.
void bucket_report(const CostQuestion& q, double S, double lat, double bw, double s_star, std::ostringstream& out) {
  const RingModel& m = q.model;
  if (q.buckets_mib.empty()) return;
  out << fmt::format("\n{:>10} {:>7} {:>10} {:>11} {:>10} {:>9} {:>17}\n", "bucket MiB", "count", "time ms",
                     "over ideal", "latency %", "overlap?", "bandwidth-bound?");
  for (double mib : q.buckets_mib) {
    const double bucket = mib * kMebibyte;
    const std::int64_t count = m.bucket_count(S, bucket);
    const double t = m.bucketed_time_s(S, bucket);
    out << fmt::format("{:>10g} {:>7} {:>10.1f} {:>+10.1f}% {:>10.1f} {:>9} {:>17}\n", mib, count, t * 1e3,
                       100 * (t / bw - 1), 100 * static_cast<double>(count) * lat / t, count >= 2 ? "yes" : "no",
                       bucket >= s_star ? "yes" : "no");
  }
  out << fmt::format(
      "  ideal = the bandwidth term alone ({:.1f} ms); overlap?: two or more buckets, so reduction can "
      "start before backward ends; bandwidth-bound?: the bucket is at least S*\n",
      bw * 1e3);
  double best = -1;
  for (double mib : q.buckets_mib) {
    if (best < 0 && m.bucketed_time_s(S, mib * kMebibyte) <= 1.15 * bw) best = mib;
  }
  // The rule solved exactly: count * latency <= 0.15 * bandwidth term.
  const auto max_count = static_cast<std::int64_t>(std::floor(0.15 * bw / std::max(lat, 1e-300)));
  if (best > 0) {
    out << fmt::format("  smallest listed bucket within 15% of the ideal: {:g} MiB", best);
  } else {
    out << "  no listed bucket is within 15% of the ideal";
  }
  if (max_count >= 1) {
    out << fmt::format("; the rule solved exactly: at most {} buckets, each >= {:.1f} MiB\n", max_count,
                       S / static_cast<double>(max_count) / kMebibyte);
  } else {
    out << "; even one bucket exceeds it (the latency term alone is over 15% of the ideal)\n";
  }
}

// Part (g): the same all-reduce at q.scale_to ranks, term by term.
void scaling_report(const CostQuestion& q, double S, double lat, double bw, double s_star, std::ostringstream& out) {
  const RingModel& m = q.model;
  if (q.scale_to <= 0) return;
  const double step_ms = q.step_s * 1e3;
  RingModel big = m;
  big.ranks = q.scale_to;
  const double big_bw = big.bandwidth_term_s(S), big_lat = big.latency_term_s();
  out << fmt::format(
      "\n(g) scaling to {} ranks: the all-reduce of {:.0f} MiB takes {:.1f} ms, {:.1f}% of a {:g} ms step\n", big.ranks,
      S / kMebibyte, big.time_s(S) * 1e3, 100 * big.time_s(S) / q.step_s, step_ms);
  out << fmt::format("{:<34} {:>12} {:>12} {:>10}\n", "term", fmt::format("at P={}", m.ranks),
                     fmt::format("at P={}", big.ranks), "change");
  out << fmt::format("{:<34} {:>9.1f} ms {:>9.1f} ms {:>+9.1f}%\n", "bandwidth 2(P-1)/P * S/B", bw * 1e3, big_bw * 1e3,
                     100 * (big_bw / bw - 1));
  out << fmt::format("{:<34} {:>9.2f} ms {:>9.2f} ms {:>9.1f}x\n", "latency 2(P-1) alpha", lat * 1e3, big_lat * 1e3,
                     lat > 0 ? big_lat / lat : INFINITY);
  out << fmt::format("{:<34} {:>8.2f} MiB {:>8.2f} MiB {:>9.1f}x\n", "crossover S* = P alpha B", s_star / kMebibyte,
                     big.crossover_bytes() / kMebibyte, big.crossover_bytes() / s_star);
  out << fmt::format("{:<34} {:>12} {:>12} {:>9.1f}x\n", "global batch (per-rank units)", m.ranks, big.ranks,
                     static_cast<double>(big.ranks) / m.ranks);
  for (double mib : q.buckets_mib) {
    out << fmt::format("  {:g} MiB buckets: {:.1f} ms at P={}, {:.1f} ms at P={}{}\n", mib,
                       m.bucketed_time_s(S, mib * kMebibyte) * 1e3, m.ranks,
                       big.bucketed_time_s(S, mib * kMebibyte) * 1e3, big.ranks,
                       mib * kMebibyte < big.crossover_bytes() ? " (now below S*: latency-bound)" : "");
  }
}

}  // namespace

std::string collective_cost_report(const CostQuestion& q) {
  const RingModel& m = q.model;
  TL_CHECK(m.ranks >= 2, "collective-cost: --gpus must be >= 2, got " + std::to_string(m.ranks));
  TL_CHECK(m.bandwidth_Bps > 0 && m.alpha_s >= 0, "collective-cost: --bw must be > 0 and --latency >= 0");
  TL_CHECK(q.params > 0 && q.bytes_per_param > 0 && q.step_s > 0,
           "collective-cost: --params, --bytes-per-param and --step-ms must be > 0");
  const double S = q.params * q.bytes_per_param;
  const double lat = m.latency_term_s(), bw = m.bandwidth_term_s(S), total = lat + bw;
  const double step_ms = q.step_s * 1e3;
  std::ostringstream out;
  out << fmt::format(
      "ring all-reduce model (seed 001): P = {} ranks, B = {:g} GB/s, alpha = {:g} us, {:g}e9 params x "
      "{:g} bytes\n",
      m.ranks, m.bandwidth_Bps / 1e9, m.alpha_s * 1e6, q.params / 1e9, q.bytes_per_param);
  out << "units: 1 MiB = 2^20 bytes, 1 GiB = 2^30 bytes, 1 GB/s = 1e9 bytes/s\n\n";
  out << fmt::format("(a) message size      S = {:.4g} bytes = {:.1f} MiB = {:.2f} GiB\n", S, S / kMebibyte,
                     S / (kMebibyte * 1024));
  out << fmt::format("(b) latency term      2(P-1) alpha        = 2 * {} * {:g} us = {:.2f} ms\n", m.ranks - 1,
                     m.alpha_s * 1e6, lat * 1e3);
  out << fmt::format("    bandwidth term    2(P-1)/P * S/B      = {:.4f} * {:.4g}/{:.4g} = {:.1f} ms\n",
                     2.0 * (m.ranks - 1) / m.ranks, S, m.bandwidth_Bps, bw * 1e3);
  out << fmt::format(
      "    total             T                   = {:.1f} ms (the bandwidth term is {:.1f}x the "
      "latency term)\n",
      total * 1e3, lat > 0 ? bw / lat : INFINITY);
  const double fraction = total / q.step_s;
  out << fmt::format("(c) fraction of step  T / {:g} ms = {:.1f}%\n", step_ms, 100 * fraction);
  out << fmt::format(
      "    efficiency        fully exposed {:g}/({:g} + {:.1f}) = {:.1f}%; perfectly overlapped: "
      "100% (a ceiling)\n",
      step_ms, step_ms, total * 1e3, 100 * q.step_s / (q.step_s + total));
  const double window = q.step_s * q.backward_share;
  out << fmt::format("    backward window   ~{:.0f}% of the step = {:.1f} ms: T {} it", 100 * q.backward_share,
                     window * 1e3, total < window ? "fits inside" : "does NOT fit inside");
  if (total < window) {
    out << fmt::format(
        ", slack {:.1f} ms ({:.0f}% of the window) -> hideable in principle; the last "
        "bucket never overlaps\n",
        (window - total) * 1e3, 100 * (window - total) / window);
  } else {
    out << fmt::format(": at least {:.1f} ms stays exposed even with perfect overlap\n", (total - window) * 1e3);
  }
  out << fmt::format("    verdict           {}\n",
                     total < window
                         ? (fraction > 0.5 ? "communication-sensitive, not communication-bound: it can hide inside "
                                             "backward, but anything that breaks overlap exposes it"
                                           : "comfortably hideable inside backward with bucketed, overlapped DDP")
                         : "communication-bound: the all-reduce outlasts the backward pass");
  const double s_star = m.crossover_bytes();
  out << "    (a ring-only model: below S* it overstates the cost, since real libraries switch to tree and one-shot "
         "algorithms)\n";
  fixes_report(q, S, total, out);
  out << fmt::format("(f) crossover         S* = P alpha B = {:.4g} bytes = {:.2f} MiB\n", s_star, s_star / kMebibyte);
  bucket_report(q, S, lat, bw, s_star, out);
  scaling_report(q, S, lat, bw, s_star, out);
  return out.str();
}

Fit fit_ring_model(int ranks, const std::vector<std::pair<double, double>>& points) {
  TL_CHECK(ranks >= 2, "fit: needs at least 2 ranks, got " + std::to_string(ranks));
  TL_CHECK(points.size() >= 2, "fit: needs at least two measured sizes, got " + std::to_string(points.size()));
  // Weighted least squares with w = 1/y^2: minimises the sum of squared relative residuals.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    TL_CHECK(x > 0 && y > 0, "fit: sizes and times must be > 0");
    const double w = 1.0 / (y * y);
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  const double det = sw * sxx - sx * sx;
  TL_CHECK(det > 0, "fit: needs at least two different sizes");
  double slope = (sw * sxy - sx * sy) / det;
  double intercept = (sy - slope * sx) / sw;
  Fit fit;
  if (intercept < 0 && sxy > 0) {
    // A latency cannot be negative: the constrained optimum then lies on alpha = 0 (the problem is
    // convex), a pure bandwidth line. It happens when the sizes are all far above S*, where the
    // latency term is smaller than the noise.
    intercept = 0;
    slope = sxy / sxx;
    fit.alpha_unresolved = true;
  }
  fit.model.ranks = ranks;
  fit.model.alpha_s = intercept / (2.0 * (ranks - 1));
  fit.model.bandwidth_Bps = slope > 0 ? 2.0 * (ranks - 1) / ranks / slope : INFINITY;
  fit.physical = intercept >= 0 && slope > 0;
  double squares = 0;
  for (const auto& [x, y] : points) {
    const double r = (y - (intercept + slope * x)) / y;
    fit.relative_residuals.push_back(r);
    fit.max_abs_relative_residual = std::max(fit.max_abs_relative_residual, std::abs(r));
    squares += r * r;
  }
  fit.rms_relative_residual = std::sqrt(squares / static_cast<double>(points.size()));
  return fit;
}

FitAnalysis analyse_fit(int ranks, std::vector<std::pair<double, double>> points, double tolerance,
                        std::size_t min_points) {
  std::sort(points.begin(), points.end());
  FitAnalysis analysis;
  analysis.tolerance = tolerance;
  analysis.one_line = fit_ring_model(ranks, points);
  analysis.one_line_fits = analysis.one_line.physical && analysis.one_line.max_abs_relative_residual <= tolerance;
  if (analysis.one_line_fits || points.size() < 2 * min_points) return analysis;
  double best = INFINITY;
  for (std::size_t k = min_points; k + min_points <= points.size(); ++k) {
    const std::vector<std::pair<double, double>> lo(points.begin(), points.begin() + static_cast<std::ptrdiff_t>(k));
    const std::vector<std::pair<double, double>> hi(points.begin() + static_cast<std::ptrdiff_t>(k), points.end());
    if (lo.back().first == lo.front().first || hi.back().first == hi.front().first) continue;
    const Fit a = fit_ring_model(ranks, lo), b = fit_ring_model(ranks, hi);
    double cost = 0;
    for (double r : a.relative_residuals) cost += r * r;
    for (double r : b.relative_residuals) cost += r * r;
    if (!a.physical || !b.physical) cost += 1e6;  // prefer splits where both lines mean something
    if (cost < best) {
      best = cost;
      analysis.split = true;
      analysis.split_bytes = hi.front().first;
      analysis.lower = a;
      analysis.upper = b;
    }
  }
  return analysis;
}

namespace {

std::string bytes_text(double bytes) {
  if (bytes >= kMebibyte) return fmt::format("{:.4g} MiB", bytes / kMebibyte);
  if (bytes >= 1024) return fmt::format("{:.4g} KiB", bytes / 1024);
  return fmt::format("{:g} B", bytes);
}

std::string fit_line(const Fit& fit) {
  const RingModel& m = fit.model;
  std::string text =
      fmt::format("alpha = {:.2f} us, B = {:.3g} GB/s, S* = P alpha B = {}; residuals max {:.1f}%, rms {:.1f}%",
                  m.alpha_s * 1e6, m.bandwidth_Bps / 1e9, fit.physical ? bytes_text(m.crossover_bytes()) : "n/a",
                  100 * fit.max_abs_relative_residual, 100 * fit.rms_relative_residual);
  if (fit.alpha_unresolved) text += " (alpha held at 0: these sizes cannot resolve a latency)";
  if (!fit.physical) text += " (not physical: negative latency or bandwidth)";
  return text;
}

}  // namespace

std::string fit_report(const FitAnalysis& analysis, const std::vector<std::pair<double, double>>& unsorted) {
  auto points = unsorted;
  std::sort(points.begin(), points.end());
  const RingModel& one = analysis.one_line.model;
  std::ostringstream out;
  out << fmt::format("fit of T(S) = 2(P-1) alpha + 2(P-1)/P S/B, P = {}, {} sizes, least squares on relative error\n",
                     one.ranks, points.size());
  out << "one line: " << fit_line(analysis.one_line) << "\n";
  if (analysis.split) {
    out << fmt::format("two regimes, split at {}:\n", bytes_text(analysis.split_bytes));
    out << "  below: " << fit_line(analysis.lower) << "\n";
    out << "  from:  " << fit_line(analysis.upper) << "\n";
  }
  out << fmt::format("\n{:>12} {:>13} {:>13} {:>9}", "size", "measured us", "one line us", "residual");
  if (analysis.split) out << fmt::format(" {:>13} {:>9}", "regime us", "residual");
  out << "\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto [x, y] = points[i];
    const RingModel& m = analysis.one_line.model;
    out << fmt::format("{:>12} {:>13.1f} {:>13.1f} {:>+8.1f}%", bytes_text(x), y * 1e6, m.time_s(x) * 1e6,
                       100 * (y - m.time_s(x)) / y);
    if (analysis.split) {
      const RingModel& r = x < analysis.split_bytes ? analysis.lower.model : analysis.upper.model;
      out << fmt::format(" {:>13.1f} {:>+8.1f}%", r.time_s(x) * 1e6, 100 * (y - r.time_s(x)) / y);
    }
    out << "\n";
  }
  if (analysis.one_line_fits) {
    out << fmt::format("\nverdict: one line fits (every residual within {:.0f}%)\n", 100 * analysis.tolerance);
  } else {
    const bool off = analysis.one_line.max_abs_relative_residual > analysis.tolerance;
    out << fmt::format(
        "\nverdict: one straight line fits POORLY ({}{}); ",
        off ? fmt::format("max residual {:.0f}% > {:.0f}%", 100 * analysis.one_line.max_abs_relative_residual,
                          100 * analysis.tolerance)
            : "",
        analysis.one_line.physical ? "" : (off ? ", and its B is not physical" : "its B is not physical"));
    if (analysis.split) {
      out << fmt::format(
          "the data has two regimes (below and from {}: small messages stay in cache, large ones "
          "stream through memory), so quote the regime that matches the message size, not one pair\n",
          bytes_text(analysis.split_bytes));
    } else {
      out << "too few sizes to separate regimes; measure more sizes\n";
    }
  }
  return out.str();
}

AllreduceCost allreduce_cost(AllreduceAlgorithm algorithm, int ranks) {
  TL_CHECK(ranks >= 1, "allreduce_cost: ranks must be >= 1, got " + std::to_string(ranks));
  TL_CHECK(algorithm != AllreduceAlgorithm::automatic, "allreduce_cost: resolve `auto` to an algorithm first");
  TL_CHECK(algorithm != AllreduceAlgorithm::single_copy,
           "allreduce_cost: single_copy moves S through memory (a memcpy's cost), not over the alpha-beta wire");
  const double n = static_cast<double>(ranks);
  if (ranks == 1) return {};
  if (algorithm == AllreduceAlgorithm::ring || algorithm == AllreduceAlgorithm::native)
    return {2.0 * (n - 1), 2.0 * (n - 1) / n};
  int p = 1, log2p = 0;
  while (2 * p <= ranks) {
    p *= 2;
    ++log2p;
  }
  AllreduceCost cost;
  if (algorithm == AllreduceAlgorithm::recursive_doubling)
    cost = {static_cast<double>(log2p), static_cast<double>(log2p)};
  else
    cost = {2.0 * log2p, 2.0 * (p - 1) / p};
  if (p != ranks) {  // the fold in and out
    cost.steps += 2;
    cost.bytes_factor += 2;
  }
  return cost;
}

AllreduceFit fit_allreduce(const std::vector<AllreducePoint>& points) {
  TL_CHECK(points.size() >= 2,
           "fit_allreduce: needs at least two measured all-reduces, got " + std::to_string(points.size()));
  // T = s a + x c with x = bytes_factor S, a = alpha, c = 1/B; weights 1/T^2 (relative error).
  double ss = 0, sx = 0, xx = 0, st = 0, xt = 0;
  for (const AllreducePoint& pt : points) {
    TL_CHECK(pt.bytes > 0 && pt.seconds > 0, "fit_allreduce: sizes and times must be > 0");
    const double w = 1.0 / (pt.seconds * pt.seconds), s1 = pt.cost.steps, x = pt.cost.bytes_factor * pt.bytes;
    ss += w * s1 * s1;
    sx += w * s1 * x;
    xx += w * x * x;
    st += w * s1 * pt.seconds;
    xt += w * x * pt.seconds;
  }
  const double det = ss * xx - sx * sx;
  TL_CHECK(det > 0 && xx > 0, "fit_allreduce: needs all-reduces of at least two different sizes");
  double a = (st * xx - sx * xt) / det, c = (ss * xt - sx * st) / det;
  AllreduceFit fit;
  if (a < 0) {
    a = 0;
    c = xt / xx;
    fit.alpha_unresolved = true;
  }
  fit.alpha_s = a;
  fit.bandwidth_Bps = c > 0 ? 1.0 / c : INFINITY;
  for (const AllreducePoint& pt : points) {
    const double r = (pt.seconds - pt.cost.time_s(fit.alpha_s, fit.bandwidth_Bps, pt.bytes)) / pt.seconds;
    fit.max_abs_relative_residual = std::max(fit.max_abs_relative_residual, std::abs(r));
  }
  return fit;
}

}  // namespace trainlab::comm
