#include "bench/report/headline.h"

#include <fmt/format.h>
#include <algorithm>
#include <sstream>

namespace trainlab::bench {

namespace {

// A markdown cell: no line breaks, no column separator.
std::string cell(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::string out;
  for (const char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

std::optional<ReportBlock> headline_block(const SectionInput& in, const std::vector<ReportSection>& sections) {
  const auto [run_id, rows] = latest_run(in.read<HeadlineRunRow>());
  if (run_id.empty()) return std::nullopt;
  const HeadlineRunRow& run = rows.back();
  // The step that wrote run `id` (nullptr: an earlier run, not quoted).
  const auto step_of = [&](const std::string& id) -> const HeadlineStep* {
    for (const HeadlineStep& step : run.steps)
      if (std::find(step.runs.begin(), step.runs.end(), id) != step.runs.end()) return &step;
    return nullptr;
  };
  double wall = 0;
  std::ostringstream t;
  t << "| what | figure (medians; ranges across rounds) | command | run |\n|---|---|---|---|\n";
  // In the order the run's steps ran, each step's rows in the sections' order.
  std::vector<std::pair<const HeadlineStep*, const HeadlineRow*>> quoted;
  for (const ReportSection& section : sections)
    for (const HeadlineRow& row : section.headline)
      if (const HeadlineStep* step = step_of(row.run_id)) quoted.emplace_back(step, &row);
  std::stable_sort(quoted.begin(), quoted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [step, row] : quoted)
    t << "| " << cell(row->what) << " | " << cell(row->figure) << " | `" << cell(step->command) << "` | `"
      << row->run_id << "` |\n";
  std::vector<std::string> forms;
  for (const HeadlineStep& step : run.steps) {
    wall += step.wall_s;
    if (step.status != "ok")
      t << "| step `" << step.name << "` | **" << cell(step.status) << "**: " << cell(step.error) << " | `"
        << cell(step.command) << "` | |\n";
    forms.push_back(fmt::format("{} {:.1f} min{}", step.name, step.wall_s / 60,
                                step.form.empty() || step.form == "full" ? "" : " (" + step.form + ")"));
  }
  std::string steps;
  for (const auto& f : forms) steps += (steps.empty() ? "" : "; ") + f;
  ReportBlock block;
  // A run capped to AVX2 (make headline CPU=avx2) fills its own block beside the native one.
  block.marker = run.header.env.isa == "avx2" ? "headline_avx2" : "headline";
  const Environment& env = run.header.env;
  block.intro = fmt::format(
      "from one `{}` run, `{}`, {}, commit {}, on {} ({} cores, {} threads a process); every "
      "step in {:.0f} minutes: {}",
      run.command, run_id, run.date, run.commit, env.device.name.empty() ? "?" : env.device.name, env.cores,
      env.threads, wall / 60, steps);
  block.table = t.str();
  return block;
}

}  // namespace trainlab::bench
