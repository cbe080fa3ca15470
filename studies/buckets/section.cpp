// The bucket sweep's report section: the sweep against the alpha-beta model fitted in the same run.
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
#include "studies/buckets/buckets_study.h"

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

std::optional<ReportSection> buckets_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "allreduce_buckets");
  if (run_id.empty()) return std::nullopt;
  chart::Series measured{"measured (median; whisker min-max)", "#3a7ca5", {}, false};
  chart::Series model{"alpha-beta model fitted in the same run", "#d1495b", {}, false};
  chart::Series ideal{"ideal: the whole buffer's bandwidth term", "#888", {}, true};
  std::vector<std::vector<std::string>> table;
  const json* first = nullptr;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "allreduce_buckets" || row.value("status", "") != "ok") continue;
    if (!first) first = &row;
    const Summary s = stats_from(row.at("stats"));
    const double bucket = row.at("config").at("bucket_bytes").get<double>();
    const double predicted = row.at("predicted_s"), ideal_s = row.at("ideal_s");
    measured.points.push_back({bucket, 1e3 * s.median, 1e3 * s.min, 1e3 * s.max});
    model.points.push_back({bucket, 1e3 * predicted});
    ideal.points.push_back({bucket, 1e3 * ideal_s});
    table.push_back({human_bytes(as_bytes(bucket)), fmt::format("{}", int_at(row.at("config"), "buckets", 0)),
                     range(Summary{s.median * 1e3, 0, 0, s.min * 1e3, s.max * 1e3, s.n}, "{:.3f}"),
                     fmt::format("{:.3f}", 1e3 * predicted), fmt::format("{:+.0f}%", 100 * (predicted / s.median - 1)),
                     fmt::format("{:+.0f}%", 100 * (s.median / ideal_s - 1))});
  }
  if (!first) return std::nullopt;
  ReportSection section;
  section.measured_on = from_json<Environment>(*first);
  const std::string figure = "figures/buckets_" + run_id + ".svg";
  std::ostringstream md;
  const json& config = first->at("config");
  md << fmt::format(
      "\n## Bucket sweep against the alpha-beta model\n\nRun `{}` of `bench_buckets` on {}: a {} gradient of {} cut "
      "into buckets of each size and all-reduced ({} ranks, {}); the model is fitted to single all-reduces measured "
      "in the same run.\n\n",
      run_id, measured_on(*first), config.value("gradient", std::string("?")),
      human_bytes(int_at(config, "total_bytes", 0)), int_at(config, "ranks", 0),
      config.value("algorithm", std::string("?")));
  md << render_table({"bucket", "buckets", "measured ms median (min-max)", "predicted ms", "model error", "over ideal"},
                     table, true);
  md << "\n![bucket sweep against the model](" << figure << ")\n";
  section.markdown = md.str();
  section.marker = "buckets";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(*first);
  section.readme_table = render_table(
      {"bucket", "buckets", "measured ms median (min-max)", "predicted ms", "model error", "over ideal"}, table, true);
  section.figures.emplace_back(figure, legacy_line_figure("bucket sweep against the fitted model (run " + run_id + ")",
                                                          "bucket size", "all-reduce time of the whole gradient, ms",
                                                          {measured, model, ideal}, true, bytes_tick));
  return section;
}

}  // namespace

SectionDef buckets_report_section() {
  return {"bucket sweep", [](const SectionInput& in) {
            try {
              return buckets_section(in.ledger.rows);
            } catch (const json::exception& e) {
              throw Error(std::string("report: the ledger's latest bucket sweep run has a row it cannot read: ") +
                          e.what());
            }
          }};
}

}  // namespace trainlab::bench
