// The ladder's report section: its table with skipped and failed rows, each rung's repeats, a bar
// chart of samples/s per rung with its min-max, the step breakdown before and after the rung that
// removed the largest stall, and the verdicts in units of the noise floor.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "studies/ladder/ladder.h"

namespace trainlab::bench {

namespace {

// A horizontal bar per rung: the median, a whisker for min-max; skipped and failed rungs get a
// note instead of a bar.
std::string rungs_figure(const std::vector<LadderRungRow>& rows, const std::string& title) {
  chart::BarChart bars;
  for (const auto& row : rows) {
    chart::BarRow bar;
    bar.label = row.arm.rung;
    if (!row.header.ok()) {
      bar.note = row.header.status == "skipped" ? "skipped" : "failed";
    } else {
      bar.value = row.stats->median;
      bar.lo = row.stats->min;
      bar.hi = row.stats->max;
      bar.colour = row.arm.calibration ? chart::kGrey : chart::kBlue;
      bar.value_text = fmt::format("{:.0f}", row.stats->median);
    }
    bars.rows.push_back(bar);
  }
  return chart::render({title, {bars}, {"samples/s (bar: median of repeats; whisker: min-max)"}});
}

// An interrupted run has repeat rows but no rung row for some rungs: those are rebuilt from their
// repeats, marked incomplete. Returns the rung rows in ladder order, and whether any was rebuilt.
std::pair<std::vector<LadderRungRow>, bool> rungs_of(std::vector<LadderRungRow> rungs,
                                                     const std::vector<LadderRepeatRow>& repeats) {
  std::map<std::string, std::vector<const LadderRepeatRow*>> by_rung;
  for (const auto& r : repeats) by_rung[r.arm.rung].push_back(&r);
  bool interrupted = false;
  for (const auto& [name, reps] : by_rung) {
    const std::string& rung = name;
    if (std::any_of(rungs.begin(), rungs.end(), [&](const LadderRungRow& r) { return r.arm.rung == rung; })) continue;
    interrupted = true;
    LadderRungRow row;
    row.header = reps.front()->header;
    row.header.kind = LadderRungRow::kKind;
    row.arm = reps.front()->arm;
    for (const LadderRepeatRow* r : reps)
      if (r->header.ok()) row.repeats.push_back(*r->value);
    if (row.repeats.empty()) {
      row.header.status = "failed";
      row.arm.error = reps.back()->arm.error.empty() ? "interrupted before a repeat finished" : reps.back()->arm.error;
    } else {
      row.header.status = "ok";
      row.stats = summarize(row.repeats);
      row.incomplete = true;
    }
    rungs.push_back(row);
  }
  std::stable_sort(rungs.begin(), rungs.end(),
                   [](const LadderRungRow& a, const LadderRungRow& b) { return a.arm.rung_index < b.arm.rung_index; });
  return {rungs, interrupted};
}

// Each rung's change and repeats, then each rung's note.
std::string repeats_table(const std::vector<LadderRungRow>& rungs) {
  std::ostringstream md;
  md << "| rung | changed | measured steps (all repeats) | warm-up excluded (each repeat) | repeats (samples/s) |\n"
        "|---|---|---|---|---|\n";
  for (const auto& row : rungs) {
    const std::string changed =
        row.arm.changed ? fmt::format("{}: {} -> {}", row.arm.changed->knob, row.arm.changed->from, row.arm.changed->to)
                        : "-";
    std::string values;
    for (double v : row.repeats) values += (values.empty() ? "" : ", ") + fmt::format("{:.1f}", v);
    md << fmt::format("| {}{} | {} | {} | {} | {} |\n", row.arm.rung, row.incomplete ? " (incomplete)" : "", changed,
                      row.arm.measured_steps, row.arm.warmup_steps_excluded,
                      values.empty() ? row.header.status : values);
  }
  for (const auto& row : rungs)
    if (!row.arm.note.empty()) md << fmt::format("\n- `{}`: {}", row.arm.rung, row.arm.note);
  return md.str();
}

// The rung that removed the largest stall: the biggest drop in data-wait per step, with the step
// breakdown before and after it.
std::string largest_stall(const std::vector<LadderRungRow>& rungs) {
  const LadderRungRow* before = nullptr;
  const LadderRungRow* after = nullptr;
  double drop = 0;
  const LadderRungRow* prev = nullptr;
  for (const auto& row : rungs) {
    if (!row.header.ok() || row.arm.calibration) continue;
    if (prev) {
      const double d = prev->arm.breakdown->data_wait.seconds_per_step - row.arm.breakdown->data_wait.seconds_per_step;
      if (d > drop) {
        drop = d;
        before = prev;
        after = &row;
      }
    }
    prev = &row;
  }
  std::ostringstream md;
  md << "\n## Where the step goes\n\n";
  if (before == nullptr) {
    md << "No rung reduced the data-wait time per step.\n";
    return md.str();
  }
  md << fmt::format("The largest stall removed: data-wait fell by {:.2f} ms per step from `{}` to `{}`.\n\n",
                    1000 * drop, before->arm.rung, after->arm.rung);
  md << "| rung | data_wait | forward | backward | optimizer |\n|---|---|---|---|---|\n";
  for (const LadderRungRow* row : {before, after}) {
    const Breakdown& b = *row->arm.breakdown;
    md << "| " << row->arm.rung;
    for (const PhaseShare* phase : {&b.data_wait, &b.forward, &b.backward, &b.optimizer})
      md << fmt::format(" | {:.1f}% ({:.2f} ms)", 100 * phase->share, 1000 * phase->seconds_per_step);
    md << " |\n";
  }
  return md.str();
}

// Each rung against the previous one, sorted by the effect in units of the noise floor (largest
// first; without a floor, by the effect itself); rungs that did not run follow, as they are.
std::string verdicts(const std::vector<LadderRungRow>& rungs) {
  const std::optional<Calibration> calibration = ladder_calibration(rungs);
  struct Finding {
    double order;
    std::string line;
  };
  std::vector<Finding> findings;
  std::vector<std::string> not_run;
  std::optional<Summary> previous;
  std::string previous_name;
  for (const auto& row : rungs) {
    if (row.arm.calibration) continue;
    if (!row.header.ok()) {
      not_run.push_back(fmt::format("- `{}`: {} ({})\n", row.arm.rung, row.header.status,
                                    row.arm.reason.empty() ? row.arm.error : row.arm.reason));
      continue;
    }
    const Summary& s = *row.stats;
    if (previous) {
      const Verdict v = verdict(s, *previous, calibration);
      const double effect = effect_percent(s, *previous);
      const char* meaning = v == Verdict::no_conclusion     ? " (the calibration arms failed their own check)"
                            : v == Verdict::separable       ? " (the repeat ranges do not overlap)"
                            : v == Verdict::too_few_repeats ? ": no verdict from a single repeat"
                                                            : " (the repeat ranges overlap)";
      const double m = calibration ? floor_multiple(effect, calibration->noise_floor_percent) : std::abs(effect);
      findings.push_back({std::isnan(m) ? 0.0 : m, fmt::format("- `{}` vs `{}`: {}{}\n", row.arm.rung, previous_name,
                                                               effect_words(effect, calibration, v), meaning)});
    }
    previous = s;
    previous_name = row.arm.rung;
  }
  std::stable_sort(findings.begin(), findings.end(),
                   [](const Finding& a, const Finding& b) { return a.order > b.order; });
  std::ostringstream md;
  md << "\n## Verdicts\n\n";
  md << (calibration ? fmt::format("Sorted by the effect in units of the noise floor ({:.1f}%, the calibration arms' "
                                   "gap), largest first.\n\n",
                                   calibration->noise_floor_percent)
                     : std::string("No noise floor was measured (run with --calibrate): sorted by the effect.\n\n"));
  for (const auto& f : findings) md << f.line;
  for (const auto& line : not_run) md << line;
  return md.str();
}

bool on_real_data(const LadderArmFields& arm) { return arm.data && !arm.data->synthetic(); }

// The latest ladder run on SyntheticImages (`real` false) or on a data set on disk (`real` true):
// the largest run id (they begin with their UTC start time) among its rows; "" when there is none.
std::string latest_ladder_run(const std::vector<LadderRungRow>& rungs, const std::vector<LadderRepeatRow>& repeats,
                              bool real) {
  std::string latest;
  for (const auto& r : rungs)
    if (on_real_data(r.arm) == real) latest = std::max(latest, r.header.run_id);
  for (const auto& r : repeats)
    if (on_real_data(r.arm) == real) latest = std::max(latest, r.header.run_id);
  return latest;
}

// One ladder run's rows: its rungs in ladder order (an interrupted run's rebuilt from its repeats).
struct LadderRunRows {
  std::string run_id;
  std::vector<LadderRungRow> rungs;
  std::size_t measurements = 0;
  bool interrupted = false;
};
LadderRunRows rows_of_run(const std::vector<LadderRungRow>& all_rungs, const std::vector<LadderRepeatRow>& all_repeats,
                          const std::string& run_id) {
  std::vector<LadderRungRow> rung_rows;
  std::vector<LadderRepeatRow> repeats;
  for (const auto& r : all_rungs)
    if (r.header.run_id == run_id) rung_rows.push_back(r);
  for (const auto& r : all_repeats)
    if (r.header.run_id == run_id) repeats.push_back(r);
  LadderRunRows run;
  run.run_id = run_id;
  run.measurements = repeats.size();
  if (rung_rows.empty() && repeats.empty()) return run;
  std::tie(run.rungs, run.interrupted) = rungs_of(std::move(rung_rows), repeats);
  return run;
}

std::string data_words(const LadderRungRow& row) {
  return row.arm.data ? row.arm.data->label() : std::string("SyntheticImages");
}

// The same rungs on SyntheticImages and on a data set, side by side: samples/s and data-wait.
std::string side_by_side(const LadderRunRows& synthetic, const LadderRunRows& real) {
  std::ostringstream md;
  md << fmt::format("| rung | samples/s, SyntheticImages (`{}`) | data-wait | samples/s, {} (`{}`) | data-wait |\n",
                    synthetic.run_id, real.rungs.front().arm.data->name, real.run_id)
     << "|---|---|---|---|---|\n";
  const auto cells = [](const LadderRungRow* row) -> std::string {
    if (row == nullptr) return "- | -";
    if (!row->header.ok()) return row->header.status + " | -";
    return fmt::format("{:.1f} ({:.1f}-{:.1f}) | {:.1f}% ({:.2f} ms)", row->stats->median, row->stats->min,
                       row->stats->max, 100 * row->arm.breakdown->data_wait.share,
                       1000 * row->arm.breakdown->data_wait.seconds_per_step);
  };
  for (const auto& r : real.rungs) {
    if (r.arm.calibration) continue;
    const LadderRungRow* other = nullptr;
    for (const auto& s : synthetic.rungs)
      if (s.arm.rung == r.arm.rung) other = &s;
    md << fmt::format("| {} | {} | {} |\n", r.arm.rung, cells(other), cells(&r));
  }
  return md.str();
}

// The ladder on a data set on disk: its table, the data wait beside the SyntheticImages run's, its
// figure.
void real_data_part(const LadderRunRows& real, const LadderRunRows* synthetic, ReportSection& section,
                    std::ostringstream& md) {
  const LadderRungRow& first = real.rungs.front();
  const std::string ladder_name = first.arm.ladder.empty() ? "?" : first.arm.ladder;
  const std::string figure_name = "figures/ladder_" + ladder_name + "_" + real.run_id + ".svg";
  md << fmt::format(
      "\n## The ladder on real data\n\nRun `{}` on {}: the same rungs with every sample read from the data set's "
      "files and decoded as it is read (`bench_ladder --data DIR`; SyntheticImages' decode_cost stand-in dropped), "
      "so the data-wait column is the real decode.\n\n",
      real.run_id, data_words(first));
  md << ladder_table(real.rungs, true) << "\n";
  if (synthetic != nullptr && !synthetic->rungs.empty()) {
    md << "Beside the SyntheticImages run (medians, min-max; data-wait as a share of the step and per step):\n\n"
       << side_by_side(*synthetic, real) << "\n";
    ReportBlock block;
    block.marker = "ladder-real";
    block.intro = fmt::format("from run `{}` ({}) beside SyntheticImages run `{}`", real.run_id, data_words(first),
                              synthetic->run_id);
    block.table = side_by_side(*synthetic, real);
    section.more_blocks.push_back(block);
  }
  md << "![samples/s per rung on real data](" << figure_name << ")\n";
  section.figures.emplace_back(figure_name,
                               rungs_figure(real.rungs, "ladder '" + ladder_name + "' on " + first.arm.data->name +
                                                            ": samples/s per rung (run " + real.run_id + ")"));
}

// The README's headline row of a ladder run: its largest effect in units of the noise floor, with
// both sides' samples/s and the verdict, and every rung the accuracy guard marked.
HeadlineRow ladder_headline(const std::vector<LadderRungRow>& rungs, const std::string& run_id) {
  const std::optional<Calibration> calibration = ladder_calibration(rungs);
  const LadderRungRow* previous = nullptr;
  std::string largest, breaks;
  double largest_multiple = -1;
  std::size_t repeats = 0;
  for (const auto& row : rungs) {
    if (row.arm.calibration || !row.header.ok()) continue;
    repeats = std::max(repeats, row.repeats.size());
    if (row.arm.breaks_training) breaks += (breaks.empty() ? "`" : ", `") + row.arm.rung + "`";
    if (previous != nullptr) {
      const double effect = effect_percent(*row.stats, *previous->stats);
      const double m = calibration ? floor_multiple(effect, calibration->noise_floor_percent) : std::abs(effect);
      if (!std::isnan(m) && m > largest_multiple && !row.arm.breaks_training) {
        largest_multiple = m;
        largest = fmt::format("`{}` over `{}`: {} ({:.1f} against {:.1f} samples/s)", row.arm.rung, previous->arm.rung,
                              effect_words(effect, calibration, verdict(*row.stats, *previous->stats, calibration)),
                              row.stats->median, previous->stats->median);
      }
    }
    if (!row.arm.breaks_training) previous = &row;
  }
  const LadderRungRow& first = rungs.front();
  return {fmt::format("the optimisation ladder `{}` ({} data), its largest effect among the rungs that still train",
                      first.arm.ladder.empty() ? "?" : first.arm.ladder, first.arm.data ? first.arm.data->name : "?"),
          (largest.empty() ? std::string("no rung measured against another") : largest) +
              (calibration ? fmt::format("; noise floor {:.1f}%", calibration->noise_floor_percent)
                           : std::string("; no noise floor measured")) +
              fmt::format("; {} repeats; breaks training: {}", repeats, breaks.empty() ? std::string("none") : breaks),
          run_id};
}

// The ladder's section: the latest run on SyntheticImages (else the latest at all), then the latest
// run on a data set on disk beside it when there is one; a run asked for (bench_report --run) takes
// the place of the latest of its kind. Nothing when the ledger holds no ladder run.
std::optional<ReportSection> ladder_section(const SectionInput& in) {
  const std::vector<LadderRungRow> all_rungs = in.read<LadderRungRow>();
  const std::vector<LadderRepeatRow> all_repeats = in.read<LadderRepeatRow>();
  std::string synthetic_id = latest_ladder_run(all_rungs, all_repeats, false);
  std::string real_id = latest_ladder_run(all_rungs, all_repeats, true);
  if (!in.run_id.empty()) {  // the run asked for takes the place of the latest of its kind
    const LadderRunRows asked = rows_of_run(all_rungs, all_repeats, in.run_id);
    TL_CHECK(!asked.rungs.empty() || asked.measurements > 0,
             "report: run '" + in.run_id + "' is not in '" + in.ledger.path + "'");
    (!asked.rungs.empty() && on_real_data(asked.rungs.front().arm) ? real_id : synthetic_id) = in.run_id;
  }
  const std::string run_id = synthetic_id.empty() ? real_id : synthetic_id;
  if (run_id.empty()) return std::nullopt;
  const LadderRunRows main_run = rows_of_run(all_rungs, all_repeats, run_id);
  if (main_run.rungs.empty()) return std::nullopt;  // every row of it was skipped (warnings say why)
  const std::vector<LadderRungRow>& rungs = main_run.rungs;
  const LadderRungRow& first = rungs.front();
  const std::string ladder_name = first.arm.ladder.empty() ? "?" : first.arm.ladder;
  const std::string figure_name = "figures/ladder_" + ladder_name + "_" + run_id + ".svg";

  std::ostringstream md;
  if (main_run.interrupted)
    md << "- this run was interrupted: rungs marked incomplete are rebuilt from their measurement rows\n";
  md << fmt::format("\n## The ladder\n\nRun `{}` ({} rungs; {} measurement rows; data: {}).\n\n", run_id, rungs.size(),
                    main_run.measurements, data_words(first));
  md << "Each rung changes exactly one knob against the previous rung; repeats are interleaved across rungs (A B C "
        "... A B C ...); warm-up steps are excluded from every measurement. `separable?` is `yes` when the repeat "
        "ranges of a rung and the previous rung do not overlap.\n\n";
  md << ladder_table(rungs, true) << "\n";
  md << repeats_table(rungs);
  md << "\n\n![samples/s per rung](" << figure_name << ")\n";
  md << largest_stall(rungs) << verdicts(rungs);

  ReportSection section;
  section.measured_on = first.header.env;
  section.figures.emplace_back(
      figure_name, rungs_figure(rungs, "ladder '" + ladder_name + "': samples/s per rung (run " + run_id + ")"));
  if (!real_id.empty() && real_id != run_id) {
    const LadderRunRows real = rows_of_run(all_rungs, all_repeats, real_id);
    if (!real.rungs.empty()) real_data_part(real, &main_run, section, md);
  }
  section.markdown = md.str();
  section.marker = "ladder";
  const Environment& env = first.header.env;
  section.readme_intro = fmt::format("from run `{}` on {} ({}, {} threads; engine {})", run_id, env.device.name,
                                     env.backend.empty() ? "?" : env.backend, env.threads, env.engine());
  section.readme_table = ladder_table(rungs, true);
  section.headline = {ladder_headline(rungs, run_id)};
  return section;
}

}  // namespace

SectionDef ladder_report_section() { return {"ladder", ladder_section}; }

}  // namespace trainlab::bench
