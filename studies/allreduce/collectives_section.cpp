// The report's section for bench_allreduce --collective reduce_scatter | all_gather | broadcast:
// per collective, its latest run, a table (the best hand-written arm against the library's, the
// noise floor, #wrong) and a figure of bus bandwidth against size.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "bench/measure/comm_bench.h"
#include "bench/measure/stats.h"
#include "bench/report/table.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/allreduce/section_parts.h"

namespace trainlab::bench {

namespace {

std::optional<Calibration> floor_of(const AllreduceRow& native) {
  if (!native.noise_floor_percent) return std::nullopt;
  Calibration c;
  c.noise_floor_percent = *native.noise_floor_percent;
  c.valid = true;
  return c;
}

// A line per size: the fastest hand-written arm against native, or native alone (broadcast).
std::vector<std::string> size_line(std::int64_t bytes, const std::map<std::string, BySize>& by, double memcpy_gbps) {
  const AllreduceRow* native = by.count("native") && by.at("native").count(bytes) ? by.at("native").at(bytes) : nullptr;
  const AllreduceRow* best = nullptr;
  for (const auto& [arm, sizes] : by)
    if (arm != "native" && sizes.count(bytes) && (!best || sizes.at(bytes)->stats.median < best->stats.median))
      best = sizes.at(bytes);
  const AllreduceRow* any = best ? best : native;
  const std::string wrong = any && any->wrong ? std::to_string(*any->wrong) : "?";
  const auto bus = [](const AllreduceRow* r) { return r ? fmt::format("{:.2f}", r->busbw_gbps.value_or(0.0)) : "-"; };
  if (best == nullptr || native == nullptr)
    return {
        human_bytes(bytes),
        "-",
        "-",
        bus(native),
        native && memcpy_gbps > 0 ? fmt::format("{:.0f}%", 100 * native->busbw_gbps.value_or(0) / memcpy_gbps) : "-",
        "-",
        wrong};
  const double ratio = best->stats.median / native->stats.median, effect = (ratio - 1) * 100;
  return {human_bytes(bytes),
          best->config.algorithm,
          bus(best),
          bus(native),
          memcpy_gbps > 0 ? fmt::format("{:.0f}%", 100 * best->busbw_gbps.value_or(0) / memcpy_gbps) : "-",
          fmt::format("{:.2f} ({} the floor, {})", ratio, floor_multiple_text(effect, floor_of(*native)),
                      separable(best->stats, native->stats) ? "separable" : "not separable"),
          wrong};
}

std::optional<ReportSection> collectives_section(const SectionInput& in) {
  const std::vector<AllreduceRow> all = in.read<AllreduceRow>();
  std::map<std::string, std::string> latest;  // collective -> its latest run
  for (const auto& r : all)
    if (r.header.ok() && !r.config.is_allreduce()) latest[*r.config.collective] = r.header.run_id;
  if (latest.empty()) return std::nullopt;
  std::optional<ReportSection> section;
  std::ostringstream md, readme;
  const std::vector<std::string> head = {"size",          "best hand-written",     "its busbw GB/s", "MPI busbw GB/s",
                                         "best / memcpy", "time ratio best / MPI", "#wrong"};
  for (const std::string name : {"reduce_scatter", "all_gather", "broadcast"}) {
    if (!latest.count(name)) continue;
    const std::string run_id = latest.at(name);
    std::map<std::string, BySize> by;
    const AllreduceRow* first = nullptr;
    double memcpy_gbps = 0;
    for (const auto& r : all) {
      if (r.header.run_id != run_id || !r.header.ok() || r.config.collective != name) continue;
      if (first == nullptr) first = &r;
      by[r.config.algorithm][r.config.bytes] = &r;
      memcpy_gbps = r.memcpy_gbps.value_or(memcpy_gbps);
    }
    const int ranks = first->config.ranks;
    if (!section)
      section = section_of("collectives", run_id, first->header.env,
                           fmt::format(", {} ranks (and the other collectives' latest runs)", ranks));
    std::set<std::int64_t> sizes;
    for (const auto& [arm, s] : by)
      for (const auto& [bytes, row] : s) sizes.insert(bytes);
    std::vector<std::vector<std::string>> table;
    for (std::int64_t bytes : sizes) table.push_back(size_line(bytes, by, memcpy_gbps));
    const double factor = busbw_factor(parse_collective(name), ranks);
    const std::string figure = figure_path(name, run_id);
    md << fmt::format(
        "\n## {}: bus bandwidth against size, {} ranks\n\nRun `{}` of `bench_allreduce --collective {}` on {}{}: "
        "trainlab's hand-written arms and the MPI library's own, interleaved, each time the slowest rank's; size is "
        "the whole buffer and busbw = bytes / time x {:.3g} (nccl-tests'); #wrong counts the elements that differed "
        "from the exact answer on integer-valued data, over every arm and rank, before the timing.\n\n",
        name, ranks, run_id, name, measured_on(first->header.env),
        first->config.mpi_transport ? ", over btl " + *first->config.mpi_transport : "", factor);
    md << render_table(head, table, true);
    md << "\n![" << name << " busbw against size](" << figure << ")\n";
    readme << fmt::format("\n{} ({} ranks, run `{}`):\n\n", name, ranks, run_id) << render_table(head, table, true);
    chart::LineChart lines;
    lines.x_label = "message size (the whole buffer)";
    lines.y_label = "busbw GB/s";
    lines.log_x = true;
    lines.x_tick = bytes_tick;
    lines.series = busbw_series(by, factor, memcpy_gbps);
    section->figures.emplace_back(figure, chart::render({name + " bus bandwidth (run " + run_id + ")", {lines}, {}}));
  }
  section->markdown = md.str();
  section->readme_table = readme.str();
  return section;
}

}  // namespace

SectionDef collectives_report_section() { return {"collectives", collectives_section}; }

}  // namespace trainlab::bench
