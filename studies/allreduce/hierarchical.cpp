#include "studies/allreduce/hierarchical.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "backends/error.h"
#include "bench/measure/comm_bench.h"

namespace trainlab::bench {

comm::RingModel link_model(const comm::FitAnalysis& fit, double bytes) {
  if (fit.one_line_fits || !fit.split) return fit.one_line.model;
  return bytes < fit.split_bytes ? fit.lower.model : fit.upper.model;
}

bool HierarchicalPrediction::all_within(double tolerance) const {
  for (const Line& l : lines)
    if (std::abs(l.error()) > tolerance) return false;
  return !lines.empty();
}

HierarchicalPrediction predict_hierarchical(int nodes, int node_size, const std::vector<HierarchicalPoint>& points) {
  TL_CHECK(nodes >= 2 && node_size >= 2,
           fmt::format("a prediction needs two levels: {} node(s) of {} rank(s) has one", nodes, node_size));
  TL_CHECK(points.size() >= 2, fmt::format("a prediction needs two sizes or more, got {}", points.size()));
  HierarchicalPrediction p;
  p.nodes = nodes;
  p.node_size = node_size;
  std::vector<std::pair<double, double>> within, across;
  for (const HierarchicalPoint& pt : points) {
    within.emplace_back(static_cast<double>(pt.bytes), pt.within_s);
    across.emplace_back(static_cast<double>(pt.bytes) / node_size, pt.across_s);
  }
  p.within = comm::analyse_fit(node_size, within);
  p.across = comm::analyse_fit(nodes, across);
  for (const HierarchicalPoint& pt : points) {
    const double bytes = static_cast<double>(pt.bytes);
    comm::CostQuestion q;
    q.model = link_model(p.across, bytes / node_size);
    q.model.ranks = nodes * node_size;
    q.node_size = node_size;
    const comm::RingModel inside = link_model(p.within, bytes);
    q.intra_alpha_s = inside.alpha_s;
    q.intra_bandwidth_Bps = inside.bandwidth_Bps;
    HierarchicalPrediction::Line line;
    line.bytes = pt.bytes;
    line.flat_s = pt.flat_s;
    line.measured_s = pt.hierarchical_s;
    line.predicted = comm::hierarchical_allreduce(q, bytes);
    line.predicted_s = line.predicted.total_s();
    p.lines.push_back(line);
  }
  return p;
}

std::vector<std::string> hierarchical_head() {
  return {"size",         "flat ring us",     "hierarchical us", "hierarchical / flat",
          "predicted us", "prediction error", "within 25%"};
}

std::vector<std::vector<std::string>> hierarchical_table(const HierarchicalPrediction& p) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : p.lines)
    rows.push_back({human_bytes(l.bytes), fmt::format("{:.1f}", l.flat_s * 1e6),
                    fmt::format("{:.1f}", l.measured_s * 1e6), fmt::format("{:.2f}", l.measured_s / l.flat_s),
                    fmt::format("{:.1f}", l.predicted_s * 1e6), fmt::format("{:+.0f}%", 100 * l.error()),
                    std::abs(l.error()) <= 0.25 ? "yes" : "NO"});
  return rows;
}

namespace {

std::string fit_text(const comm::Fit& fit) {
  return fmt::format("alpha {:.2f} us, B {:.2f} GB/s (max residual {:.0f}%)", fit.model.alpha_s * 1e6,
                     fit.model.bandwidth_Bps / 1e9, 100 * fit.max_abs_relative_residual);
}

std::string link_text(const char* what, const comm::FitAnalysis& f) {
  std::string text =
      fmt::format("{}, as a ring of {}: one line {}", what, f.one_line.model.ranks, fit_text(f.one_line));
  if (!f.one_line_fits && f.split)
    text += fmt::format("; it does not fit within {:.0f}%, so each size takes its regime's: below {} {}, from it {}",
                        100 * f.tolerance, human_bytes(static_cast<std::int64_t>(f.split_bytes)), fit_text(f.lower),
                        fit_text(f.upper));
  return text;
}

}  // namespace

std::string hierarchical_fit_text(const HierarchicalPrediction& p) {
  const std::int64_t largest = p.lines.back().bytes;
  const comm::RingModel in = link_model(p.within, static_cast<double>(largest)),
                        out = link_model(p.across, static_cast<double>(largest) / p.node_size);
  return fmt::format(
      "{}\n{}\nthe largest size's prediction, as the cost model prints it: trainlab collective-cost --gpus {} "
      "--node-size {} --bw {:.4g} --latency {:.4g} --intra-bw {:.4g} --intra-latency {:.4g} --params {:.6g} "
      "--bytes-per-param 4 --step-ms 1 (the step time does not enter its hierarchical line)\n",
      link_text("inside a node (within_nodes)", p.within),
      link_text("across nodes (across_nodes, S / node size)", p.across), p.nodes * p.node_size, p.node_size,
      out.bandwidth_Bps / 1e9, out.alpha_s * 1e6, in.bandwidth_Bps / 1e9, in.alpha_s * 1e6,
      static_cast<double>(largest) / 4 / 1e9);
}

}  // namespace trainlab::bench
