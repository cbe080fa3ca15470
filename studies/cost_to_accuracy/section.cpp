// The cost-to-accuracy study's report section (seed 000): both rankings, the findings, the scaling break-even.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <sstream>
#include <tuple>

#include "bench/measure/knobs.h"
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

bool on_real_data(const CostRepeatRow& row) { return row.data && !row.data->synthetic(); }

// The model a row trained (rows from before --model trained SmallCNN), as its label names it.
std::string model_of(const CostRepeatRow& row) {
  const auto name = row.config.find("model");
  const auto options = row.config.find("model_options");
  return model_label(name == row.config.end() ? "smallcnn" : name->second,
                     options == row.config.end() ? "" : options->second);
}

CostAnalysis analysis_of(const std::vector<CostRepeatRow>& rows) {
  const CostRepeatRow& first = rows.front();
  return analyse_cost(cost_results_from_rows(rows), first.rate, first.target, first.eval_every, first.step_cap,
                      parse_cost_metric(first.metric));
}

std::string ranking_words(const CostAnalysis& a, bool by_cost) {
  std::vector<const CostRow*> rows;
  for (const auto& r : a.rows) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [&](const CostRow* x, const CostRow* y) {
    const int rx = by_cost ? (x->rank_cost > 0 ? x->rank_cost : 1000) : x->rank_throughput;
    const int ry = by_cost ? (y->rank_cost > 0 ? y->rank_cost : 1000) : y->rank_throughput;
    return rx < ry;
  });
  std::string out;
  for (const CostRow* r : rows) {
    if (by_cost && r->rank_cost == 0) {
      out += (out.empty() ? "" : ", ") + fmt::format("`{}` (not reached)", r->name);
      continue;
    }
    out += (out.empty() ? "" : ", ") + fmt::format("`{}`", r->name);
  }
  return out;
}

// The synthetic run and the real-data run, finding by finding.
std::string side_by_side(const std::string& synthetic_run, const CostAnalysis& synthetic, const std::string& real_run,
                         const CostAnalysis& real, const std::string& real_name) {
  const auto yes = [](bool b) { return std::string(b ? "yes" : "no"); };
  const auto over = [](const CostAnalysis& a) {
    return a.over_rated.empty() ? std::string("none")
                                : fmt::format("`{}` ({} place(s) down)", a.over_rated, a.over_rated_places);
  };
  const auto spread = [](const CostAnalysis& a) {
    return a.any_reached ? fmt::format("{:.2f}x (`{}` / `{}`)", a.spread, a.dearest, a.cheapest) : std::string("-");
  };
  std::ostringstream md;
  md << fmt::format("| | SyntheticImages (`{}`) | {} (`{}`) |\n|---|---|---|\n", synthetic_run, real_name, real_run);
  md << fmt::format("| target | {} | {} |\n", target_phrase(synthetic.metric, synthetic.target),
                    target_phrase(real.metric, real.target));
  md << fmt::format("| ranking by throughput | {} | {} |\n", ranking_words(synthetic, false),
                    ranking_words(real, false));
  md << fmt::format("| ranking by $ to target | {} | {} |\n", ranking_words(synthetic, true),
                    ranking_words(real, true));
  md << fmt::format("| winners agree | {} | {} |\n", yes(synthetic.winners_agree), yes(real.winners_agree));
  md << fmt::format("| orderings agree | {} | {} |\n", yes(synthetic.orderings_agree), yes(real.orderings_agree));
  md << fmt::format("| over-rated by throughput | {} | {} |\n", over(synthetic), over(real));
  md << fmt::format("| spread of $ to target | {} | {} |\n", spread(synthetic), spread(real));
  const bool winners_change = synthetic.winners_agree != real.winners_agree;
  const bool over_changes = synthetic.over_rated != real.over_rated;
  md << fmt::format("\nOn real data, winners_agree {} ({} -> {}) and the over-rated configuration {} ({} -> {}).\n",
                    winners_change ? "changes" : "does not change", yes(synthetic.winners_agree),
                    yes(real.winners_agree), over_changes ? "changes" : "stays", over(synthetic), over(real));
  return md.str();
}

// One run's table, findings and every repeat, under its heading.
void run_part(const std::string& heading, const std::string& run_id, const std::vector<CostRepeatRow>& rows,
              const CostAnalysis& analysis, std::ostringstream& md) {
  const CostRepeatRow& first = rows.front();
  int repeats = 0;
  for (const auto& r : analysis.rows) repeats = std::max(repeats, r.repeats);
  md << fmt::format(
      "\n## {}\n\nRun `{}` of `studies/cost_to_accuracy` ({}{}) on {}, data: {}: each configuration trained "
      "from scratch until {} on {} consecutive evaluations (every {} steps, cap {} steps), "
      "{} repeat(s) interleaved; $ to target = samples to target / samples/s x ${}/hour / 3600.\n\n",
      heading, run_id, first.study.empty() ? "?" : first.study, first.quick ? ", quick" : "",
      measured_on(first.header.env), first.data ? first.data->label() : std::string("SyntheticImages"),
      target_phrase(parse_cost_metric(first.metric), first.target), first.consecutive, first.eval_every, first.step_cap,
      repeats, first.rate);
  md << cost_table(analysis, true) << "\n" << cost_findings(analysis);
  md << "\nEvery repeat (repeat r trains with the configuration's seed + r):\n\n" << cost_repeats_table(analysis, true);
}

// Each other model's latest run, its table and figure under its own heading: its rankings are not
// SmallCNN's to set beside.
void other_models(const std::vector<CostRepeatRow>& every, const std::string& main_model, ReportSection& section,
                  std::ostringstream& md) {
  std::vector<std::string> models;
  for (const auto& r : every)
    if (const std::string m = model_of(r);
        m != main_model && std::find(models.begin(), models.end(), m) == models.end())
      models.push_back(m);
  for (const std::string& model : models) {
    const auto [id, rows] = latest_run(every, [&](const CostRepeatRow& r) { return model_of(r) == model; });
    const CostAnalysis analysis = analysis_of(rows);
    const std::string on = rows.front().data ? " on " + rows.front().data->name : "";
    run_part("Cost to accuracy: " + model + on, id, rows, analysis, md);
    const std::string figure = figure_path("cost", id);
    md << "\n![rank by throughput against rank by cost, " << model << "](" << figure << ")\n";
    section.figures.emplace_back(
        figure, chart::render(cost_rank_figure(analysis, "cost to accuracy, " + model + " (run " + id + ")")));
  }
}

// The section: SmallCNN's (with no SmallCNN rows, the first model's) latest run on SyntheticImages
// (else the latest at all) with its break-even, then its latest run on a data set on disk, both
// rankings side by side; then each other model's latest run.
std::optional<ReportSection> cost_section(const SectionInput& in) {
  const std::vector<CostRepeatRow> every = in.read<CostRepeatRow>();
  if (every.empty()) return std::nullopt;
  const std::string smallcnn = model_label("smallcnn");
  const bool has_smallcnn =
      std::any_of(every.begin(), every.end(), [&](const CostRepeatRow& r) { return model_of(r) == smallcnn; });
  const std::string main_model = has_smallcnn ? smallcnn : model_of(every.front());
  std::vector<CostRepeatRow> all;
  std::copy_if(every.begin(), every.end(), std::back_inserter(all),
               [&](const CostRepeatRow& r) { return model_of(r) == main_model; });
  auto [run_id, rows] = latest_run(all, [](const CostRepeatRow& r) { return !on_real_data(r); });
  const auto [real_id, real_rows] = latest_run(all, [](const CostRepeatRow& r) { return on_real_data(r); });
  if (run_id.empty()) std::tie(run_id, rows) = std::pair{real_id, real_rows};
  if (run_id.empty()) return std::nullopt;
  const CostRepeatRow& first = rows.front();
  const CostAnalysis analysis = analysis_of(rows);
  ReportSection section = section_of("cost", run_id, first.header.env);
  const std::string figure = figure_path("cost", run_id);
  std::ostringstream md;
  run_part("Cost to accuracy", run_id, rows, analysis, md);
  std::string scaling_run;
  const std::vector<BreakEvenRow> breaks = break_even_of(in.read<CostBreakEvenRow>(), run_id, scaling_run);
  if (!breaks.empty()) {
    md << fmt::format("\nScaling break-even (bench_scaling run `{}`, weak scaling; each rank charged ${}/hour):\n\n",
                      scaling_run, first.rate)
       << break_even_table(breaks, true);
  }
  md << "\n![rank by throughput against rank by cost](" << figure << ")\n";
  section.figures.emplace_back(figure,
                               chart::render(cost_rank_figure(analysis, "cost to accuracy (run " + run_id + ")")));
  if (!real_id.empty() && real_id != run_id) {
    const CostAnalysis real = analysis_of(real_rows);
    const std::string name = real_rows.front().data->name;
    run_part("Cost to accuracy on real data: " + name, real_id, real_rows, real, md);
    md << "\nSynthetic and real side by side:\n\n" << side_by_side(run_id, analysis, real_id, real, name);
    const std::string real_figure = figure_path("cost", real_id);
    md << "\n![rank by throughput against rank by cost on " << name << "](" << real_figure << ")\n";
    section.figures.emplace_back(
        real_figure, chart::render(cost_rank_figure(real, "cost to accuracy on " + name + " (run " + real_id + ")")));
    ReportBlock block;
    block.marker = "cost-real";
    block.intro = fmt::format("from run `{}` ({}) beside SyntheticImages run `{}`", real_id,
                              real_rows.front().data->label(), run_id);
    block.table = side_by_side(run_id, analysis, real_id, real, name);
    section.more_blocks.push_back(block);
  }
  other_models(every, main_model, section, md);
  section.markdown = md.str();
  section.readme_table = cost_table(analysis, true) + "\n" + cost_findings(analysis);
  return section;
}

}  // namespace

SectionDef cost_report_section() { return {"cost", cost_section}; }

}  // namespace trainlab::bench
