// The pipeline study's report section: measured utilisation against the fill-and-drain bound, per
// schedule and micro-batch count, and the figure of both.
#include <fmt/format.h>

#include <map>
#include <sstream>

#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "studies/pipeline/pipeline_study.h"
#include "studies/pipeline/rows.h"

namespace trainlab::bench {

namespace {

std::string per_stage(const std::vector<double>& values, double scale, const char* format) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i ? " / " : "") + fmt::format(fmt::runtime(format), scale * values[i]);
  return out;
}

// Per stage, the activations held at once against the schedule's prediction, MiB ("" in rows from
// before they were measured).
std::string activations(const PipelineRow& row) {
  std::string out;
  for (std::size_t i = 0; i < row.stage_activation_peak_bytes.size() && i < row.stage_activation_predicted_bytes.size();
       ++i)
    out += fmt::format("{}{:.2f} / {:.2f}", i ? "; " : "", row.stage_activation_peak_bytes[i] / 1048576.0,
                       row.stage_activation_predicted_bytes[i] / 1048576.0);
  return out;
}

// One configuration's last step as lanes: a stage each, its forwards blue and backwards red.
chart::Timeline timeline_of(const PipelineRow& row) {
  chart::Timeline t;
  t.title = fmt::format("{}, m = {}", row.config.schedule, row.config.micro_batches);
  const std::size_t per = static_cast<std::size_t>(8 * row.config.micro_batches);
  for (std::size_t s = 0; s < static_cast<std::size_t>(row.config.stages); ++s) {
    chart::Lane lane{fmt::format("stage {}", s), {}};
    for (std::size_t e = 0; e + 3 < per && s * per + e + 3 < row.last_step_events.size(); e += 4) {
      const double* at = row.last_step_events.data() + s * per + e;
      if (at[3] <= 0) continue;
      lane.intervals.push_back({1e3 * at[2], 1e3 * at[3], at[0] == 0 ? chart::kBlue : chart::kRed,
                                fmt::format("{}{}", at[0] == 0 ? "F" : "B", static_cast<int>(at[1]))});
    }
    t.lanes.push_back(lane);
  }
  t.legend = {{"forward", chart::kBlue}, {"backward", chart::kRed}};
  return t;
}

std::optional<ReportSection> pipeline_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<PipelineRow>());
  if (run_id.empty()) return std::nullopt;
  std::vector<std::vector<std::string>> table;
  std::map<std::string, chart::Series> measured;
  chart::Series bound{"bound m / (m + p - 1)", chart::kReference, {}, true};
  const PipelineRow* first = nullptr;
  for (const auto& row : rows) {
    if (!row.header.ok()) continue;
    if (!first) first = &row;
    const Summary& s = row.stats;
    table.push_back({row.config.schedule, fmt::format("{}", row.config.micro_batches),
                     fmt::format("{:.1f} ({:.1f}-{:.1f})", 1e3 * s.median, 1e3 * s.min, 1e3 * s.max),
                     fmt::format("{:.1f}%", 100 * row.utilisation), fmt::format("{:.1f}%", 100 * row.bound),
                     fmt::format("{:.1f}%", 100 * row.bound_measured_stages),
                     per_stage(row.stage_busy_s, 1e3, "{:.1f}"), per_stage(row.stage_utilisation, 100, "{:.0f}%"),
                     activations(row)});
    auto [it, fresh] = measured.try_emplace(row.config.schedule);
    if (fresh)
      it->second = {
          row.config.schedule + " (measured)", row.config.schedule == "gpipe" ? chart::kBlue : chart::kRed, {}, false};
    const auto m = static_cast<double>(row.config.micro_batches);
    it->second.points.push_back({m, 100 * row.utilisation, {}, {}});
    if (row.config.schedule == first->config.schedule) bound.points.push_back({m, 100 * row.bound, {}, {}});
  }
  if (!first) return std::nullopt;
  ReportSection section = section_of("pipeline", run_id, first->header.env);
  const std::string figure = figure_path("pipeline", run_id);
  const std::vector<std::string> head = {"schedule",
                                         "m",
                                         "step ms median (min-max)",
                                         "utilisation",
                                         "bound",
                                         "bound, measured stages",
                                         "stage busy ms",
                                         "stage utilisation",
                                         "activations MiB, measured / predicted"};
  std::ostringstream md;
  md << fmt::format(
      "\n## Pipeline parallelism against its bound\n\nRun `{}` of `bench_pipeline` on {}: {}, {} stages ({}), "
      "micro-batches of {} samples. Utilisation: each stage's forwards and backwards over the schedule's span (the "
      "update excluded), averaged over the stages; the bound is seed 003's fill-and-drain m / (m + p - 1) for "
      "balanced stages, and the same bubble for the stage times as measured. Activations: what each stage held at once "
      "against the schedule's prediction from one micro-batch's forward there (k - 1 micro-batches kept while the "
      "k-th runs at its peak; k = m for GPipe, min(m, p - s) for 1F1B).\n\n",
      run_id, measured_on(first->header.env), first->config.model, first->config.stages, first->config.cut,
      first->config.micro_batch);
  md << render_table(head, table, true);
  md << "\n![utilisation against the bound](" << figure << ")\n";
  section.markdown = md.str();
  section.readme_table = render_table(head, table, true);
  chart::LineChart lines;
  lines.x_label = "micro-batches m";
  lines.y_label = "utilisation, %";
  for (auto& [name, series] : measured) lines.series.push_back(series);
  lines.series.push_back(bound);
  lines.log_x = true;
  section.figures.emplace_back(
      figure, chart::render({"pipeline utilisation against the bound (run " + run_id + ")", {lines}, {}}));
  // Each schedule's last step at the largest m <= 8 the run measured, stage by stage.
  std::map<std::string, const PipelineRow*> shown;
  for (const auto& row : rows)
    if (row.header.ok() && !row.last_step_events.empty() && row.config.micro_batches <= 8) {
      const PipelineRow*& best = shown[row.config.schedule];
      if (!best || row.config.micro_batches > best->config.micro_batches) best = &row;
    }
  if (!shown.empty()) {
    chart::Figure timelines{
        "each stage's forwards and backwards, the last measured step (run " + run_id + ")",
        {},
        {"idle: blank; times from each stage's step start, the stages started together after a barrier"}};
    for (const auto& [schedule, row] : shown) timelines.panels.emplace_back(timeline_of(*row));
    const std::string path = figure_path("pipeline_timeline", run_id);
    section.figures.emplace_back(path, chart::render(timelines));
    section.markdown += "\n![each stage's timeline](" + path + ")\n";
  }
  return section;
}

}  // namespace

SectionDef pipeline_report_section() { return {"pipeline", pipeline_section}; }

}  // namespace trainlab::bench
