#include "studies/memory/memory_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "backends/error.h"
#include "bench/report/table.h"
#include "engine/instrument/memory_model.h"

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

std::string memory_persistent_table(const MemoryAnalysis& a, bool markdown) {
  std::vector<std::vector<std::string>> rows;
  std::vector<int> stages;
  for (const MemoryArm& arm : a.arms) {
    // Persistent state does not depend on the batch or recomputation: one arm per stage.
    if (arm.parameters <= 0 || arm.world < 1 || arm.recompute != "none" ||
        std::find(stages.begin(), stages.end(), arm.zero) != stages.end())
      continue;
    stages.push_back(arm.zero);
    const auto P = static_cast<double>(arm.parameters);
    const PersistentState seed = persistent_state(P, arm.world, arm.zero, StateBytes{});
    const PersistentState estimate =
        persistent_state(P, arm.world, arm.zero, trainlab_state_bytes(arm.optimizer, arm.optimizer == "sgd" ? 0.9 : 0));
    const auto measured = [&](MemoryCategory c) { return static_cast<double>(category(arm.held, c)); };
    const auto three = [](double formula, double estimator, double held) {
      return fmt::format("{:.2f} / {:.2f} / {:.2f}", formula / kMiB, estimator / kMiB, held / kMiB);
    };
    const double held_total = measured(MemoryCategory::parameters) + measured(MemoryCategory::gradients) +
                              measured(MemoryCategory::optimizer_state);
    const std::string versus =
        estimate.total() > 0 ? fmt::format("{:+.1f}%", 100 * (held_total - estimate.total()) / estimate.total()) : "-";
    rows.push_back({std::to_string(arm.zero), std::to_string(arm.world),
                    three(seed.params, estimate.params, measured(MemoryCategory::parameters)),
                    three(seed.grads, estimate.grads, measured(MemoryCategory::gradients)),
                    three(seed.optimizer, estimate.optimizer, measured(MemoryCategory::optimizer_state)),
                    three(seed.total(), estimate.total(), held_total), versus});
  }
  if (rows.empty()) return "";
  return render_table({"zero", "ranks", "parameters MiB: seed 003 / estimator / measured", "gradients",
                       "optimizer state", "total", "measured vs estimator"},
                      rows, markdown) +
         "seed 003: mixed-precision Adam (2 + 2 + 12 bytes a parameter); estimator: the same formula with what "
         "trainlab "
         "keeps for this optimiser (f32 parameters and gradients, f32 moments, no separate master); measured: held "
         "between steps, the largest rank's. ZeRO-2 and 3 release their gradient shards after the optimiser's step "
         "(the formula keeps them, as DeepSpeed does for accumulation), so their measured gradients are 0 between "
         "steps and 1/W during the step; ZeRO-3's parameters are this rank's shards between steps, each part whole "
         "only around its forward and backward.\n";
}

std::string mib_or_bytes(double bytes, const char* unit) {
  return bytes > 0 && bytes < 10240 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f}{}", bytes / kMiB, unit);
}

std::string memory_transient_table(const MemoryAnalysis& a, bool markdown) {
  const auto control = std::find_if(a.arms.begin(), a.arms.end(),
                                    [&](const MemoryArm& arm) { return arm.name.find(" again") != std::string::npos; });
  if (control == a.arms.end()) return "";
  const std::int64_t batch = control->batch;
  std::vector<const MemoryArm*> shown;
  for (const MemoryArm& arm : a.arms)  // every stage without recomputation, then the levels at stage 0
    if (arm.batch == batch && arm.recompute == "none" && arm.name.find(" again") == std::string::npos)
      shown.push_back(&arm);
  for (const MemoryArm& arm : a.arms)
    if (arm.batch == batch && arm.recompute != "none" && arm.zero == 0) shown.push_back(&arm);
  const auto cell = [](double bytes) { return bytes < 0 ? std::string("-") : mib_or_bytes(bytes); };
  const auto versus = [](double estimated, double measured) {
    if (estimated < 0) return std::string("-");
    if (estimated == measured) return std::string("exact");
    if (measured <= 0) return std::string("measured none");
    const double percent = 100 * (estimated - measured) / measured;
    return std::abs(percent) < 0.05 ? fmt::format("{:+.0f} B", estimated - measured) : fmt::format("{:+.1f}%", percent);
  };
  std::vector<std::vector<std::string>> rows;
  for (const MemoryArm* arm : shown) {
    if (arm->estimated_activations < 0 && arm->estimated_communication < 0) continue;
    const auto activations = static_cast<double>(category(arm->peak, MemoryCategory::activations));
    const auto buffers = static_cast<double>(category(arm->peak, MemoryCategory::communication));
    const auto saved = static_cast<double>(arm->activations_after_forward);
    rows.push_back(
        {std::to_string(arm->zero), arm->recompute, std::to_string(arm->world), std::to_string(arm->per_rank_batch),
         cell(arm->formula_activations) + " / " + cell(arm->estimated_saved) + " / " + cell(saved),
         cell(arm->estimated_activations) + " / " + cell(activations), versus(arm->estimated_activations, activations),
         "- / " + cell(arm->estimated_communication) + " / " + cell(buffers),
         versus(arm->estimated_communication, buffers),
         arm->communication_estimate.empty() ? "-" : arm->communication_estimate});
  }
  if (rows.empty()) return "";
  return render_table({"zero", "recompute", "ranks", "batch per rank",
                       "activations kept for backward MiB: seed 003 / estimator / measured",
                       "activations' peak: estimator / measured", "estimator vs measured",
                       "communication buffers MiB: seed 003 / estimator / measured", "estimator vs measured",
                       "the estimator's buffers"},
                      rows, markdown) +
         "seed 003: B x S x H x q for every saved layer's output (under recomputation the blocks' boundaries only): "
         "what backward keeps when the forward ends, measured then; it has no term for the step's peak (transients, "
         "the recomputed blocks made again) nor for communication buffers. estimator: the model's memory chain "
         "walked at the batch per rank (engine/instrument/memory_model.h), and DDP's plan of its buffers "
         "(buckets that are not the gradients, compression and staging copies, ZeRO-2's all-gather scratch, the "
         "sharded stages' one-f64-per-rank agreement); measured: each category's peak over the step, the largest "
         "rank's. ZeRO-3's gathered parameters are parameters, not buffers.\n";
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

std::vector<MemoryArm> memory_arms_from_rows(const std::vector<MemoryRepeatRow>& rows) {
  std::vector<MemoryArm> arms;
  std::map<std::string, std::size_t> at;
  const auto bytes_of = [](const std::map<std::string, std::int64_t>& by_name) {
    std::array<std::int64_t, kMemoryCategories> bytes{};
    for (int c = 0; c < kMemoryCategories; ++c) {
      const auto it = by_name.find(memory_category_name(static_cast<MemoryCategory>(c)));
      bytes[static_cast<std::size_t>(c)] = it == by_name.end() ? 0 : it->second;
    }
    return bytes;
  };
  for (const MemoryRepeatRow& row : rows) {
    if (!row.header.ok()) continue;
    auto it = at.find(row.arm);
    if (it == at.end()) {
      MemoryArm arm;
      arm.name = row.arm;
      arm.batch = row.config.batch;
      arm.recompute = row.config.recompute;
      arm.zero = row.config.zero;
      arm.world = row.config.world;
      arm.optimizer = row.config.optimizer;
      arm.held = bytes_of(row.memory_per_rank.held_bytes.value_or(std::map<std::string, std::int64_t>{}));
      arm.parameters = row.memory_per_rank.parameters.value_or(0);
      arm.per_rank_batch = row.config.per_rank_batch;
      const auto value = [](const std::optional<std::map<std::string, double>>& by_name, const char* key) {
        if (!by_name) return -1.0;
        const auto found = by_name->find(key);
        return found == by_name->end() ? -1.0 : found->second;
      };
      arm.formula_activations = value(row.memory_per_rank.formula_bytes, "activations");
      arm.estimated_activations = value(row.memory_per_rank.estimated_bytes, "activations");
      arm.estimated_saved = value(row.memory_per_rank.estimated_bytes, "activations_saved");
      arm.estimated_communication = value(row.memory_per_rank.estimated_bytes, "communication");
      arm.communication_estimate = row.memory_per_rank.communication_estimate.value_or("");
      it = at.emplace(row.arm, arms.size()).first;
      arms.push_back(arm);
    }
    MemoryArm& arm = arms[it->second];
    arm.step_ms.push_back(1e3 * row.step_s_median);
    const MemoryPerRank& memory = row.memory_per_rank;
    const auto peak = bytes_of(memory.peak_bytes), at_peak = bytes_of(memory.at_peak_bytes);
    const std::int64_t total = memory.total_peak_bytes;
    const std::int64_t held = memory.activations_after_forward_bytes;
    if (arm.step_ms.size() == 1) {
      arm.peak = peak;
      arm.at_peak = at_peak;
      arm.total_peak = total;
      arm.activations_after_forward = held;
      arm.peak_phase = memory.peak_phase;
    } else if (peak != arm.peak || total != arm.total_peak || held != arm.activations_after_forward) {
      arm.repeats_agree = false;
      for (std::size_t c = 0; c < peak.size(); ++c) arm.peak[c] = std::max(arm.peak[c], peak[c]);
      if (total > arm.total_peak) {
        arm.total_peak = total;
        arm.at_peak = at_peak;
        arm.peak_phase = memory.peak_phase;
      }
      arm.activations_after_forward = std::max(arm.activations_after_forward, held);
    }
  }
  return arms;
}

namespace {

// Each arm's peak as stacked categories (at the peak), with the categories' legend.
chart::BarChart peak_bars(const MemoryAnalysis& a) {
  const MemoryCategory shown[] = {
      MemoryCategory::parameters,  MemoryCategory::gradients,     MemoryCategory::optimizer_state,
      MemoryCategory::activations, MemoryCategory::workspaces,    MemoryCategory::communication,
      MemoryCategory::data,        MemoryCategory::working_copies};
  const char* colours[] = {"#4e79a7", "#59a14f", "#edc948", "#e15759", "#f28e2b", "#b07aa1", "#9c755f", "#76b7b2"};
  chart::BarChart bars;
  bars.label_width = 150;
  bars.width = 300;
  bars.bar_height = 14;
  bars.gap = 5;
  for (const MemoryArm& arm : a.arms) {
    chart::BarRow bar;
    bar.label = arm.name;
    for (std::size_t k = 0; k < std::size(shown); ++k)
      bar.segments.push_back({static_cast<double>(category(arm.at_peak, shown[k])) / kMiB, colours[k]});
    bar.value_text = fmt::format("{:.1f}", static_cast<double>(arm.total_peak) / kMiB);
    bars.rows.push_back(bar);
  }
  for (std::size_t k = 0; k < std::size(shown); ++k)
    bars.legend.push_back({memory_category_name(shown[k]), colours[k]});
  return bars;
}

// Peak against step time: one point per arm (whisker: the step's min-max), colour by recompute,
// shape by ZeRO stage; each batch named once, at its control.
chart::Scatter peak_against_step(const MemoryAnalysis& a) {
  chart::Scatter points;
  points.x_label = "step ms (median, whisker min-max) ->";
  points.y_label = "peak MiB per rank";
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    const MemoryArm& arm = a.arms[i];
    chart::ScatterPoint p;
    p.x = a.step[i].median;
    p.y = static_cast<double>(arm.total_peak) / kMiB;
    p.x_lo = a.step[i].min;
    p.x_hi = a.step[i].max;
    p.colour = arm.recompute == "none" ? "#4e79a7" : arm.recompute == "convs" ? "#f28e2b" : "#e15759";
    p.square = arm.zero != 0;
    if (a.control[i] == static_cast<int>(i)) {
      p.label = fmt::format("batch {}", arm.batch);
    } else if (arm.zero >= 2) {
      p.label = fmt::format("z{}", arm.zero);
    }
    points.points.push_back(p);
  }
  return points;
}

}  // namespace

chart::Figure memory_figure(const MemoryAnalysis& a, const std::string& title) {
  return {title,
          {peak_bars(a), peak_against_step(a)},
          {"left: the peak's bytes by category (MiB, largest rank); right: recompute none blue, convs orange, all "
           "red; zero 0 circle, zero 1-3 square (zero 2 and 3 labelled z2, z3)",
           fmt::format("noise floor {:.1f}% of the step time{}", a.calibration.noise_floor_percent,
                       a.separability_test_valid ? "" : " (NO CONCLUSION: the calibration pair does not overlap)")}};
}

}  // namespace trainlab::bench
