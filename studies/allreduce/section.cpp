// The all-reduce study's report section: bus bandwidth against size, the ring against the library's own.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "bench/measure/comm_bench.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/allreduce/rows.h"

namespace trainlab::bench {

namespace {
// A byte count read from a row as a double, clamped into int64's range (a damaged row is drawn, never UB).
std::int64_t as_bytes(double x) { return std::isfinite(x) ? static_cast<std::int64_t>(std::clamp(x, 0.0, 4e18)) : 0; }
std::string bytes_tick(double x) { return human_bytes(as_bytes(x)); }

using BySize = std::map<std::int64_t, const AllreduceRow*>;

// Per algorithm: busbw at the median, whiskers at the slowest and fastest iteration; the memcpy line.
std::vector<chart::Series> busbw_series(const std::map<std::string, BySize>& by, double factor, double memcpy_gbps) {
  std::vector<chart::Series> series;
  const std::map<std::string, std::string> colours = {{"ring", chart::kBlue}, {"native", chart::kRed}};
  for (const auto& [algorithm, sizes] : by) {
    chart::Series s{algorithm == "native" ? "native (the MPI library's all-reduce)" : algorithm + " (trainlab)",
                    colours.count(algorithm) ? colours.at(algorithm) : "#66a182",
                    {},
                    false};
    for (const auto& [bytes, row] : sizes) {
      const Summary& t = row->stats;
      const double size = static_cast<double>(bytes);  // a structured binding: clang 14 cannot capture it
      const auto bus = [&](double seconds) { return size / seconds * 1e-9 * factor; };
      s.points.push_back({static_cast<double>(bytes), bus(t.median), bus(t.max), bus(t.min)});
    }
    series.push_back(s);
  }
  if (memcpy_gbps > 0) {
    chart::Series line{fmt::format("single-core memcpy ({:.2f} GB/s)", memcpy_gbps), chart::kReference, {}, true};
    for (const auto& [bytes, row] : by.begin()->second)
      line.points.push_back({static_cast<double>(bytes), memcpy_gbps, {}, {}});
    series.push_back(line);
  }
  return series;
}

// A line per size both algorithms measured: the ring against native in units of native's noise floor.
std::vector<std::vector<std::string>> ring_against_native(const std::map<std::string, BySize>& by) {
  std::vector<std::vector<std::string>> table;
  if (!by.count("ring") || !by.count("native")) return table;
  for (const auto& [bytes, ring] : by.at("ring")) {
    if (!by.at("native").count(bytes)) continue;
    const AllreduceRow& native = *by.at("native").at(bytes);
    const Summary &r = ring->stats, &n = native.stats;
    const double effect = (r.median / n.median - 1) * 100;
    std::optional<Calibration> floor;
    if (native.noise_floor_percent) {
      Calibration c;
      c.noise_floor_percent = *native.noise_floor_percent;
      c.valid = true;
      floor = c;
    }
    table.push_back({human_bytes(bytes), fmt::format("{:.2f}", ring->busbw_gbps.value_or(0.0)),
                     fmt::format("{:.2f}", native.busbw_gbps.value_or(0.0)), fmt::format("{:.2f}", r.median / n.median),
                     floor ? fmt::format("{:+.1f}% ({} the noise floor)", effect, floor_multiple_text(effect, floor))
                           : fmt::format("{:+.1f}% (no noise floor recorded)", effect),
                     separable(r, n) ? "yes" : "no"});
  }
  return table;
}

std::optional<ReportSection> allreduce_section(const SectionInput& in) {
  const auto [run_id, rows] =
      latest_run(in.read<AllreduceRow>(), [](const AllreduceRow& row) { return !row.from_bench_buckets(); });
  if (run_id.empty()) return std::nullopt;
  // Per algorithm, per size.
  std::map<std::string, BySize> by;
  double memcpy_gbps = 0;
  int ranks = 0;
  for (const auto& row : rows) {
    if (!row.header.ok()) continue;
    by[row.config.algorithm][row.config.bytes] = &row;
    memcpy_gbps = row.memcpy_gbps.value_or(memcpy_gbps);
    ranks = row.config.ranks;
  }
  if (by.empty()) return std::nullopt;
  const double factor = ranks > 0 ? busbw_factor(Collective::allreduce, ranks) : 1.0;
  const auto table = ring_against_native(by);
  const AllreduceRow& first = rows.front();
  ReportSection section = section_of("allreduce", run_id, first.header.env, fmt::format(", {} ranks", ranks));
  const std::string figure = figure_path("allreduce", run_id);
  const std::vector<std::string> head = {"size",       "ring busbw GB/s",     "native busbw GB/s",
                                         "time ratio", "ring against native", "separable"};
  std::ostringstream md;
  md << fmt::format(
      "\n## All-reduce: bus bandwidth against size\n\nRun `{}` of `bench_allreduce` on {}, {} ranks, {}: every size "
      "the ring and the library's own all-reduce alternating, each time the slowest rank's; busbw = bytes / time x "
      "2(P-1)/P (nccl-tests' definition); the dashed line is one core's memcpy. Whiskers: busbw at the slowest and "
      "fastest iteration. The noise floor is the native all-reduce's even iterations against its odd ones.\n\n",
      run_id, measured_on(first.header.env), ranks, first.config.communicator.value_or("?"));
  md << render_table(head, table, true);
  md << "\n![all-reduce busbw against size](" << figure << ")\n";
  section.markdown = md.str();
  // The README quotes every fourth size and the largest.
  std::vector<std::vector<std::string>> some;
  for (std::size_t i = 0; i < table.size(); ++i)
    if (i % 4 == 0 || i + 1 == table.size()) some.push_back(table[i]);
  section.readme_table = render_table(head, some, true);
  chart::LineChart lines;
  lines.x_label = "message size";
  lines.y_label = "busbw GB/s";
  lines.series = busbw_series(by, factor, memcpy_gbps);
  lines.log_x = true;
  lines.x_tick = bytes_tick;
  section.figures.emplace_back(figure, chart::render({"all-reduce bus bandwidth (run " + run_id + ")", {lines}, {}}));
  return section;
}

}  // namespace

SectionDef allreduce_report_section() { return {"all-reduce", allreduce_section}; }

}  // namespace trainlab::bench
