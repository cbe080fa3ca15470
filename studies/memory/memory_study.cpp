#include "studies/memory/memory_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "backends/error.h"
#include "bench/report/table.h"

namespace trainlab::bench {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string mib(std::int64_t bytes) { return fmt::format("{:.2f}", static_cast<double>(bytes) / kMiB); }

std::int64_t category(const std::array<std::int64_t, kMemoryCategories>& bytes, MemoryCategory c) {
  return bytes[static_cast<std::size_t>(index(c))];
}

}  // namespace

MemoryAnalysis analyse_memory(std::vector<MemoryArm> arms) {
  MemoryAnalysis a;
  a.arms = std::move(arms);
  int first = -1, again = -1;
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    TL_CHECK(!a.arms[i].step_ms.empty(), "memory study: arm '" + a.arms[i].name + "' has no repeat");
    const std::string& name = a.arms[i].name;
    const std::string suffix = " again";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      again = static_cast<int>(i);
      for (std::size_t j = 0; j < a.arms.size(); ++j)
        if (a.arms[j].name == name.substr(0, name.size() - suffix.size())) first = static_cast<int>(j);
    }
  }
  TL_CHECK(first >= 0 && again >= 0,
           "memory study: no calibration pair (an arm and the same arm named '... again'): no noise floor");
  a.calibration =
      calibrate(a.arms[static_cast<std::size_t>(first)].step_ms, a.arms[static_cast<std::size_t>(again)].step_ms);
  a.calibration_pair =
      a.arms[static_cast<std::size_t>(first)].name + " vs " + a.arms[static_cast<std::size_t>(again)].name;
  a.separability_test_valid = a.calibration.valid && a.arms[static_cast<std::size_t>(first)].step_ms.size() >= 2;
  for (const MemoryArm& arm : a.arms) a.step.push_back(summarize(arm.step_ms));
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    int control = -1;
    for (std::size_t j = 0; j < a.arms.size(); ++j) {
      const MemoryArm& c = a.arms[j];
      if (c.batch == a.arms[i].batch && c.recompute == "none" && c.zero == 0 && static_cast<int>(j) != again) {
        control = static_cast<int>(j);
        break;
      }
    }
    a.control.push_back(control);
    MemoryEffect e;
    if (control >= 0) {
      const Summary& now = a.step[i];
      const Summary& before = a.step[static_cast<std::size_t>(control)];
      e.step_percent = before.median > 0 ? 100.0 * (now.median / before.median - 1.0) : 0.0;
      e.floor_multiple =
          a.calibration.noise_floor_percent > 0 ? std::abs(e.step_percent) / a.calibration.noise_floor_percent : 0.0;
      e.verdict = verdict(now, before, a.separability_test_valid ? std::optional(a.calibration) : std::nullopt);
      if (!a.separability_test_valid && e.verdict != Verdict::too_few_repeats) e.verdict = Verdict::no_conclusion;
      const auto base = static_cast<double>(a.arms[static_cast<std::size_t>(control)].total_peak);
      e.peak_percent = base > 0 ? 100.0 * (static_cast<double>(a.arms[i].total_peak) / base - 1.0) : 0.0;
    }
    a.effects.push_back(e);
  }
  return a;
}

std::string memory_table(const MemoryAnalysis& a, bool markdown) {
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    const MemoryArm& arm = a.arms[i];
    const Summary& s = a.step[i];
    const MemoryEffect& e = a.effects[i];
    std::string against = "-";
    if (a.control[i] == static_cast<int>(i)) {
      against = "control";
    } else if (arm.name.find(" again") != std::string::npos) {
      against = "calibration pair";
    } else if (a.control[i] >= 0) {
      against = fmt::format("{:+.1f}% ({:.1f}x floor, {}); peak {:+.1f}%", e.step_percent, e.floor_multiple,
                            verdict_words(e.verdict), e.peak_percent);
    }
    rows.push_back(
        {std::to_string(arm.batch), arm.recompute, std::to_string(arm.zero),
         fmt::format("{:.1f} ({:.1f}-{:.1f})", s.median, s.min, s.max),
         mib(arm.total_peak) + " (" + arm.peak_phase + ")", mib(category(arm.at_peak, MemoryCategory::activations)),
         mib(category(arm.at_peak, MemoryCategory::workspaces)),
         mib(category(arm.peak, MemoryCategory::optimizer_state)),
         mib(category(arm.at_peak, MemoryCategory::gradients) + category(arm.at_peak, MemoryCategory::parameters)),
         mib(category(arm.at_peak, MemoryCategory::communication) + category(arm.at_peak, MemoryCategory::data)),
         mib(arm.activations_after_forward), against + (arm.repeats_agree ? "" : " (repeats' bytes differ)")});
  }
  return render_table({"global batch", "recompute", "zero", "step ms median (min-max)", "peak MiB (phase)",
                       "at peak: activations", "workspaces", "optimizer state", "params + grads", "comm + data",
                       "held after forward", "vs its batch's none/zero 0"},
                      rows, markdown);
}

std::string memory_findings(const MemoryAnalysis& a) {
  std::ostringstream out;
  out << fmt::format("noise floor: {:.1f}% of the step time ({}); separability_test_valid: {}\n",
                     a.calibration.noise_floor_percent, a.calibration_pair,
                     a.separability_test_valid ? "true" : "false");
  if (!a.separability_test_valid)
    out << "NO CONCLUSION on step time: the calibration pair (identical configurations) does not overlap, or there is "
           "one repeat\n";
  // Per lever, the range of its effect over the batch sizes.
  std::map<std::string, std::vector<std::size_t>> levers;
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    const MemoryArm& arm = a.arms[i];
    if (a.control[i] < 0 || a.control[i] == static_cast<int>(i) || arm.name.find(" again") != std::string::npos)
      continue;
    levers[fmt::format("recompute {}, zero {}", arm.recompute, arm.zero)].push_back(i);
  }
  for (const auto& [lever, members] : levers) {
    std::string parts;
    for (std::size_t i : members) {
      const MemoryArm& arm = a.arms[i];
      const MemoryArm& control = a.arms[static_cast<std::size_t>(a.control[i])];
      parts += fmt::format(
          "{}batch {}: peak {} -> {} MiB ({:+.1f}%), held after forward {} -> {} MiB, optimizer state {} -> {} MiB, "
          "step {:+.1f}% ({:.1f}x floor, {})",
          parts.empty() ? "" : "; ", arm.batch, mib(control.total_peak), mib(arm.total_peak), a.effects[i].peak_percent,
          mib(control.activations_after_forward), mib(arm.activations_after_forward),
          mib(category(control.peak, MemoryCategory::optimizer_state)),
          mib(category(arm.peak, MemoryCategory::optimizer_state)), a.effects[i].step_percent,
          a.effects[i].floor_multiple, verdict_words(a.effects[i].verdict));
    }
    out << "- " << lever << ": " << parts << "\n";
  }
  return out.str();
}

std::vector<MemoryArm> memory_arms_from_rows(const std::vector<json>& rows) {
  std::vector<MemoryArm> arms;
  std::map<std::string, std::size_t> at;
  for (const json& row : rows) {
    if (row.value("kind", "") != "memory_repeat" || row.value("status", "") != "ok") continue;
    const std::string name = row.at("arm").get<std::string>();
    auto it = at.find(name);
    if (it == at.end()) {
      MemoryArm arm;
      arm.name = name;
      const json& config = row.at("config");
      arm.batch = config.at("batch").get<std::int64_t>();
      arm.recompute = config.at("recompute").get<std::string>();
      arm.zero = config.at("zero").get<int>();
      it = at.emplace(name, arms.size()).first;
      arms.push_back(arm);
    }
    MemoryArm& arm = arms[it->second];
    arm.step_ms.push_back(1e3 * row.at("step_s_median").get<double>());
    const json& memory = row.at("memory_per_rank");
    std::array<std::int64_t, kMemoryCategories> peak{}, at_peak{};
    for (int c = 0; c < kMemoryCategories; ++c) {
      const char* name_c = memory_category_name(static_cast<MemoryCategory>(c));
      peak[static_cast<std::size_t>(c)] = memory.at("peak_bytes").value(name_c, std::int64_t{0});
      at_peak[static_cast<std::size_t>(c)] = memory.at("at_peak_bytes").value(name_c, std::int64_t{0});
    }
    const std::int64_t total = memory.at("total_peak_bytes").get<std::int64_t>();
    const std::int64_t held = memory.at("activations_after_forward_bytes").get<std::int64_t>();
    if (arm.step_ms.size() == 1) {
      arm.peak = peak;
      arm.at_peak = at_peak;
      arm.total_peak = total;
      arm.activations_after_forward = held;
      arm.peak_phase = memory.at("peak_phase").get<std::string>();
    } else if (peak != arm.peak || total != arm.total_peak || held != arm.activations_after_forward) {
      arm.repeats_agree = false;
      for (std::size_t c = 0; c < peak.size(); ++c) arm.peak[c] = std::max(arm.peak[c], peak[c]);
      if (total > arm.total_peak) {
        arm.total_peak = total;
        arm.at_peak = at_peak;
        arm.peak_phase = memory.at("peak_phase").get<std::string>();
      }
      arm.activations_after_forward = std::max(arm.activations_after_forward, held);
    }
  }
  return arms;
}

std::string memory_svg(const MemoryAnalysis& a, const std::string& title) {
  // Left: each arm's peak as stacked categories (at the peak). Right: peak MiB against step ms.
  const MemoryCategory shown[] = {
      MemoryCategory::parameters,  MemoryCategory::gradients,     MemoryCategory::optimizer_state,
      MemoryCategory::activations, MemoryCategory::workspaces,    MemoryCategory::communication,
      MemoryCategory::data,        MemoryCategory::working_copies};
  const char* colours[] = {"#4e79a7", "#59a14f", "#edc948", "#e15759", "#f28e2b", "#b07aa1", "#9c755f", "#76b7b2"};
  double top = 0, slowest = 0;
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    top = std::max(top, static_cast<double>(a.arms[i].total_peak) / kMiB);
    slowest = std::max(slowest, a.step[i].max);
  }
  top = top > 0 ? top * 1.1 : 1.0;
  slowest = slowest > 0 ? slowest * 1.1 : 1.0;
  const int label = 150, bars = 300, bar = 14, gap = 5, head = 40, plot_left = label + bars + 90, plot = 360;
  const int height = std::max(head + static_cast<int>(a.arms.size()) * (bar + gap), head + plot) + 90;
  std::ostringstream svg;
  svg << fmt::format(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">)",
             plot_left + plot + 40, height)
      << "\n";
  svg << fmt::format(R"(<text x="10" y="22" font-size="14" font-weight="bold">{}</text>)", svg_text(title)) << "\n";
  int y = head;
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    const MemoryArm& arm = a.arms[i];
    svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", label - 6, y + bar - 3, svg_text(arm.name))
        << "\n";
    double x = label;
    for (std::size_t k = 0; k < std::size(shown); ++k) {
      const double w = static_cast<double>(category(arm.at_peak, shown[k])) / kMiB / top * bars;
      if (w <= 0) continue;
      svg << fmt::format(R"(<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}"/>)", x, y, w, bar, colours[k])
          << "\n";
      x += w;
    }
    svg << fmt::format(R"(<text x="{:.1f}" y="{}">{:.1f}</text>)", x + 4, y + bar - 3,
                       static_cast<double>(arm.total_peak) / kMiB)
        << "\n";
    y += bar + gap;
  }
  int ly = y + 14;
  for (std::size_t k = 0; k < std::size(shown); ++k) {
    const int lx = 10 + static_cast<int>(k % 4) * 140;
    if (k == 4) ly += 16;
    svg << fmt::format(R"(<rect x="{}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}">{}</text>)", lx,
                       ly - 9, colours[k], lx + 14, ly, memory_category_name(shown[k]))
        << "\n";
  }
  // Peak against step time: one point per arm (whisker: the step's min-max), colour by recompute,
  // shape by ZeRO stage.
  const int py = head;
  svg << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)", plot_left, py, plot,
                     plot)
      << "\n";
  const auto px = [&](double ms) { return plot_left + ms / slowest * plot; };
  const auto pyv = [&](double mib_v) { return py + plot - mib_v / top * plot; };
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    const MemoryArm& arm = a.arms[i];
    const double cx = px(a.step[i].median), cy = pyv(static_cast<double>(arm.total_peak) / kMiB);
    const char* colour = arm.recompute == "none" ? "#4e79a7" : arm.recompute == "convs" ? "#f28e2b" : "#e15759";
    svg << fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"/>)", px(a.step[i].min), cy,
                       px(a.step[i].max), cy, colour)
        << "\n";
    if (arm.zero == 0) {
      svg << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="{}"/>)", cx, cy, colour) << "\n";
    } else {
      svg << fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="8" height="8" fill="{}"/>)", cx - 4, cy - 4, colour)
          << "\n";
    }
    if (a.control[i] == static_cast<int>(i))  // each batch named once, at its control
      svg << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" fill="#555">batch {}</text>)", cx - 10, cy - 10, arm.batch)
          << "\n";
  }
  // Axis ticks at a quarter of the range.
  for (int t = 0; t <= 4; ++t) {
    const double ms = slowest * t / 4, mib_v = top * t / 4;
    svg << fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle" fill="#555">{:.0f}</text>)", px(ms),
                       py + plot + 12, ms)
        << fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end" fill="#555">{:.0f}</text>)", plot_left - 4,
                       pyv(mib_v) + 4, mib_v)
        << "\n";
  }
  svg << fmt::format(R"(<text x="{}" y="{}">step ms (median, whisker min-max) -></text>)", plot_left, py + plot + 28)
      << "\n";
  svg << fmt::format(R"(<text x="{}" y="{}">peak MiB per rank</text>)", plot_left, py - 6) << "\n";
  svg << fmt::format(
             R"(<text x="{}" y="{}" fill="#555">recompute: none blue, convs orange, all red; zero 0 circle, zero 1 square</text>)",
             plot_left, py + plot + 44)
      << "\n";
  svg << fmt::format(R"(<text x="10" y="{}" fill="#555">left: the peak's bytes by category (MiB, largest rank); )"
                     R"(noise floor {:.1f}% of the step time{}</text>)",
                     height - 12, a.calibration.noise_floor_percent,
                     a.separability_test_valid ? "" : " (NO CONCLUSION: the calibration pair does not overlap)")
      << "\n</svg>\n";
  return svg.str();
}

}  // namespace trainlab::bench
