// The comparison with PyTorch (bench/compare_torch.py's rows): each trainlab configuration's ratio to the best PyTorch
// variant of its dtype, per round.
#include <fmt/format.h>

#include <optional>
#include <sstream>

#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "studies/compare_torch/compare_torch.h"

namespace trainlab::bench {

namespace {

std::string range(const MedianRange& s, const char* format) {
  return fmt::format(fmt::runtime(std::string(format) + " (" + format + "-" + format + ")"), s.median, s.min, s.max);
}

// A bar per configuration: the median of its per-round ratios, whisker their min-max; parity dashed.
std::string ratios_figure(const std::vector<CompareTorchRow>& configs, const std::string& run_id) {
  chart::BarChart bars;
  bars.label_width = 380;
  bars.width = 420;
  bars.bar_height = 18;
  bars.gap = 8;
  bars.reference = 1.0;
  for (const CompareTorchRow& row : configs) {
    const Summary r = summarize(*row.ratio_per_round);
    chart::BarRow bar;
    bar.label = row.config_name;
    bar.value = r.median;
    bar.lo = r.min;
    bar.hi = r.max;
    bar.colour = r.median >= 1 ? chart::kBlue : chart::kRed;
    bar.value_text = fmt::format("{:.2f}x", r.median);
    bars.rows.push_back(bar);
  }
  return chart::render({"trainlab against the best PyTorch variant per dtype (run " + run_id + ")",
                        {bars},
                        {"ratio, samples/s (bar: median of the per-round ratios; whisker: their min-max; dashed: "
                         "parity)"}});
}

std::optional<ReportSection> compare_torch_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<CompareTorchRow>());
  if (run_id.empty()) return std::nullopt;
  std::vector<CompareTorchRow> configs;
  for (const auto& row : rows)
    if (row.ratio_per_round) configs.push_back(row);
  if (configs.empty()) return std::nullopt;
  std::vector<std::vector<std::string>> table;
  for (const CompareTorchRow& row : configs) {
    const Summary r = summarize(*row.ratio_per_round);
    table.push_back({row.config_name, row.peer, range(row.samples_per_s, "{:.0f}"),
                     range(row.peer_samples_per_s, "{:.0f}"),
                     fmt::format("{:.2f}x ({:.2f}-{:.2f})", r.median, r.min, r.max)});
  }
  const CompareTorchRow& first = configs.front();
  const auto torch = first.header.env.versions.find("torch");
  ReportSection section = section_of("torch_ratios", run_id, first.header.env);
  const std::string figure = figure_path("compare_torch", run_id);
  std::ostringstream md;
  md << fmt::format(
      "\n## Against PyTorch\n\nRun `{}` (`{}`) on {}, PyTorch {}, batch {}: every configuration its own process, "
      "all of them in turn each round; each trainlab configuration against the best PyTorch variant of its dtype "
      "in this run (by median), the ratio per round.\n\n",
      run_id, first.run.command, measured_on(first.header.env),
      torch == first.header.env.versions.end() ? "?" : torch->second, first.run.batch);
  md << render_table({"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"},
                     table, true);
  md << "\n![trainlab against the best PyTorch variant](" << figure << ")\n";
  section.markdown = md.str();
  section.readme_table = render_table(
      {"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"}, table, true);
  section.figures.emplace_back(figure, ratios_figure(configs, run_id));
  return section;
}

}  // namespace

SectionDef compare_torch_report_section() { return {"compare_torch", compare_torch_section}; }

}  // namespace trainlab::bench
