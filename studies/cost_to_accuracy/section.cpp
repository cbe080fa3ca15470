// The cost-to-accuracy study's report section (seed 000): both rankings, the findings, the scaling break-even.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "bench/report/table.h"
#include "studies/cost_to_accuracy/cost_study.h"
#include "studies/cost_to_accuracy/rows.h"

namespace trainlab::bench {

namespace {

// The break-even rows of the run, as the driver computed them; `scaling_run` receives the
// bench_scaling run they came from.
std::vector<BreakEvenRow> break_even_of(const std::vector<CostBreakEvenRow>& rows, const std::string& run_id,
                                        std::string& scaling_run) {
  std::vector<BreakEvenRow> breaks;
  for (const auto& row : rows) {
    if (row.header.run_id != run_id) continue;
    BreakEvenRow b;
    b.world = row.world;
    b.global_batch = row.global_batch;
    b.samples_per_s = row.samples_per_s;
    b.config = row.config_name;
    b.measured = row.header.ok();
    b.samples_to_target = row.samples_to_target;
    b.hours = row.hours;
    b.dollars = row.dollars;
    b.multiplier = row.multiplier;
    b.dollars_per_hour_saved = row.dollars_per_hour_saved;
    b.saves_time = b.dollars_per_hour_saved > 0;
    b.note = row.note;
    scaling_run = row.scaling_run;
    breaks.push_back(b);
  }
  return breaks;
}

std::optional<ReportSection> cost_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<CostRepeatRow>());
  if (run_id.empty()) return std::nullopt;
  const CostRepeatRow& first = rows.front();
  const CostAnalysis analysis =
      analyse_cost(cost_results_from_rows(rows), first.rate, first.target, first.eval_every, first.step_cap);
  int repeats = 0;
  for (const auto& r : analysis.rows) repeats = std::max(repeats, r.repeats);
  ReportSection section = section_of("cost", run_id, first.header.env);
  const std::string figure = figure_path("cost", run_id);
  std::ostringstream md;
  md << fmt::format(
      "\n## Cost to accuracy\n\nRun `{}` of `studies/cost_to_accuracy` ({}{}) on {}: each configuration trained "
      "from scratch until held-out accuracy >= {:g} on {} consecutive evaluations (every {} steps, cap {} steps), "
      "{} repeat(s) interleaved; $ to target = samples to target / samples/s x ${}/hour / 3600.\n\n",
      run_id, first.study.empty() ? "?" : first.study, first.quick ? ", quick" : "", measured_on(first.header.env),
      first.target, first.consecutive, first.eval_every, first.step_cap, repeats, first.rate);
  md << cost_table(analysis, true) << "\n" << cost_findings(analysis);
  md << "\nEvery repeat (repeat r trains with the configuration's seed + r):\n\n" << cost_repeats_table(analysis, true);
  std::string scaling_run;
  const std::vector<BreakEvenRow> breaks = break_even_of(in.read<CostBreakEvenRow>(), run_id, scaling_run);
  if (!breaks.empty()) {
    md << fmt::format("\nScaling break-even (bench_scaling run `{}`, weak scaling; each rank charged ${}/hour):\n\n",
                      scaling_run, first.rate)
       << break_even_table(breaks, true);
  }
  md << "\n![rank by throughput against rank by cost](" << figure << ")\n";
  section.markdown = md.str();
  section.figures.emplace_back(figure,
                               chart::render(cost_rank_figure(analysis, "cost to accuracy (run " + run_id + ")")));
  section.readme_table = cost_table(analysis, true) + "\n" + cost_findings(analysis);
  return section;
}

}  // namespace

SectionDef cost_report_section() { return {"cost", cost_section}; }

}  // namespace trainlab::bench
