// The report's section for bench_allreduce --routes (block allreduce-routes): the latest routes run,
// each route's median at each size against seed 001's alpha-beta model fitted to the run's ring
// (studies/allreduce/routes.h).
#include <fmt/format.h>

#include <map>
#include <sstream>

#include "bench/report/table.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/allreduce/routes.h"
#include "studies/allreduce/section_parts.h"

namespace trainlab::bench {

namespace {

std::optional<ReportSection> routes_section(const SectionInput& in) {
  const std::vector<AllreduceRow> all = in.read<AllreduceRow>();
  const auto routes = [](const AllreduceRow& r) { return r.header.ok() && r.config.study == "routes"; };
  std::string run_id;
  for (const auto& r : all)
    if (routes(r)) run_id = r.header.run_id;
  if (run_id.empty()) return std::nullopt;
  std::map<std::int64_t, RoutePoint> by_size;
  const AllreduceRow* first = nullptr;
  for (const auto& r : all) {
    if (r.header.run_id != run_id || !routes(r)) continue;
    if (first == nullptr) first = &r;
    RoutePoint& p = by_size[r.config.bytes];
    p.bytes = r.config.bytes;
    p.medians.emplace_back(r.config.algorithm, r.stats.median);
  }
  std::vector<RoutePoint> points;
  for (auto& [bytes, p] : by_size) points.push_back(std::move(p));
  const int ranks = first->config.ranks;
  ReportSection section = section_of("allreduce-routes", run_id, first->header.env, fmt::format(", {} ranks", ranks));
  std::ostringstream md;
  md << fmt::format(
      "\n## Seed 004's routes: the same gradients summed four ways, {} ranks\n\nRun `{}` of `bench_allreduce "
      "--routes` on {} (malloc {}): to_one (every buffer to rank 0, added there, broadcast), sharded (the library's "
      "reduce-scatter and all-gather: every rank serves a chunk), the hand-written ring, single_copy (a shared "
      "window, no messages) and the library's all-reduce{}; medians over iterations, each the slowest rank's, "
      "against seed 001's alpha-beta model fitted to the ring's medians of the same run (single_copy against one "
      "memcpy of S{}).\n\n",
      ranks, run_id, measured_on(first->header.env), first->config.malloc.value_or("?"),
      first->device_copy_gbps ? ", and via_host (the data in device memory, copied to a host buffer, summed there, "
                                "copied back)"
                              : "",
      first->device_copy_gbps
          ? fmt::format("; via_host against the library's plus S each way at {:.2f} GB/s", *first->device_copy_gbps)
          : "");
  if (points.size() < 2) {
    md << "No prediction: the fit needs two sizes or more.\n";
    section.markdown = md.str();
    return section;
  }
  const RouteTable table =
      route_table(ranks, points, first->memcpy_gbps.value_or(0), first->device_copy_gbps.value_or(0));
  md << render_table(table.head, table.rows, true) << "\n" << table.fit << ".\n";
  section.markdown = md.str();
  section.readme_table = render_table(table.head, table.rows, true) + "\n" + table.fit + ".\n";
  return section;
}

}  // namespace

SectionDef allreduce_routes_report_section() { return {"allreduce-routes", routes_section}; }

}  // namespace trainlab::bench
