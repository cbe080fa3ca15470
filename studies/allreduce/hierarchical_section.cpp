// The report's section for bench_allreduce --node-size (block allreduce-hierarchical): the latest
// two-level run's hierarchical all-reduce against the flat ring and against the model's prediction
// from the two links measured in the same run, a table and a figure of time against size.
#include <fmt/format.h>

#include <map>
#include <sstream>

#include "bench/measure/comm_bench.h"
#include "bench/report/table.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/allreduce/hierarchical.h"
#include "studies/allreduce/section_parts.h"

namespace trainlab::bench {

namespace {

std::optional<ReportSection> hierarchical_section(const SectionInput& in) {
  const std::vector<AllreduceRow> all = in.read<AllreduceRow>();
  std::string run_id;
  for (const auto& r : all)
    if (r.header.ok() && r.config.two_level() && r.config.algorithm == "hierarchical") run_id = r.header.run_id;
  if (run_id.empty()) return std::nullopt;
  std::map<std::string, BySize> by;  // algorithm -> size S (across_nodes: its message times node_size)
  const AllreduceRow* first = nullptr;
  for (const auto& r : all) {
    if (r.header.run_id != run_id || !r.header.ok() || !r.config.two_level()) continue;
    if (first == nullptr) first = &r;
    const std::int64_t size =
        r.config.algorithm == "across_nodes" ? r.config.bytes * *r.config.node_size : r.config.bytes;
    by[r.config.algorithm][size] = &r;
  }
  const int ranks = first->config.ranks, node_size = *first->config.node_size, nodes = ranks / node_size;
  std::vector<HierarchicalPoint> points;
  for (const auto& [bytes, row] : by["hierarchical"]) {
    const auto median = [&, size = bytes](const char* arm) {
      return by[arm].count(size) ? by[arm].at(size)->stats.median : 0.0;
    };
    HierarchicalPoint p{bytes, median("ring"), row->stats.median, median("within_nodes"), median("across_nodes")};
    if (p.flat_s > 0 && p.within_s > 0 && p.across_s > 0) points.push_back(p);
  }
  const std::string transport =
      first->config.mpi_transport ? "btl " + *first->config.mpi_transport : "the default transport";
  ReportSection section = section_of("allreduce-hierarchical", run_id, first->header.env,
                                     fmt::format(", {} nodes x {} ranks over {}, inside a node {}", nodes, node_size,
                                                 transport, first->config.intra_node.value_or("?")));
  std::ostringstream md;
  md << fmt::format(
      "\n## The two-level all-reduce: {} nodes x {} ranks\n\nRun `{}` of `bench_allreduce --node-size {}` on {}, over "
      "{}; inside a node: {}. The hierarchical all-reduce (a reduce-scatter inside each node, the all-reduce of "
      "S / {} across the nodes, an all-gather inside) against trainlab's flat ring over all {} ranks, and against "
      "the prediction of seed 001's model (`trainlab collective-cost --node-size`) from the two links measured in "
      "the same run, each fitted as a ring: `within_nodes` (every node's all-reduce at once) and `across_nodes` "
      "(every local rank's all-reduce of its S / {} at once). Medians over iterations, each the slowest rank's.\n\n",
      nodes, node_size, run_id, node_size, measured_on(first->header.env), transport,
      first->config.intra_node.value_or("?"), node_size, ranks, node_size);
  if (nodes < 2 || node_size < 2 || points.size() < 2) {
    md << "No prediction: it needs two levels (more than one node of more than one rank) and two sizes.\n";
    section.markdown = md.str();
    return section;
  }
  const HierarchicalPrediction p = predict_hierarchical(nodes, node_size, points);
  const auto table = hierarchical_table(p);
  md << render_table(hierarchical_head(), table, true) << "\n```\n" << hierarchical_fit_text(p) << "```\n";
  const std::string figure = figure_path("allreduce_hierarchical", run_id);
  md << "\n![hierarchical all-reduce against the flat ring and the model](" << figure << ")\n";
  section.markdown = md.str();
  section.readme_table = render_table(hierarchical_head(), table, true);
  chart::LineChart lines;
  lines.x_label = "message size per rank";
  lines.y_label = "time ms (median)";
  lines.log_x = true;
  lines.x_tick = bytes_tick;
  chart::Series flat{"flat ring (trainlab)", chart::kGrey, {}}, measured{"hierarchical (measured)", chart::kBlue, {}},
      predicted{"hierarchical (predicted)", chart::kRed, {}, true};
  for (const auto& l : p.lines) {
    flat.points.push_back({static_cast<double>(l.bytes), l.flat_s * 1e3, {}, {}});
    measured.points.push_back({static_cast<double>(l.bytes), l.measured_s * 1e3, {}, {}});
    predicted.points.push_back({static_cast<double>(l.bytes), l.predicted_s * 1e3, {}, {}});
  }
  lines.series = {flat, measured, predicted};
  section.figures.emplace_back(figure, chart::render({"two-level all-reduce, " + std::to_string(nodes) + " x " +
                                                          std::to_string(node_size) + " (run " + run_id + ")",
                                                      {lines},
                                                      {}}));
  return section;
}

}  // namespace

SectionDef allreduce_hierarchical_report_section() { return {"allreduce-hierarchical", hierarchical_section}; }

}  // namespace trainlab::bench
