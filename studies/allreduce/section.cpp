// The all-reduce study's report section: bus bandwidth against size, the ring against the library's own.
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
#include "studies/allreduce/allreduce_study.h"

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
bool from_bench_allreduce(const json& row) { return row.value("tool", "") != "bench_buckets"; }
}  // namespace

std::optional<ReportSection> allreduce_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "allreduce", from_bench_allreduce);
  if (run_id.empty()) return std::nullopt;
  // Per algorithm, per size: busbw at the median, and at the slowest and fastest iteration.
  std::map<std::string, std::map<std::int64_t, json>> by;
  double memcpy_gbps = 0;
  int ranks = 0;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "allreduce" || row.value("status", "") != "ok") continue;
    if (!row.at("config").at("bytes").is_number_integer()) continue;  // a damaged row is passed over
    by[row.at("config").at("algorithm").get<std::string>()][row.at("config").at("bytes").get<std::int64_t>()] = row;
    memcpy_gbps = row.value("memcpy_gbps", memcpy_gbps);
    ranks = static_cast<int>(int_at(row.at("config"), "ranks", 0));
  }
  if (by.empty()) return std::nullopt;
  const double factor = ranks > 0 ? 2.0 * (ranks - 1) / ranks : 1.0;
  std::vector<chart::Series> series;
  const std::map<std::string, std::string> colours = {{"ring", "#3a7ca5"}, {"native", "#d1495b"}};
  for (const auto& [algorithm, sizes] : by) {
    chart::Series s{algorithm == "native" ? "native (the MPI library's all-reduce)" : algorithm + " (trainlab)",
                    colours.count(algorithm) ? colours.at(algorithm) : "#66a182",
                    {},
                    false};
    for (const auto& [bytes, row] : sizes) {
      const Summary t = stats_from(row.at("stats"));
      const auto bus = [&](double seconds) { return static_cast<double>(bytes) / seconds * 1e-9 * factor; };
      s.points.push_back({static_cast<double>(bytes), bus(t.median), bus(t.max), bus(t.min)});
    }
    series.push_back(s);
  }
  if (memcpy_gbps > 0) {
    chart::Series line{fmt::format("single-core memcpy ({:.2f} GB/s)", memcpy_gbps), "#888", {}, true};
    for (const auto& [bytes, row] : by.begin()->second)
      line.points.push_back({static_cast<double>(bytes), memcpy_gbps});
    series.push_back(line);
  }
  std::vector<std::vector<std::string>> table;
  if (by.count("ring") && by.count("native")) {
    for (const auto& [bytes, ring] : by.at("ring")) {
      if (!by.at("native").count(bytes)) continue;
      const json& native = by.at("native").at(bytes);
      const Summary r = stats_from(ring.at("stats")), n = stats_from(native.at("stats"));
      const double effect = (r.median / n.median - 1) * 100;
      std::optional<Calibration> floor;
      if (native.contains("noise_floor_percent")) {
        Calibration c;
        c.noise_floor_percent = native.at("noise_floor_percent");
        c.valid = true;
        floor = c;
      }
      table.push_back({human_bytes(bytes), fmt::format("{:.2f}", ring.value("busbw_gbps", 0.0)),
                       fmt::format("{:.2f}", native.value("busbw_gbps", 0.0)),
                       fmt::format("{:.2f}", r.median / n.median),
                       floor ? fmt::format("{:+.1f}% ({} the noise floor)", effect, floor_multiple_text(effect, floor))
                             : fmt::format("{:+.1f}% (no noise floor recorded)", effect),
                       separable(r, n) ? "yes" : "no"});
    }
  }
  ReportSection section;
  section.measured_on = from_json<Environment>(rows.front());
  const std::string figure = "figures/allreduce_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## All-reduce: bus bandwidth against size\n\nRun `{}` of `bench_allreduce` on {}, {} ranks, {}: every size "
      "the ring and the library's own all-reduce alternating, each time the slowest rank's; busbw = bytes / time x "
      "2(P-1)/P (nccl-tests' definition); the dashed line is one core's memcpy. Whiskers: busbw at the slowest and "
      "fastest iteration. The noise floor is the native all-reduce's even iterations against its odd ones.\n\n",
      run_id, measured_on(rows.front()), ranks, text_at(rows.front(), "/config/communicator"));
  md << render_table({"size", "ring busbw GB/s", "native busbw GB/s", "time ratio", "ring against native", "separable"},
                     table, true);
  md << "\n![all-reduce busbw against size](" << figure << ")\n";
  section.markdown = md.str();
  // The README quotes every fourth size and the largest.
  std::vector<std::vector<std::string>> some;
  for (std::size_t i = 0; i < table.size(); ++i)
    if (i % 4 == 0 || i + 1 == table.size()) some.push_back(table[i]);
  section.marker = "allreduce";
  section.readme_intro = fmt::format("from run `{}` on {}, {} ranks", run_id, measured_on(rows.front()), ranks);
  section.readme_table = render_table(
      {"size", "ring busbw GB/s", "native busbw GB/s", "time ratio", "ring against native", "separable"}, some, true);
  section.figures.emplace_back(figure, legacy_line_figure("all-reduce bus bandwidth (run " + run_id + ")",
                                                          "message size", "busbw GB/s", series, true, bytes_tick));
  return section;
}

}  // namespace

SectionDef allreduce_report_section() {
  return {
      "all-reduce", [](const SectionInput& in) {
        try {
          return allreduce_section(in.ledger.rows);
        } catch (const json::exception& e) {
          throw Error(std::string("report: the ledger's latest all-reduce run has a row it cannot read: ") + e.what());
        }
      }};
}

}  // namespace trainlab::bench
