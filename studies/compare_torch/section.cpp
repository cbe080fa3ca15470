// The comparison with PyTorch (bench/compare_torch.py's rows): each trainlab configuration's ratio to the best PyTorch
// variant of its dtype, per round.
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
#include "studies/compare_torch/compare_torch.h"

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

std::optional<ReportSection> compare_torch_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "compare_torch");
  if (run_id.empty()) return std::nullopt;
  std::vector<const json*> configs;
  for (const auto& row : rows)
    if (row.value("kind", "") == "compare_torch" && row.contains("ratio_per_round")) configs.push_back(&row);
  if (configs.empty()) return std::nullopt;
  double top = 1.0;
  for (const json* row : configs)
    for (double r : row->at("ratio_per_round").get<std::vector<double>>()) top = std::max(top, r);
  top *= 1.1;
  const int left = 380, width = 420, bar = 18, gap = 8, head = 40;
  const int height = head + static_cast<int>(configs.size()) * (bar + gap) + 50;
  const auto x = [&](double v) { return left + v / top * width; };
  std::ostringstream svg;
  svg << fmt::format(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
             left + width + 80, height)
      << "\n"
      << fmt::format(R"(<text x="10" y="22" font-size="14" font-weight="bold">{}</text>)",
                     svg_text("trainlab against the best PyTorch variant per dtype (run " + run_id + ")"))
      << "\n";
  std::vector<std::vector<std::string>> table;
  int y = head;
  for (const json* row : configs) {
    const Summary r = summarize(row->at("ratio_per_round").get<std::vector<double>>());
    const std::string name = row->value("config_name", std::string("?"));
    svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", left - 8, y + bar - 5, svg_text(name))
        << fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"/>)", left, y, x(r.median) - left,
                       bar, r.median >= 1 ? "#3a7ca5" : "#d1495b")
        << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="black"/>)", x(r.min), y + bar / 2,
                       x(r.max), y + bar / 2)
        << fmt::format(R"(<text x="{:.1f}" y="{}">{:.2f}x</text>)", x(r.max) + 6, y + bar - 5, r.median) << "\n";
    table.push_back({name, row->value("peer", std::string("?")),
                     range(median_range(row->at("samples_per_s")), "{:.0f}"),
                     range(median_range(row->at("peer_samples_per_s")), "{:.0f}"),
                     fmt::format("{:.2f}x ({:.2f}-{:.2f})", r.median, r.min, r.max)});
    y += bar + gap;
  }
  svg << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#888" stroke-dasharray="6 4"/>)", x(1.0),
                     head - 6, x(1.0), y)
      << fmt::format(R"(<text x="{}" y="{}" fill="#555">ratio, samples/s (bar: median of the per-round ratios; )"
                     R"(whisker: their min-max; dashed: parity)</text>)",
                     left - 200, y + 20)
      << "\n</svg>\n";
  ReportSection section;
  section.measured_on = from_json<Environment>(*configs.front());
  const std::string figure = "figures/compare_torch_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## Against PyTorch\n\nRun `{}` (`{}`) on {}, PyTorch {}, batch {}: every configuration its own process, "
      "all of them in turn each round; each trainlab configuration against the best PyTorch variant of its dtype "
      "in this run (by median), the ratio per round.\n\n",
      run_id, configs.front()->value("command", std::string("compare_torch")), measured_on(*configs.front()),
      text_at(*configs.front(), "/versions/torch"), int_at(*configs.front(), "batch", 0));
  md << render_table({"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"},
                     table, true);
  md << "\n![trainlab against the best PyTorch variant](" << figure << ")\n";
  section.markdown = md.str();
  section.marker = "torch_ratios";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(*configs.front());
  section.readme_table = render_table(
      {"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"}, table, true);
  section.figures.emplace_back(figure, svg.str());
  return section;
}

}  // namespace

SectionDef compare_torch_report_section() {
  return {"compare_torch", [](const SectionInput& in) {
            try {
              return compare_torch_section(in.ledger.rows);
            } catch (const json::exception& e) {
              throw Error(std::string("report: the ledger's latest compare_torch run has a row it cannot read: ") +
                          e.what());
            }
          }};
}

}  // namespace trainlab::bench
