// The scaling study's report section: weak and strong efficiency against world size, with the PyTorch DDP peer.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "bench/measure/comm_bench.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/legacy_rows.h"
#include "bench/report/table.h"
#include "studies/scaling/scaling_study.h"

namespace trainlab::bench {

namespace {
// A byte count read from a row as a double, clamped into int64's range (a damaged row is drawn, never UB).
std::int64_t as_bytes(double x) { return std::isfinite(x) ? static_cast<std::int64_t>(std::clamp(x, 0.0, 4e18)) : 0; }
std::string bytes_tick(double x) { return human_bytes(as_bytes(x)); }
std::string world_tick(double x) { return fmt::format("{:.0f}", x); }

std::string range(const Summary& s, const char* format) {
  return fmt::format(fmt::runtime(std::string(format) + " (" + format + "-" + format + ")"), s.median, s.min, s.max);
}

// A {"median", "min", "max"} summary as compare_torch.py writes it (no mean or std).
Summary median_range(const json& j) {
  Summary s;
  s.median = j.at("median");
  s.min = j.at("min");
  s.max = j.at("max");
  s.n = j.value("n", 0);
  return s;
}

namespace {
bool is_weak_or_strong(const json& row) {
  if (!row.contains("config") || !row.at("config").is_object()) return false;
  const std::string mode = row.at("config").value("mode", "");
  return mode == "weak" || mode == "strong";
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
}  // namespace

std::optional<ReportSection> scaling_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "scaling", is_weak_or_strong);
  if (run_id.empty()) return std::nullopt;
  // The efficiency is drawn at the lowest decode cost the run measured (0 with the ablation), unbound.
  std::int64_t decode = -1;
  for (const auto& row : rows)
    if (row.value("kind", "") == "scaling" && is_weak_or_strong(row)) {
      const std::int64_t d = int_at(row.at("config"), "decode_cost", 0);
      decode = decode < 0 ? d : std::min(decode, d);
    }
  std::map<std::string, std::map<int, std::vector<double>>> samples;  // mode -> world -> per round
  const json* first = nullptr;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "scaling" || row.value("status", "") != "ok" || !is_weak_or_strong(row)) continue;
    const json& c = row.at("config");
    if (int_at(c, "decode_cost", 0) != decode || c.value("no_sync", false) || c.value("bind", "none") != "none")
      continue;
    if (!first) first = &row;
    const std::int64_t world = int_at(c, "world", 0);
    if (world < 1 || world > (1 << 20)) continue;  // a damaged row is passed over
    samples[c.at("mode").get<std::string>()][static_cast<int>(world)].push_back(row.at("samples_per_s"));
  }
  if (!first) return std::nullopt;
  // The peer: every PyTorch variant per round; the best by median at the largest world is drawn.
  std::map<std::string, std::map<int, std::vector<double>>> peer;  // variant -> world -> per round
  std::vector<std::string> order;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "scaling_peer" || !row.contains("peer")) continue;
    const int w = static_cast<int>(int_at(row.at("config"), "world", 0));
    const json& p = row.at("peer");
    if (p.contains("variants")) {
      for (const auto& [variant, result] : p.at("variants").items()) {
        if (std::find(order.begin(), order.end(), variant) == order.end()) order.push_back(variant);
        peer[variant][w].push_back(result.at("samples_per_s"));
      }
    } else if (p.contains("samples_per_s")) {
      const std::string variant = p.value("variant", std::string("the recorded variant"));
      if (std::find(order.begin(), order.end(), variant) == order.end()) order.push_back(variant);
      peer[variant][w].push_back(p.at("samples_per_s"));
    }
  }
  std::vector<chart::Series> series;
  std::vector<std::vector<std::string>> table;
  const std::map<std::string, std::string> colours = {{"weak", "#3a7ca5"}, {"strong", "#d1495b"}};
  for (const auto& [mode, by_world] : samples) {
    chart::Series s{"trainlab, " + mode + " scaling", colours.at(mode), {}, false};
    for (const auto& [w, e] : efficiencies(by_world)) {
      s.points.push_back({static_cast<double>(w), 100 * e.median, 100 * e.min, 100 * e.max});
      table.push_back({"trainlab " + mode, std::to_string(w), range(summarize(by_world.at(w)), "{:.1f}"),
                       fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * e.median, 100 * e.min, 100 * e.max)});
    }
    series.push_back(s);
  }
  std::string peer_note;
  if (!order.empty()) {
    int top_world = 1;
    for (const auto& [variant, by_world] : peer)
      for (const auto& [w, v] : by_world) top_world = std::max(top_world, w);
    std::vector<std::vector<double>> at_top;
    for (const auto& v : order) at_top.push_back(peer[v].count(top_world) ? peer[v][top_world] : std::vector<double>{});
    const std::string best = order[best_by_median(order, at_top)];
    chart::Series s{"PyTorch DDP (gloo), weak, best variant: " + best, "#66a182", {}, false};
    for (const auto& [w, e] : efficiencies(peer[best])) {
      s.points.push_back({static_cast<double>(w), 100 * e.median, 100 * e.min, 100 * e.max});
      table.push_back({"PyTorch DDP " + best, std::to_string(w), range(summarize(peer[best].at(w)), "{:.1f}"),
                       fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * e.median, 100 * e.min, 100 * e.max)});
    }
    series.push_back(s);
    peer_note = fmt::format(
        " The PyTorch DDP peer measured {} variant(s) each round; the best by median at world {} "
        "is drawn.",
        order.size(), top_world);
  }
  chart::Series ideal{"ideal (100%)", "#888", {}, true};
  for (const auto& [w, v] : samples.begin()->second) ideal.points.push_back({static_cast<double>(w), 100});
  series.push_back(ideal);
  ReportSection section;
  section.measured_on = from_json<Environment>(*first);
  const std::string figure = "figures/scaling_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## Weak and strong scaling efficiency\n\nRun `{}` of `bench_scaling` on {}, decode cost {}, unbound: "
      "efficiency = samples/s at world W / (W x samples/s at world 1), per round (each round measures every world), "
      "median (min-max) over rounds.{}\n\n",
      run_id, measured_on(*first), decode, peer_note);
  md << render_table({"what", "world", "samples/s median (min-max)", "efficiency median (min-max)"}, table, true);
  md << "\n![efficiency against world size](" << figure << ")\n";
  section.markdown = md.str();
  section.marker = "scaling";
  section.readme_intro = fmt::format("from run `{}` on {}, decode cost {}", run_id, measured_on(*first), decode);
  section.readme_table =
      render_table({"what", "world", "samples/s median (min-max)", "efficiency median (min-max)"}, table, true);
  section.figures.emplace_back(
      figure, legacy_line_figure("scaling efficiency against world size (run " + run_id + ")", "world size (ranks)",
                                 "efficiency %", series, false, world_tick));
  return section;
}

}  // namespace

SectionDef scaling_report_section() {
  return {"scaling", [](const SectionInput& in) {
            try {
              return scaling_section(in.ledger.rows);
            } catch (const json::exception& e) {
              throw Error(std::string("report: the ledger's latest scaling run has a row it cannot read: ") + e.what());
            }
          }};
}

}  // namespace trainlab::bench
