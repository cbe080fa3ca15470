#include "bench/report.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "backends/error.h"
#include "bench/cost_study.h"
#include "bench/dataset_study.h"
#include "bench/ladder.h"
#include "bench/memory_study.h"
#include "bench/pinning_study.h"
#include "bench/render.h"
#include "bench/report_families.h"
#include "engine/fileio.h"

namespace trainlab::bench {

namespace {

// A horizontal bar per rung: the median, a whisker for min-max; skipped and failed rungs get a
// label instead of a bar.
std::string bar_chart_svg(const std::vector<json>& rows, const std::string& title) {
  double top = 0;
  for (const auto& row : rows) {
    if (row.at("status") == "ok") top = std::max(top, row.at("stats").at("max").get<double>());
  }
  top = top > 0 ? top * 1.08 : 1.0;
  const int left = 200, width = 560, bar = 22, gap = 10, head = 40;
  const int height = head + static_cast<int>(rows.size()) * (bar + gap) + 40;
  std::ostringstream svg;
  svg << fmt::format(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
             left + width + 120, height)
      << "\n";
  svg << fmt::format(R"(<text x="10" y="22" font-size="14" font-weight="bold">{}</text>)", svg_text(title)) << "\n";
  int y = head;
  for (const auto& row : rows) {
    const std::string name = row.at("rung");
    svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", left - 8, y + bar - 6, svg_text(name))
        << "\n";
    if (row.at("status") == "ok") {
      const auto& s = row.at("stats");
      const double median = s.at("median"), lo = s.at("min"), hi = s.at("max");
      const auto x = [&](double v) { return left + v / top * width; };
      const char* colour = row.value("calibration", false) ? "#9aa5b1" : "#3a7ca5";
      svg << fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"/>)", left, y, x(median) - left,
                         bar, colour)
          << "\n";
      svg << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="black"/>)", x(lo), y + bar / 2, x(hi),
                         y + bar / 2)
          << "\n";
      for (double v : {lo, hi}) {
        svg << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="black"/>)", x(v), y + 4, x(v),
                           y + bar - 4)
            << "\n";
      }
      svg << fmt::format(R"(<text x="{:.1f}" y="{}">{:.0f}</text>)", x(hi) + 6, y + bar - 6, median) << "\n";
    } else {
      const std::string why = row.at("status") == "skipped" ? "skipped" : "failed";
      svg << fmt::format(R"(<text x="{}" y="{}" fill="#b03a2e">{}</text>)", left + 6, y + bar - 6, why) << "\n";
    }
    y += bar + gap;
  }
  svg << fmt::format(R"(<text x="{}" y="{}" fill="#555">samples/s (bar: median of repeats; whisker: min-max)</text>)",
                     left, y + 16)
      << "\n</svg>\n";
  return svg.str();
}

using Section = ReportSection;

std::pair<std::string, std::vector<json>> latest_run(const Ledger::Loaded& loaded, const std::string& kind) {
  return latest_run_of(loaded.rows, kind);
}

std::optional<Section> cost_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run(loaded, "cost_repeat");
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
  Section section;
  section.first_row = *first;
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

std::optional<Section> pinning_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run(loaded, "pinning_repeat");
  if (run_id.empty()) return std::nullopt;
  const auto analyses = pinning_from_rows(rows);
  TL_CHECK(!analyses.empty(), "report: pinning run '" + run_id + "' has no successful repeat");
  Section section;
  section.first_row = rows.front();
  const std::string figure = "figures/pinning_" + run_id + ".svg";
  std::ostringstream md, readme;
  md << fmt::format(
      "\n## CPU pinning\n\nRun `{}` of `studies/pinning` on {}: each repeat of each arm its own process, repeats "
      "interleaved; affinity read back from every thread during the measured steps. default is measured twice "
      "(calibration A and B): their gap is the noise floor.\n",
      run_id, measured_on(rows.front()));
  for (const auto& a : analyses) {
    md << "\n### " << a.condition << "\n\n" << pinning_table(a, true) << "\n" << pinning_findings(a);
    readme << "\n" << a.condition << ":\n\n" << pinning_table(a, true) << "\n" << pinning_findings(a);
  }
  if (analyses.size() > 1) {
    md << "\n### Side by side\n\n" << pinning_comparison(analyses, true);
    readme << "\n" << pinning_comparison(analyses, true);
  }
  md << "\n![the arms, their ranges and the noise floor](" << figure << ")\n";
  section.markdown = md.str();
  section.figures.emplace_back(figure, pinning_svg(analyses, "CPU pinning (run " + run_id + ")"));
  section.marker = "pinning";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(rows.front());
  section.readme_table = readme.str();
  return section;
}

std::optional<Section> memory_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run(loaded, "memory_repeat");
  if (run_id.empty()) return std::nullopt;
  const MemoryAnalysis analysis = analyse_memory(memory_arms_from_rows(rows));
  const json& first = rows.front();
  const json& config = first.at("config");
  Section section;
  section.first_row = first;
  const std::string figure = "figures/memory_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## Memory: batch x recompute x ZeRO\n\nRun `{}` of `studies/memory` on {}: DDP over {} ranks, {}, optimizer "
      "{}; each arm {} steps of which {} warm-up excluded, {} repeats interleaved. Memory: tensor bytes by category "
      "(the engine's accounting), the largest rank's; step: the slowest rank's median measured step.\n\n",
      run_id, measured_on(first), config.value("world", 0), config.value("dtype", std::string("?")),
      config.value("optimizer", std::string("?")), config.value("steps", 0), config.value("warmup_steps_excluded", 0),
      analysis.arms.empty() ? 0 : analysis.arms.front().step_ms.size());
  md << memory_table(analysis, true) << "\n" << memory_findings(analysis);
  md << "\n![peak bytes by category, and peak against step time](" << figure << ")\n";
  section.markdown = md.str();
  section.figures.emplace_back(figure,
                               memory_svg(analysis, "Memory per rank: batch x recompute x ZeRO (run " + run_id + ")"));
  section.marker = "memory";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(first);
  section.readme_table = memory_table(analysis, true) + "\n" + memory_findings(analysis);
  return section;
}

std::optional<Section> dataset_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run(loaded, "dataset_study_repeat");
  if (run_id.empty()) return std::nullopt;
  const json& first = rows.front();
  const auto arms = dataset_arms_from_rows(rows);
  Section section;
  section.first_row = first;
  const std::string intro = fmt::format(
      "{} samples of SyntheticImages at {} px, {} loader workers, batch {}, {} page cache; every arm measured in "
      "each of {} rounds (the loader alone, then SmallCNN trained on it)",
      int_at(first, "samples", 0), int_at(first, "image_size", 0), int_at(first, "workers", 0),
      int_at(first, "batch", 0), first.value("cold", true) ? "cold" : "warm",
      arms.empty() ? 0 : arms.front().loader.size());
  section.markdown =
      fmt::format("\n## Data on disk: the re-export regression\n\nRun `{}` of `studies/dataset` on {}: {}.\n\n", run_id,
                  measured_on(first), intro) +
      dataset_report(arms);
  section.marker = "dataset";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(first) + ": " + intro;
  section.readme_table = dataset_report(arms);
  return section;
}

// The ladder's section (its run: options.run_id, else the ledger's latest), or nothing when the
// ledger holds no ladder run.
std::optional<Section> ladder_section(const ReportOptions& options, const Ledger::Loaded& loaded) {
  std::string run_id = options.run_id;
  if (run_id.empty()) {
    for (const auto& row : loaded.rows) {
      if (row.value("kind", "") == "rung" || row.value("kind", "") == "repeat") run_id = row.value("run_id", "");
    }
  }
  if (run_id.empty()) return std::nullopt;
  std::vector<json> rungs, repeats;
  for (const auto& row : loaded.rows) {
    if (row.value("run_id", "") != run_id) continue;
    if (row.value("kind", "") == "rung") rungs.push_back(row);
    if (row.value("kind", "") == "repeat") repeats.push_back(row);
  }
  TL_CHECK(!rungs.empty() || !repeats.empty(), "report: run '" + run_id + "' is not in '" + options.ledger_path + "'");
  // An interrupted run has repeat rows but no rung row for some rungs: rebuild those, marked.
  std::map<std::string, std::vector<json>> by_rung;
  for (const auto& r : repeats) by_rung[r.at("rung")].push_back(r);
  bool interrupted = false;
  for (const auto& [rung_name, reps] : by_rung) {
    const std::string& name = rung_name;  // (a lambda may not capture a structured binding before C++20 in clang 14)
    const bool summarised =
        std::any_of(rungs.begin(), rungs.end(), [&](const json& r) { return r.at("rung") == name; });
    if (summarised) continue;
    interrupted = true;
    json row = reps.front();
    row["kind"] = "rung";
    std::vector<double> values;
    for (const auto& r : reps) {
      if (r.value("status", "") == "ok") values.push_back(r.at("value"));
    }
    if (values.empty()) {
      row["status"] = "failed";
      row["error"] = reps.back().value("error", std::string("interrupted before a repeat finished"));
    } else {
      const Summary s = summarize(values);
      row["status"] = "ok";
      row["repeats"] = values;
      row["stats"] = {{"median", s.median}, {"mean", s.mean}, {"std", s.std},
                      {"min", s.min},       {"max", s.max},   {"n", s.n}};
      row["breakdown"] = reps.front().at("breakdown");
      row["incomplete"] = true;
    }
    rungs.push_back(row);
  }
  std::stable_sort(rungs.begin(), rungs.end(), [](const json& a, const json& b) {
    return a.at("rung_index").get<std::size_t>() < b.at("rung_index").get<std::size_t>();
  });

  const json& first = rungs.front();
  const std::string ladder_name = first.value("ladder", std::string("?"));
  const std::string figure_name = "figures/ladder_" + ladder_name + "_" + run_id + ".svg";

  std::ostringstream md;
  if (interrupted)
    md << "- this run was interrupted: rungs marked incomplete are rebuilt from their measurement rows\n";
  md << fmt::format("\n## The ladder\n\nRun `{}` ({} rungs; {} measurement rows).\n\n", run_id, rungs.size(),
                    repeats.size());
  md << "Each rung changes exactly one knob against the previous rung; repeats are interleaved across rungs (A B C "
        "... A B C ...); warm-up steps are excluded from every measurement. `separable?` is `yes` when the repeat "
        "ranges of a rung and the previous rung do not overlap.\n\n";
  md << ladder_table(rungs, true) << "\n";

  md << "| rung | changed | measured steps (all repeats) | warm-up excluded (each repeat) | repeats (samples/s) |\n"
        "|---|---|---|---|---|\n";
  for (const auto& row : rungs) {
    std::string changed = "-";
    if (row.contains("changed") && !row["changed"].is_null()) {
      changed = fmt::format("{}: {} -> {}", row["changed"]["knob"].get<std::string>(),
                            row["changed"]["from"].get<std::string>(), row["changed"]["to"].get<std::string>());
    }
    std::string values;
    if (row.contains("repeats")) {
      for (double v : row["repeats"].get<std::vector<double>>())
        values += (values.empty() ? "" : ", ") + fmt::format("{:.1f}", v);
    }
    md << fmt::format("| {}{} | {} | {} | {} | {} |\n", row.at("rung").get<std::string>(),
                      row.value("incomplete", false) ? " (incomplete)" : "", changed, row.value("measured_steps", 0),
                      row.value("warmup_steps_excluded", 0),
                      values.empty() ? row.value("status", std::string()) : values);
  }
  for (const auto& row : rungs) {
    if (row.contains("note"))
      md << fmt::format("\n- `{}`: {}", row.at("rung").get<std::string>(), row["note"].get<std::string>());
  }
  md << "\n\n![samples/s per rung](" << figure_name << ")\n";

  // The rung that removed the largest stall: the biggest drop in data-wait per step.
  std::optional<std::pair<json, json>> biggest;
  double drop = 0;
  const json* prev = nullptr;
  for (const auto& row : rungs) {
    if (row.at("status") != "ok" || row.value("calibration", false)) continue;
    if (prev) {
      const double before = (*prev).at("breakdown").at("data_wait").at("seconds_per_step");
      const double after = row.at("breakdown").at("data_wait").at("seconds_per_step");
      if (before - after > drop) {
        drop = before - after;
        biggest = std::make_pair(*prev, row);
      }
    }
    prev = &row;
  }
  md << "\n## Where the step goes\n\n";
  if (biggest) {
    md << fmt::format("The largest stall removed: data-wait fell by {:.2f} ms per step from `{}` to `{}`.\n\n",
                      1000 * drop, biggest->first.at("rung").get<std::string>(),
                      biggest->second.at("rung").get<std::string>());
    md << "| rung | data_wait | forward | backward | optimizer |\n|---|---|---|---|---|\n";
    for (const json* row : {&biggest->first, &biggest->second}) {
      md << "| " << row->at("rung").get<std::string>();
      for (const char* phase : {"data_wait", "forward", "backward", "optimizer"}) {
        const auto& b = row->at("breakdown").at(phase);
        md << fmt::format(" | {:.1f}% ({:.2f} ms)", 100 * b.at("share").get<double>(),
                          1000 * b.at("seconds_per_step").get<double>());
      }
      md << " |\n";
    }
  } else {
    md << "No rung reduced the data-wait time per step.\n";
  }
  md << "\n## Verdicts\n\n";
  std::optional<Summary> previous;
  std::string previous_name;
  std::vector<double> arm_a, arm_b;
  for (const auto& row : rungs) {
    if (row.value("calibration", false) && row.at("status") == "ok") {
      (row.at("rung") == "calibration A" ? arm_a : arm_b) = row.at("repeats").get<std::vector<double>>();
    }
  }
  std::optional<Calibration> calibration;
  if (!arm_a.empty() && !arm_b.empty()) calibration = calibrate(arm_a, arm_b);
  // Each rung against the previous one, sorted by the effect in units of the noise floor (largest
  // first; without a floor, by the effect itself); rungs that did not run follow, as they are.
  struct Finding {
    double order;
    std::string line;
  };
  std::vector<Finding> findings;
  std::vector<std::string> not_run;
  for (const auto& row : rungs) {
    if (row.value("calibration", false)) continue;
    const std::string name = row.at("rung");
    if (row.at("status") != "ok") {
      not_run.push_back(fmt::format("- `{}`: {} ({})\n", name, row.at("status").get<std::string>(),
                                    row.value("reason", row.value("error", std::string()))));
      continue;
    }
    const Summary s = stats_from(row.at("stats"));
    if (previous) {
      const Verdict v = verdict(s, *previous, calibration);
      const double effect = effect_percent(s, *previous);
      const char* meaning = v == Verdict::no_conclusion     ? " (the calibration arms failed their own check)"
                            : v == Verdict::separable       ? " (the repeat ranges do not overlap)"
                            : v == Verdict::too_few_repeats ? ": no verdict from a single repeat"
                                                            : " (the repeat ranges overlap)";
      const double m = calibration ? floor_multiple(effect, calibration->noise_floor_percent) : std::abs(effect);
      findings.push_back({std::isnan(m) ? 0.0 : m, fmt::format("- `{}` vs `{}`: {}{}\n", name, previous_name,
                                                               effect_words(effect, calibration, v), meaning)});
    }
    previous = s;
    previous_name = name;
  }
  std::stable_sort(findings.begin(), findings.end(),
                   [](const Finding& a, const Finding& b) { return a.order > b.order; });
  md << (calibration ? fmt::format("Sorted by the effect in units of the noise floor ({:.1f}%, the calibration arms' "
                                   "gap), largest first.\n\n",
                                   calibration->noise_floor_percent)
                     : std::string("No noise floor was measured (run with --calibrate): sorted by the effect.\n\n"));
  for (const auto& f : findings) md << f.line;
  for (const auto& line : not_run) md << line;
  Section section;
  section.first_row = first;
  section.markdown = md.str();
  section.figures.emplace_back(
      figure_name, bar_chart_svg(rungs, "ladder '" + ladder_name + "': samples/s per rung (run " + run_id + ")"));
  section.marker = "ladder";
  section.readme_intro =
      fmt::format("from run `{}` on {} ({}, {} threads; engine {})", run_id,
                  first.at("device").at("name").get<std::string>(), first.value("backend", std::string("?")),
                  first.value("threads", 0), first.at("versions").value("engine", std::string("?")));
  section.readme_table = ladder_table(rungs, true);
  return section;
}

// The section's figures, linked from the README by their path relative to it.
std::string figure_links(const Section& s, const ReportOptions& options) {
  std::string out;
  const std::filesystem::path readme_dir = std::filesystem::path(options.readme_path).parent_path();
  const std::filesystem::path out_dir = std::filesystem::path(options.out_path).parent_path();
  for (const auto& [name, svg] : s.figures) {
    const auto relative = (out_dir / name).lexically_relative(readme_dir.empty() ? "." : readme_dir);
    out += fmt::format("\nFigure: [{}]({})\n", name, relative.generic_string());
  }
  return out;
}

}  // namespace

namespace {
// The README with each section's block between its markers replaced; throws (writing nothing)
// when a pair is broken or none of the sections has markers there.
std::string readme_with_sections(const ReportOptions& options, const std::vector<Section>& sections) {
  const auto bytes = read_file(options.readme_path);
  std::string readme(bytes.begin(), bytes.end());
  bool replaced = false;
  for (const auto& s : sections) {
    const std::string begin = "<!-- " + s.marker + ":begin -->", end = "<!-- " + s.marker + ":end -->";
    const auto b = readme.find(begin), e = readme.find(end);
    if (b == std::string::npos && e == std::string::npos) continue;
    TL_CHECK(b != std::string::npos && e != std::string::npos && b < e,
             "report: '" + options.readme_path + "' has a broken " + begin + " ... " + end + " pair");
    const std::string section =
        begin + "\n" +
        fmt::format("Generated by `bench_report --ledger {} --out {} --readme {}` {}. The full report: `{}`.\n\n",
                    options.ledger_path, options.out_path, options.readme_path, s.readme_intro, options.out_path) +
        s.readme_table + figure_links(s, options) + end;
    readme = readme.substr(0, b) + section + readme.substr(e + end.size());
    replaced = true;
  }
  TL_CHECK(replaced, "report: '" + options.readme_path +
                         "' has none of the <!-- ladder|cost|pinning|memory|dataset|torch_ratios|allreduce|buckets|"
                         "scaling:begin --> ... <!-- ...:end --> markers for this ledger's runs");
  return readme;
}
}  // namespace

std::string write_report(const ReportOptions& options) {
  check_output_file(options.out_path, "report --out");
  check_output_is_not_input(options.out_path, "report --out", {{options.ledger_path, "--ledger"}});
  if (!options.readme_path.empty()) {
    check_output_file(options.readme_path, "report --readme");
    check_output_is_not_input(options.readme_path, "report --readme",
                              {{options.ledger_path, "--ledger"}, {options.out_path, "--out"}});
  }
  const Ledger ledger(options.ledger_path);
  const Ledger::Loaded loaded = ledger.load();
  TL_CHECK(!loaded.rows.empty(), "report: ledger '" + options.ledger_path +
                                     "' has no rows (run bench_ladder, cost_to_accuracy or pinning first)");
  std::vector<Section> sections;
  // row_problem has checked the fields each section reads; a value it cannot check (a type inside
  // a field the section reads loosely) is still named, never a crash.
  auto add = [&](const char* what, const std::function<std::optional<Section>()>& build) {
    try {
      if (auto s = build()) sections.push_back(std::move(*s));
    } catch (const json::exception& e) {
      throw Error(std::string("report: the ledger's latest ") + what + " run has a row it cannot read: " + e.what());
    }
  };
  add("ladder", [&] { return ladder_section(options, loaded); });
  add("cost", [&] { return cost_section(loaded); });
  add("pinning", [&] { return pinning_section(loaded); });
  add("memory", [&] { return memory_section(loaded); });
  add("dataset", [&] { return dataset_section(loaded); });
  add("compare_torch", [&] { return compare_torch_section(loaded.rows); });
  add("allreduce", [&] { return allreduce_section(loaded.rows); });
  add("bucket sweep", [&] { return buckets_section(loaded.rows); });
  add("scaling", [&] { return scaling_section(loaded.rows); });
  TL_CHECK(!sections.empty(), "report: '" + options.ledger_path +
                                  "' holds no ladder, cost, pinning, memory, compare_torch, all-reduce, bucket or "
                                  "scaling run");

  const json& first = sections.front().first_row;
  std::ostringstream md;
  md << "# trainlab report\n\n";
  md << fmt::format("Generated by `bench_report` from `{}` ({} rows). Nothing below is typed by hand.\n\n",
                    options.ledger_path, loaded.rows.size());
  md << fmt::format("- device: {} ({}), host {}, {} cores\n", text_at(first, "/device/name"),
                    text_at(first, "/device/type"), text_at(first, "/host"), first.value("cores", 0));
  md << fmt::format("- engine {}, {}\n", text_at(first, "/versions/engine"), text_at(first, "/versions/compiler"));
  for (const auto& w : loaded.warnings) md << "- ledger warning: " << w << "\n";
  for (const auto& s : sections) md << s.markdown;
  const std::string text = md.str();

  // The README first, in memory: a refusal (no markers, a broken pair) writes nothing at all.
  std::optional<std::string> readme;
  if (!options.readme_path.empty()) readme = readme_with_sections(options, sections);
  // Figures go beside a report that is a file; a report written into a device or FIFO has none
  // (they would land beside it: /dev/figures).
  if (output_is_file(options.out_path)) {
    const std::filesystem::path out_dir = std::filesystem::path(options.out_path).parent_path();
    for (const auto& s : sections) {
      for (const auto& [name, svg] : s.figures) {
        const std::filesystem::path figure = out_dir / name;
        std::error_code ec;
        std::filesystem::create_directories(figure.parent_path(), ec);
        TL_CHECK(!ec, "report: cannot create '" + figure.parent_path().string() + "': " + ec.message());
        write_file_atomic(figure.string(), svg);
      }
    }
  }
  write_file_atomic(options.out_path, text);
  if (readme) write_file_atomic(options.readme_path, *readme);
  return text;
}

}  // namespace trainlab::bench
