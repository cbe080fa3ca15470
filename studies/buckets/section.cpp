// The bucket sweep's report section: the sweep against the alpha-beta model fitted in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "bench/measure/comm_bench.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "studies/buckets/buckets_study.h"
#include "studies/buckets/rows.h"

namespace trainlab::bench {

namespace {
std::string bytes_tick(double x) {
  // A byte count drawn as a double, clamped into int64's range (a damaged row is drawn, never UB).
  return human_bytes(std::isfinite(x) ? static_cast<std::int64_t>(std::clamp(x, 0.0, 4e18)) : 0);
}

std::string ms_range(const Summary& s) {
  return fmt::format("{:.3f} ({:.3f}-{:.3f})", s.median * 1e3, s.min * 1e3, s.max * 1e3);
}

std::optional<ReportSection> buckets_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<AllreduceBucketsRow>());
  if (run_id.empty()) return std::nullopt;
  chart::Series measured{"measured (median; whisker min-max)", chart::kBlue, {}, false};
  chart::Series model{"alpha-beta model fitted in the same run", chart::kRed, {}, false};
  chart::Series ideal{"ideal: the whole buffer's bandwidth term", chart::kReference, {}, true};
  std::vector<std::vector<std::string>> table;
  const AllreduceBucketsRow* first = nullptr;
  for (const auto& row : rows) {
    if (!row.header.ok()) continue;
    if (!first) first = &row;
    const Summary& s = row.stats;
    const auto bucket = static_cast<double>(row.config.bucket_bytes);
    measured.points.push_back({bucket, 1e3 * s.median, 1e3 * s.min, 1e3 * s.max});
    model.points.push_back({bucket, 1e3 * row.predicted_s, {}, {}});
    ideal.points.push_back({bucket, 1e3 * row.ideal_s, {}, {}});
    table.push_back({human_bytes(row.config.bucket_bytes), fmt::format("{}", row.config.buckets), ms_range(s),
                     fmt::format("{:.3f}", 1e3 * row.predicted_s),
                     fmt::format("{:+.0f}%", 100 * (row.predicted_s / s.median - 1)),
                     fmt::format("{:+.0f}%", 100 * (s.median / row.ideal_s - 1))});
  }
  if (!first) return std::nullopt;
  ReportSection section = section_of("buckets", run_id, first->header.env);
  const std::string figure = figure_path("buckets", run_id);
  const BucketsConfig& config = first->config;
  const std::vector<std::string> head = {"bucket",       "buckets",     "measured ms median (min-max)",
                                         "predicted ms", "model error", "over ideal"};
  std::ostringstream md;
  md << fmt::format(
      "\n## Bucket sweep against the alpha-beta model\n\nRun `{}` of `bench_buckets` on {}: a {} gradient of {} cut "
      "into buckets of each size and all-reduced ({} ranks, {}); the model is fitted to single all-reduces measured "
      "in the same run.\n\n",
      run_id, measured_on(first->header.env), config.gradient.empty() ? "?" : config.gradient,
      human_bytes(config.total_bytes), config.ranks, config.algorithm.empty() ? "?" : config.algorithm);
  md << render_table(head, table, true);
  md << "\n![bucket sweep against the model](" << figure << ")\n";
  section.markdown = md.str();
  section.readme_table = render_table(head, table, true);
  chart::LineChart lines;
  lines.x_label = "bucket size";
  lines.y_label = "all-reduce time of the whole gradient, ms";
  lines.series = {measured, model, ideal};
  lines.log_x = true;
  lines.x_tick = bytes_tick;
  section.figures.emplace_back(
      figure, chart::render({"bucket sweep against the fitted model (run " + run_id + ")", {lines}, {}}));
  return section;
}

}  // namespace

SectionDef buckets_report_section() { return {"bucket sweep", buckets_section}; }

}  // namespace trainlab::bench
