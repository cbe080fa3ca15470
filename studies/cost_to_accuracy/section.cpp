// The cost-to-accuracy study's report section (seed 000): both rankings, the findings, the scaling break-even.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "bench/report/legacy_rows.h"
#include "bench/report/section.h"
#include "bench/report/table.h"
#include "studies/cost_to_accuracy/cost_study.h"

namespace trainlab::bench {

namespace {
std::optional<ReportSection> cost_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run_of(loaded.rows, "cost_repeat");
  if (run_id.empty()) return std::nullopt;
  const json* first = nullptr;
  for (const auto& row : rows)
    if (row.value("kind", "") == "cost_repeat") {
      first = &row;
      break;
    }
  const double rate = first->at("rate"), target = first->at("target");
  const std::int64_t eval_every = first->at("eval_every"), step_cap = first->at("step_cap");
  const CostAnalysis analysis = analyse_cost(cost_results_from_rows(rows), rate, target, eval_every, step_cap);
  int repeats = 0;
  for (const auto& r : analysis.rows) repeats = std::max(repeats, r.repeats);
  ReportSection section;
  section.measured_on = from_json<Environment>(*first);
  const std::string figure = "figures/cost_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## Cost to accuracy\n\nRun `{}` of `studies/cost_to_accuracy` ({}{}) on {}: each configuration trained "
      "from scratch until held-out accuracy >= {:g} on {} consecutive evaluations (every {} steps, cap {} steps), "
      "{} repeat(s) interleaved; $ to target = samples to target / samples/s x ${}/hour / 3600.\n\n",
      run_id, first->value("study", std::string("?")), first->value("quick", false) ? ", quick" : "",
      measured_on(*first), target, first->value("consecutive", 0), eval_every, step_cap, repeats, rate);
  md << cost_table(analysis, true) << "\n" << cost_findings(analysis);
  md << "\nEvery repeat (repeat r trains with the configuration's seed + r):\n\n" << cost_repeats_table(analysis, true);
  std::vector<BreakEvenRow> breaks;
  std::string scaling_run;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "cost_break_even") continue;
    BreakEvenRow b;
    b.world = row.at("world");
    b.global_batch = row.at("global_batch");
    b.samples_per_s = row.at("samples_per_s");
    b.config = row.at("config_name");
    b.measured = row.at("status") == "ok";
    b.samples_to_target = row.at("samples_to_target");
    b.hours = row.at("hours");
    b.dollars = row.at("dollars");
    b.multiplier = row.at("multiplier");
    b.dollars_per_hour_saved = row.at("dollars_per_hour_saved");
    b.saves_time = b.dollars_per_hour_saved > 0;
    b.note = row.at("note");
    scaling_run = row.value("scaling_run", std::string());
    breaks.push_back(b);
  }
  if (!breaks.empty()) {
    md << fmt::format("\nScaling break-even (bench_scaling run `{}`, weak scaling; each rank charged ${}/hour):\n\n",
                      scaling_run, rate)
       << break_even_table(breaks, true);
  }
  md << "\n![rank by throughput against rank by cost](" << figure << ")\n";
  section.markdown = md.str();
  section.figures.emplace_back(figure, cost_rank_svg(analysis, "cost to accuracy (run " + run_id + ")"));
  section.marker = "cost";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(*first);
  section.readme_table = cost_table(analysis, true) + "\n" + cost_findings(analysis);
  return section;
}

}  // namespace

SectionDef cost_report_section() {
  return {"cost", [](const SectionInput& in) -> std::optional<ReportSection> {
            try {
              return cost_section(in.ledger);
            } catch (const json::exception& e) {
              throw Error(std::string("report: the ledger's latest cost run has a row it cannot read: ") + e.what());
            }
          }};
}

}  // namespace trainlab::bench
