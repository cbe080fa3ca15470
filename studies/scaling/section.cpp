// The scaling study's report section: weak and strong efficiency against world size, with the PyTorch DDP peer.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "bench/measure/knobs.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "studies/scaling/rows.h"
#include "studies/scaling/scaling_study.h"

namespace trainlab::bench {

namespace {
std::string world_tick(double x) { return fmt::format("{:.0f}", x); }

std::string range(const Summary& s) { return fmt::format("{:.1f} ({:.1f}-{:.1f})", s.median, s.min, s.max); }
std::string percent_range(const Summary& e) {
  return fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * e.median, 100 * e.min, 100 * e.max);
}

// Per-round efficiency against world 1: values[w][i] / (w * values[1][i]).
std::map<int, Summary> efficiencies(const std::map<int, std::vector<double>>& values) {
  std::map<int, Summary> out;
  if (!values.count(1)) return out;
  const auto& one = values.at(1);
  for (const auto& [w, v] : values) {
    std::vector<double> e;
    for (std::size_t i = 0; i < std::min(v.size(), one.size()); ++i) e.push_back(v[i] / (w * one[i]));
    if (!e.empty()) out[w] = summarize(e);
  }
  return out;
}

// The peer's samples/s per variant, per world, per round (in the peer's own order of variants).
struct PeerSamples {
  std::map<std::string, std::map<int, std::vector<double>>> by_variant;
  std::vector<std::string> order;
  void add(const std::string& variant, int world, double samples_per_s) {
    if (std::find(order.begin(), order.end(), variant) == order.end()) order.push_back(variant);
    by_variant[variant][world].push_back(samples_per_s);
  }
};
PeerSamples peer_samples(const std::vector<ScalingPeerRow>& rows, const std::string& run_id) {
  PeerSamples peer;
  for (const auto& row : rows) {
    if (row.header.run_id != run_id) continue;
    const PeerOutput& p = row.result;
    if (p.variants) {
      for (const auto& [variant, result] : *p.variants) peer.add(variant, row.config.world, result.samples_per_s);
    } else if (p.samples_per_s) {
      peer.add(p.variant.empty() ? "the recorded variant" : p.variant, row.config.world, *p.samples_per_s);
    }
  }
  return peer;
}

// The peer's best variant by median at its largest world: a series and its table lines; the note
// that says which was drawn.
std::string add_peer(PeerSamples& peer, std::vector<chart::Series>& series,
                     std::vector<std::vector<std::string>>& table) {
  if (peer.order.empty()) return "";
  int top_world = 1;
  for (const auto& [variant, by_world] : peer.by_variant)
    for (const auto& [w, v] : by_world) top_world = std::max(top_world, w);
  std::vector<std::vector<double>> at_top;
  for (const auto& v : peer.order) {
    auto& by_world = peer.by_variant[v];
    at_top.push_back(by_world.count(top_world) ? by_world[top_world] : std::vector<double>{});
  }
  const std::string best = peer.order[best_by_median(peer.order, at_top)];
  chart::Series s{"PyTorch DDP (gloo), weak, best variant: " + best, "#66a182", {}, false};
  for (const auto& [w, e] : efficiencies(peer.by_variant[best])) {
    s.points.push_back({static_cast<double>(w), 100 * e.median, 100 * e.min, 100 * e.max});
    table.push_back(
        {"PyTorch DDP " + best, std::to_string(w), range(summarize(peer.by_variant[best].at(w))), percent_range(e)});
  }
  series.push_back(s);
  return fmt::format(
      " The PyTorch DDP peer measured {} variant(s) each round; the best by median at world {} "
      "is drawn.",
      peer.order.size(), top_world);
}

std::optional<ReportSection> scaling_section(const SectionInput& in) {
  const auto [run_id, rows] =
      latest_run(in.read<ScalingRow>(), [](const ScalingRow& row) { return row.weak_or_strong(); });
  if (run_id.empty()) return std::nullopt;
  // The efficiency is drawn at the lowest decode cost the run measured (0 with the ablation), unbound.
  std::int64_t decode = -1;
  for (const auto& row : rows)
    if (row.weak_or_strong()) decode = decode < 0 ? row.config.decode_cost : std::min(decode, row.config.decode_cost);
  std::map<std::string, std::map<int, std::vector<double>>> samples;  // mode -> world -> per round
  const ScalingRow* first = nullptr;
  for (const auto& row : rows) {
    const ScalingConfig& c = row.config;
    if (!row.header.ok() || !row.weak_or_strong()) continue;
    if (c.decode_cost != decode || c.no_sync || c.bind != "none") continue;
    if (!first) first = &row;
    if (c.world < 1 || c.world > (1 << 20)) continue;  // a damaged row is passed over
    samples[c.mode][c.world].push_back(row.samples_per_s);
  }
  if (!first) return std::nullopt;
  std::vector<chart::Series> series;
  std::vector<std::vector<std::string>> table;
  const std::map<std::string, std::string> colours = {{"weak", chart::kBlue}, {"strong", chart::kRed}};
  for (const auto& [mode, by_world] : samples) {
    chart::Series s{"trainlab, " + mode + " scaling", colours.at(mode), {}, false};
    for (const auto& [w, e] : efficiencies(by_world)) {
      s.points.push_back({static_cast<double>(w), 100 * e.median, 100 * e.min, 100 * e.max});
      table.push_back({"trainlab " + mode, std::to_string(w), range(summarize(by_world.at(w))), percent_range(e)});
    }
    series.push_back(s);
  }
  PeerSamples peer = peer_samples(in.read<ScalingPeerRow>(), run_id);
  const std::string peer_note = add_peer(peer, series, table);
  chart::Series ideal{"ideal (100%)", chart::kReference, {}, true};
  for (const auto& [w, v] : samples.begin()->second) ideal.points.push_back({static_cast<double>(w), 100, {}, {}});
  series.push_back(ideal);
  ReportSection section = section_of("scaling", run_id, first->header.env, fmt::format(", decode cost {}", decode));
  const std::string figure = figure_path("scaling", run_id);
  const std::vector<std::string> head = {"what", "world", "samples/s median (min-max)", "efficiency median (min-max)"};
  std::ostringstream md;
  md << fmt::format(
      "\n## Weak and strong scaling efficiency\n\nRun `{}` of `bench_scaling` on {}{}, decode cost {}, unbound: "
      "efficiency = samples/s at world W / (W x samples/s at world 1), per round (each round measures every world), "
      "median (min-max) over rounds.{}\n\n",
      run_id, measured_on(first->header.env),
      first->config.model == "smallcnn" ? ""
                                        : " training " + model_label(first->config.model, first->config.model_options),
      decode, peer_note);
  md << render_table(head, table, true);
  md << "\n![efficiency against world size](" << figure << ")\n";
  section.markdown = md.str();
  section.readme_table = render_table(head, table, true);
  // The README's headline row: every line of the table at the largest world the PyTorch peer was
  // measured at too (else the largest measured): trainlab beside its peer, never alone.
  int top = 1, peer_top = 0;
  for (const auto& line : table) {
    top = std::max(top, std::stoi(line[1]));
    if (line[0].rfind("PyTorch", 0) == 0) peer_top = std::max(peer_top, std::stoi(line[1]));
  }
  if (peer_top > 1) top = peer_top;
  std::string at_top;
  for (const auto& line : table)
    if (std::stoi(line[1]) == top) at_top += (at_top.empty() ? "" : "; ") + line[0] + " " + line[3];
  section.headline = {{fmt::format("DDP scaling efficiency at world {}, weak and strong, against PyTorch DDP{}", top,
                                   first->config.model == "smallcnn" ? "" : " (" + first->config.model + ")"),
                       at_top, run_id}};
  chart::LineChart lines;
  lines.x_label = "world size (ranks)";
  lines.y_label = "efficiency %";
  lines.series = series;
  lines.x_tick = world_tick;
  section.figures.emplace_back(
      figure, chart::render({"scaling efficiency against world size (run " + run_id + ")", {lines}, {}}));
  return section;
}

}  // namespace

SectionDef scaling_report_section() { return {"scaling", scaling_section}; }

}  // namespace trainlab::bench
