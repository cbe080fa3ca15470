#include "bench/report.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "backends/error.h"
#include "bench/ladder.h"
#include "engine/fileio.h"

namespace trainlab::bench {

namespace {

// Escapes text for SVG.
std::string xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

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
  svg << fmt::format(R"(<text x="10" y="22" font-size="14" font-weight="bold">{}</text>)", xml(title)) << "\n";
  int y = head;
  for (const auto& row : rows) {
    const std::string name = row.at("rung");
    svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", left - 8, y + bar - 6, xml(name)) << "\n";
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

}  // namespace

std::string write_report(const ReportOptions& options) {
  check_output_file(options.out_path, "report --out");
  if (!options.readme_path.empty()) check_output_file(options.readme_path, "report --readme");
  const Ledger ledger(options.ledger_path);
  const Ledger::Loaded loaded = ledger.load();
  TL_CHECK(!loaded.rows.empty(), "report: ledger '" + options.ledger_path + "' has no rows (run bench_ladder first)");
  std::string run_id = options.run_id;
  if (run_id.empty()) {
    for (const auto& row : loaded.rows) {
      if (row.value("kind", "") == "rung" || row.value("kind", "") == "repeat") run_id = row.value("run_id", "");
    }
  }
  TL_CHECK(!run_id.empty(), "report: no ladder run in '" + options.ledger_path + "'");
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
  const std::filesystem::path out(options.out_path);
  const std::string figure_name = "figures/ladder_" + ladder_name + "_" + run_id + ".svg";
  const std::filesystem::path figure = out.parent_path() / figure_name;

  std::ostringstream md;
  md << "# trainlab report\n\n";
  md << fmt::format(
      "Generated by `bench_report` from `{}`, run `{}` ({} rows; {} measurement rows). Nothing below "
      "is typed by hand.\n\n",
      options.ledger_path, run_id, rungs.size(), repeats.size());
  md << fmt::format("- device: {} ({}), host {}, {} cores, {} threads\n",
                    first.at("device").at("name").get<std::string>(), first.at("device").at("type").get<std::string>(),
                    first.value("host", std::string("?")), first.value("cores", 0), first.value("threads", 0));
  md << fmt::format("- backend: {} ({})\n", first.value("backend", std::string("?")),
                    first.value("backend_describe", std::string("?")));
  md << fmt::format("- engine {}, {}; timer {}\n", first.at("versions").value("engine", std::string("?")),
                    first.at("versions").value("compiler", std::string("?")), first.value("timer", std::string("?")));
  for (const auto& w : loaded.warnings) md << "- ledger warning: " << w << "\n";
  if (interrupted)
    md << "- this run was interrupted: rungs marked incomplete are rebuilt from their measurement rows\n";
  md << "\n## The ladder\n\n";
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
  for (const auto& row : rungs) {
    if (row.value("calibration", false)) continue;
    const std::string name = row.at("rung");
    if (row.at("status") != "ok") {
      md << fmt::format("- `{}`: {} ({})\n", name, row.at("status").get<std::string>(),
                        row.value("reason", row.value("error", std::string())));
      continue;
    }
    const auto& st = row.at("stats");
    Summary s;
    s.median = st.at("median");
    s.min = st.at("min");
    s.max = st.at("max");
    s.n = st.at("n");
    if (previous) {
      const Verdict v = verdict(s, *previous, calibration);
      const char* meaning = v == Verdict::no_conclusion ? "NO CONCLUSION (the calibration arms failed their own check)"
                            : v == Verdict::separable   ? "separable (the repeat ranges do not overlap)"
                            : v == Verdict::too_few_repeats ? "no verdict from a single repeat"
                                                            : "not separable: inside the noise";
      md << fmt::format("- `{}` vs `{}`: {:+.1f}%, {}\n", name, previous_name, effect_percent(s, *previous), meaning);
    }
    previous = s;
    previous_name = name;
  }
  const std::string text = md.str();

  std::error_code ec;
  std::filesystem::create_directories(figure.parent_path(), ec);
  TL_CHECK(!ec, "report: cannot create '" + figure.parent_path().string() + "': " + ec.message());
  write_file_atomic(figure.string(),
                    bar_chart_svg(rungs, "ladder '" + ladder_name + "': samples/s per rung (run " + run_id + ")"));
  write_file_atomic(options.out_path, text);
  if (!options.readme_path.empty()) {
    const auto bytes = read_file(options.readme_path);
    const std::string readme(bytes.begin(), bytes.end());
    const std::string begin = "<!-- ladder:begin -->", end = "<!-- ladder:end -->";
    const auto b = readme.find(begin), e = readme.find(end);
    TL_CHECK(b != std::string::npos && e != std::string::npos && b < e,
             "report: '" + options.readme_path + "' lacks the " + begin + " ... " + end + " markers");
    const std::string section =
        begin + "\n" +
        fmt::format(
            "Generated by `bench_report --ledger {} --out {} --readme {}` from run `{}` on {} ({}, {} "
            "threads; engine {}). The full report, with every repeat and the verdicts: `{}`.\n\n",
            options.ledger_path, options.out_path, options.readme_path, run_id,
            first.at("device").at("name").get<std::string>(), first.value("backend", std::string("?")),
            first.value("threads", 0), first.at("versions").value("engine", std::string("?")), options.out_path) +
        ladder_table(rungs, true) + end;
    write_file_atomic(options.readme_path, readme.substr(0, b) + section + readme.substr(e + end.size()));
  }
  return text;
}

}  // namespace trainlab::bench
