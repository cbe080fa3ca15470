#include "studies/pinning/pinning_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "backends/error.h"
#include "bench/report/table.h"

namespace trainlab::bench {

namespace {

const Summary& summary_of(const PinningAnalysis& a, const std::string& arm) {
  for (std::size_t i = 0; i < a.arms.size(); ++i)
    if (a.arms[i].name == arm) return a.summaries[i];
  throw Error("pinning: no arm '" + arm + "'");
}

ArmEffect effect(const PinningAnalysis& a, const std::string& arm, const std::string& against) {
  ArmEffect e;
  e.arm = arm;
  e.against = against;
  const Summary& now = summary_of(a, arm);
  const Summary& before = summary_of(a, against);
  e.percent = effect_percent(now, before);
  e.floor_multiple =
      a.calibration.noise_floor_percent > 0 ? std::abs(e.percent) / a.calibration.noise_floor_percent : 0.0;
  e.verdict = verdict(now, before, a.calibration);
  return e;
}

std::string verdict_words(const ArmEffect& e) { return bench::verdict_words(e.verdict); }

std::string floor_text(const ArmEffect& e, double floor) {
  if (floor <= 0) return "floor 0";
  return fmt::format("{:.1f}x the floor", e.floor_multiple);
}

}  // namespace

PinningAnalysis analyse_pinning(const std::string& condition, const std::vector<PinningArm>& arms,
                                bool capped_equals_default) {
  PinningAnalysis a;
  a.condition = condition;
  a.capped_equals_default = capped_equals_default;
  for (const char* name : kPinningArms) {
    const auto it = std::find_if(arms.begin(), arms.end(), [&](const PinningArm& arm) { return arm.name == name; });
    TL_CHECK(
        it != arms.end() && !it->samples_per_s.empty(),
        fmt::format("pinning ({}): arm '{}' has no measurement (every arm must run at least once)", condition, name));
    a.arms.push_back(*it);
    a.summaries.push_back(summarize(it->samples_per_s));
  }
  // The identical pairs: default and default_b, and, where threads_capped is the same configuration
  // as default (the seed's accident), each of them with threads_capped. The noise floor is the
  // widest gap among them, and the test is valid only if every pair overlaps.
  a.calibration = calibrate(a.arms[0].samples_per_s, a.arms[1].samples_per_s);
  bool all_overlap = a.calibration.valid;
  int fewest = std::min(a.summaries[0].n, a.summaries[1].n);
  if (capped_equals_default) {
    for (std::size_t i : {std::size_t{0}, std::size_t{1}}) {
      const Calibration pair = calibrate(a.arms[i].samples_per_s, a.arms[2].samples_per_s);
      all_overlap = all_overlap && pair.valid;
      if (pair.noise_floor_percent > a.calibration.noise_floor_percent) {
        a.calibration = pair;
        a.calibration_pair = a.arms[i].name + " vs threads_capped";
      }
    }
    fewest = std::min(fewest, a.summaries[2].n);
  }
  a.calibration.valid = all_overlap;
  // Two repeats at least on each calibration arm: one point never "overlaps" another.
  a.separability_test_valid = all_overlap && fewest >= 2;
  if (!a.separability_test_valid) a.calibration.valid = false;  // every verdict below is NO CONCLUSION
  for (const char* arm : {"threads_capped", "pinned_split", "pinned_half_shared"})
    a.effects.push_back(effect(a, arm, "default"));
  a.confinement = effect(a, "pinned_half_shared", "default");
  a.disjointness = effect(a, "pinned_split", "pinned_half_shared");
  return a;
}

std::string pinning_table(const PinningAnalysis& a, bool markdown) {
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    const auto& arm = a.arms[i];
    const auto& s = a.summaries[i];
    std::string values;
    for (double v : arm.samples_per_s) {
      if (!values.empty()) values += ' ';
      values += fmt::format("{:.0f}", v);
    }
    std::string against = "-";
    if (i == 0) against = "control (calibration A)";
    if (i == 1) against = fmt::format("calibration B (noise floor {:.1f}%)", a.calibration.noise_floor_percent);
    if (i >= 2) {
      const ArmEffect& e = a.effects[i - 2];
      against = fmt::format("{:+.1f}% ({}), {}", e.percent, floor_text(e, a.calibration.noise_floor_percent),
                            verdict_words(e));
    }
    rows.push_back(
        {arm.name, arm.main_cpus, arm.worker_cpus, std::to_string(arm.threads), std::to_string(arm.workers),
         fmt::format("{:.1f}", s.median), fmt::format("{:.1f}-{:.1f}", s.min, s.max), against,
         arm.affinity_mismatches ? fmt::format("MISMATCH in {} repeat(s)", arm.affinity_mismatches) : "as set",
         values});
  }
  return render_table({"arm", "main + compute CPUs", "worker CPUs", "threads", "workers",
                       fmt::format("samples/s (median of {})", a.summaries.front().n), "range", "vs default",
                       "affinity read back", "repeats"},
                      rows, markdown);
}

std::string pinning_findings(const PinningAnalysis& a) {
  std::ostringstream out;
  const double floor = a.calibration.noise_floor_percent;
  out << fmt::format(
      "noise floor ({}): {:.1f}%, the widest median gap between identical configurations ({}: "
      "medians {:.1f} and {:.1f}, ranges {:.1f}-{:.1f} and {:.1f}-{:.1f}).\n",
      a.condition, floor, a.calibration_pair, a.calibration.a.median, a.calibration.b.median, a.calibration.a.min,
      a.calibration.a.max, a.calibration.b.min, a.calibration.b.max);
  out << fmt::format("separability_test_valid: {}.\n", a.separability_test_valid ? "true" : "false");
  if (a.capped_equals_default) {
    out << "threads_capped is the same configuration as default on this machine (default threads = physical "
           "cores): they are calibration pairs too, and their gaps count towards the floor.\n";
  }
  if (!a.separability_test_valid) {
    // Why, exactly: an identical arm with a single repeat, or identical arms that do not overlap.
    std::string single;
    for (std::size_t i = 0; i < 3; ++i) {
      if (i == 2 && !a.capped_equals_default) break;
      if (a.summaries[i].n >= 2) continue;
      if (!single.empty()) single += ", ";
      single += a.arms[i].name;
    }
    const std::string why = !single.empty() ? "have a single repeat (" + single + "): one point never overlaps another"
                                            : "(identical configurations) do not all overlap";
    out << fmt::format(
        "NO CONCLUSION: the calibration arms {}, so non-overlap cannot be read as an effect at {} repeats; no "
        "verdict is issued (medians are printed for the record only).\n",
        why, a.summaries[0].n);
    return out.str();
  }
  for (const auto& e : a.effects) {
    out << fmt::format("- {} vs default: {:+.1f}%, {}, {}{}.\n", e.arm, e.percent, floor_text(e, floor),
                       verdict_words(e),
                       e.verdict == Verdict::separable && e.floor_multiple < 1 ? " (but inside the noise floor)" : "");
  }
  auto decomposition = [&](const char* what, const ArmEffect& e) {
    const bool established = e.verdict == Verdict::separable && (floor <= 0 || e.floor_multiple >= 1);
    out << fmt::format("- {} ({} vs {}): {:+.1f}%, {}, {}: {}.\n", what, e.arm, e.against, e.percent,
                       floor_text(e, floor), verdict_words(e),
                       established ? "an effect, clear of the floor" : "not established at these repeats");
  };
  decomposition("confinement", a.confinement);
  decomposition("disjointness", a.disjointness);
  return out.str();
}

std::string pinning_comparison(const std::vector<PinningAnalysis>& analyses, bool markdown) {
  std::vector<std::vector<std::string>> rows;
  auto cell = [](const PinningAnalysis& a, const ArmEffect& e) {
    return a.separability_test_valid ? fmt::format("{:+.1f}% ({})", e.percent, verdict_words(e))
                                     : fmt::format("{:+.1f}% (NO CONCLUSION)", e.percent);
  };
  for (const auto& a : analyses) {
    const ArmEffect& split = a.effects[1];
    rows.push_back({a.condition, fmt::format("{:.1f}%", a.calibration.noise_floor_percent),
                    a.separability_test_valid ? "true" : "false", cell(a, split), cell(a, a.confinement),
                    cell(a, a.disjointness)});
  }
  return render_table(
      {"condition", "noise floor", "separability_test_valid", "pinned_split vs default", "confinement", "disjointness"},
      rows, markdown);
}

void add_repeat(PinningArm& arm, const PinningRepeatRow& row) {
  if (!row.header.ok()) return;
  const PinningMeasurement& m = row.measurement;
  arm.name = row.arm;
  arm.main_cpus = m.applied.main;
  arm.worker_cpus = m.applied.workers;
  arm.threads = row.threads;
  arm.workers = row.workers;
  arm.samples_per_s.push_back(m.samples_per_s);
  if (!m.applied.as_set) ++arm.affinity_mismatches;
}

std::vector<PinningAnalysis> pinning_from_rows(const std::vector<PinningRepeatRow>& rows) {
  std::vector<std::string> conditions;
  std::map<std::string, std::map<std::string, PinningArm>> arms;
  std::map<std::string, bool> capped_same;
  for (const auto& row : rows) {
    if (!row.header.ok()) continue;
    if (arms.count(row.condition) == 0) conditions.push_back(row.condition);
    add_repeat(arms[row.condition][row.arm], row);
    capped_same[row.condition] = row.capped_equals_default;
  }
  std::vector<PinningAnalysis> out;
  for (const auto& condition : conditions) {
    std::vector<PinningArm> list;
    for (const auto& [name, arm] : arms[condition]) list.push_back(arm);
    out.push_back(analyse_pinning(condition, list, capped_same[condition]));
  }
  return out;
}

chart::Figure pinning_figure(const std::vector<PinningAnalysis>& analyses, const std::string& title) {
  chart::BarChart bars;
  bars.label_width = 260;
  bars.width = 480;
  bars.bar_height = 18;
  bars.gap = 8;
  for (const auto& a : analyses) {
    chart::BarRow heading;
    heading.heading = true;
    heading.label = fmt::format("{} (noise floor {:.1f}%{})", a.condition, a.calibration.noise_floor_percent,
                                a.separability_test_valid ? "" : ", NO CONCLUSION");
    bars.rows.push_back(heading);
    // The noise floor band: the control's median +- the floor, across this condition's arms.
    const double control = a.summaries[0].median, half = control * a.calibration.noise_floor_percent / 100.0;
    for (std::size_t i = 0; i < a.arms.size(); ++i) {
      const Summary& s = a.summaries[i];
      chart::BarRow bar;
      bar.label = a.arms[i].name;
      bar.value = s.median;
      bar.lo = s.min;
      bar.hi = s.max;
      bar.colour = i < 2 ? chart::kGrey : chart::kBlue;
      bar.value_text = fmt::format("{:.0f}", s.median);
      bar.band_lo = control - half;
      bar.band_hi = control + half;
      bars.rows.push_back(bar);
    }
  }
  return {title,
          {bars},
          {"samples/s: bar median, whisker min-max; band: default's median +- the noise floor (calibration arms in "
           "grey)"}};
}

}  // namespace trainlab::bench
