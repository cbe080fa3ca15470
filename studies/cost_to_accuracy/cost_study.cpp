#include "studies/cost_to_accuracy/cost_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "backends/error.h"
#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "engine/io/yaml_file.h"
#include "studies/cost_to_accuracy/rows.h"
#include "studies/scaling/rows.h"

namespace trainlab::bench {

const char* cost_metric_name(CostMetric metric) { return metric == CostMetric::loss ? "loss" : "accuracy"; }

CostMetric parse_cost_metric(const std::string& name) {
  if (name == "accuracy") return CostMetric::accuracy;
  if (name == "loss") return CostMetric::loss;
  throw Error("cost study: metric " + quote_value(name) +
              " is not one of accuracy (held-out accuracy at least the target) or loss (held-out loss at most it)");
}

std::string target_phrase(CostMetric metric, double target) {
  return fmt::format("held-out {} {} {:g}", cost_metric_name(metric), metric == CostMetric::loss ? "<=" : ">=", target);
}

void check_cost_target(CostMetric metric, double target, const std::string& where) {
  if (metric == CostMetric::loss) {
    TL_CHECK(std::isfinite(target) && target > 0,
             fmt::format("{} {} is not a held-out loss to reach (a finite number > 0, in nats)", where, target));
  } else {
    TL_CHECK(target > 0 && target <= 1,
             fmt::format("{} {} is not a held-out accuracy to reach (allowed: (0, 1])", where, target));
  }
}

namespace {

CostStudySpec cost_study_from_yaml(const YAML::Node& root, const std::string& path) {
  TL_CHECK(root.IsMap(), "cost study file '" + path + "' must be a map");
  static const char* const kAllowed =
      "study, device, base, data, configs, lr_rule, metric, target, consecutive, eval_every, step_cap, repeats, quick";
  static const std::set<std::string> allowed = {"study",    "device",  "base",   "data",        "configs",
                                                "lr_rule",  "metric",  "target", "consecutive", "eval_every",
                                                "step_cap", "repeats", "quick"};
  for (const auto& item : root) {
    TL_CHECK(item.first.IsScalar(), path + ": every key must be a plain name");
    TL_CHECK(allowed.count(item.first.Scalar()),
             path + ": unknown key " + quote_value(item.first.Scalar()) + " (allowed: " + kAllowed + ")");
  }
  CostStudySpec spec;
  try {
    spec.name = root["study"].as<std::string>();
    spec.device = root["device"].as<std::string>();
    TL_CHECK(spec.device == "cpu" || spec.device == "cuda",
             path + ": device must be cpu or cuda, got " + quote_value(spec.device));
    spec.base = yaml_map(root["base"], path + ": base");
    if (root["data"]) spec.data = root["data"].as<std::string>();
    use_data_set(spec.base, spec.data);
    if (root["metric"]) spec.metric = parse_cost_metric(root["metric"].as<std::string>());
    if (root["target"]) spec.target = root["target"].as<double>();
    if (root["consecutive"]) spec.consecutive = root["consecutive"].as<int>();
    if (root["eval_every"]) spec.eval_every = root["eval_every"].as<std::int64_t>();
    if (root["step_cap"]) spec.step_cap = root["step_cap"].as<std::int64_t>();
    if (root["repeats"]) spec.repeats = root["repeats"].as<int>();
    if (const auto quick = root["quick"]) {
      TL_CHECK(quick.IsMap(), path + ": quick must be a map of target, step_cap, repeats");
      for (const auto& item : quick) {
        const std::string key = item.first.Scalar();
        TL_CHECK(key == "target" || key == "step_cap" || key == "repeats",
                 path + ": quick: unknown key " + quote_value(key) + " (allowed: target, step_cap, repeats)");
      }
      if (quick["target"]) spec.quick_target = quick["target"].as<double>();
      if (quick["step_cap"]) spec.quick_step_cap = quick["step_cap"].as<std::int64_t>();
      if (quick["repeats"]) spec.quick_repeats = quick["repeats"].as<int>();
    }
    if (root["lr_rule"]) {
      const std::string kind = root["lr_rule"]["kind"].as<std::string>();
      TL_CHECK(kind == "linear",
               path + ": lr_rule kind must be 'linear' (lr = base lr * batch / base_batch), got " + quote_value(kind));
      spec.lr_rule.base_batch = root["lr_rule"]["base_batch"].as<std::int64_t>();
    }
    TL_CHECK(root["configs"] && root["configs"].IsSequence() && root["configs"].size() >= 1,
             path + ": configs must be a list of at least one configuration");
    std::set<std::string> names;
    for (const auto& node : root["configs"]) {
      TL_CHECK(node.IsMap(), path + ": each configuration must be a map with a name");
      for (const auto& item : node) {
        const std::string key = item.first.Scalar();
        TL_CHECK(key == "name" || key == "set" || key == "lr" || key == "note",
                 path + ": configuration key " + quote_value(key) + " is not one of name, set, lr, note");
      }
      CostStudySpec::Entry entry;
      entry.name = node["name"].as<std::string>();
      TL_CHECK(names.insert(entry.name).second, path + ": configuration name '" + entry.name + "' appears twice");
      entry.set = yaml_map(node["set"], path + ": configuration '" + entry.name + "' set");
      const std::string lr = node["lr"] ? node["lr"].as<std::string>() : "rule";
      TL_CHECK(lr == "rule" || lr == "unscaled", path + ": configuration '" + entry.name +
                                                     "' lr must be 'rule' (the LR rule for its batch) or "
                                                     "'unscaled' (the base lr), got " +
                                                     quote_value(lr));
      entry.lr_follows_rule = lr == "rule";
      TL_CHECK(entry.set.count("lr") == 0,
               path + ": configuration '" + entry.name + "' sets lr directly; say lr: rule or lr: unscaled");
      if (node["note"]) entry.note = node["note"].as<std::string>();
      spec.configs.push_back(std::move(entry));
    }
  } catch (const YAML::Exception& e) {
    throw Error("cost study file '" + path + "': " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  check_cost_target(spec.metric, spec.target, path + ": target");
  check_cost_target(spec.metric, spec.quick_target, path + ": quick target");
  TL_CHECK(spec.consecutive >= 1 && spec.consecutive <= 100,
           fmt::format("{}: consecutive must be 1..100, got {}", path, spec.consecutive));
  TL_CHECK(spec.eval_every >= 1, fmt::format("{}: eval_every must be >= 1, got {}", path, spec.eval_every));
  // The stop rule needs `consecutive` evaluations: a cap below that could never be reached.
  TL_CHECK(
      spec.step_cap >= spec.consecutive * spec.eval_every && spec.quick_step_cap >= spec.consecutive * spec.eval_every,
      fmt::format("{}: step_cap ({}, quick {}) must be at least consecutive x eval_every ({} x {})", path,
                  spec.step_cap, spec.quick_step_cap, spec.consecutive, spec.eval_every));
  TL_CHECK(spec.repeats >= 1 && spec.repeats <= 100 && spec.quick_repeats >= 1 && spec.quick_repeats <= 100,
           fmt::format("{}: repeats must be 1..100, got {} (quick {})", path, spec.repeats, spec.quick_repeats));
  TL_CHECK(spec.lr_rule.base_batch >= 1, path + ": lr_rule base_batch must be >= 1");
  cost_configs(spec, false);  // every configuration is a valid config, by name
  return spec;
}

int rank_of(double value, const std::vector<double>& all, bool higher_is_better) {
  int better = 0;
  for (double v : all) better += higher_is_better ? (v > value) : (v < value);
  return better + 1;  // ties share a rank (1, 2, 2, 4)
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string money(double dollars) {
  if (dollars >= 1) return fmt::format("${:.2f}", dollars);
  if (dollars >= 0.01) return fmt::format("${:.4f}", dollars);
  return fmt::format("${:.6f}", dollars);
}

}  // namespace

CostStudySpec load_cost_study(const std::string& path) {
  return cost_study_from_yaml(load_yaml_file(path, "cost study file"), path);
}
CostStudySpec load_cost_study_text(const std::string& text, const std::string& source) {
  return cost_study_from_yaml(load_yaml_text(text, source), source);
}

std::vector<TrainConfig> cost_configs(const CostStudySpec& spec, bool quick) {
  const std::string origin = "cost study '" + spec.name + "'";
  const TrainConfig base = config_from(spec.base, origin + " base");
  LrRule rule = spec.lr_rule;
  // Anchored at the base point, as the ladder's rule is: lr is proportional to the batch.
  rule.base_lr = base.optimizer.lr * static_cast<double>(rule.base_batch) / static_cast<double>(base.batch);
  std::vector<TrainConfig> out;
  for (const auto& entry : spec.configs) {
    TrainConfig config = base;
    for (const auto& [key, value] : entry.set)
      apply_config_value(config, key, value, origin + " configuration '" + entry.name + "'");
    config.optimizer.lr = entry.lr_follows_rule ? rule.lr_for(config.batch) : base.optimizer.lr;
    config.reporting.eval_every = spec.eval_every;
    config.steps = quick ? spec.quick_step_cap : spec.step_cap;
    // Evaluated at the cap too (the trainer evaluates every eval_every steps before it, and once
    // more at the end), so a run that reaches the target exactly at the cap counts.
    config.reporting.eval_at_end = true;
    out.push_back(config);
  }
  return out;
}

CostAnalysis analyse_cost(const std::vector<CostConfigResult>& results, double rate, double target,
                          std::int64_t eval_every, std::int64_t step_cap, CostMetric metric) {
  TL_CHECK(rate > 0 && std::isfinite(rate), fmt::format("cost study: the rate must be > 0 $/hour, got {}", rate));
  CostAnalysis a;
  a.rate = rate;
  a.target = target;
  a.metric = metric;
  a.eval_every = eval_every;
  a.step_cap = step_cap;
  for (const auto& r : results) {
    CostRow row;
    row.name = r.name;
    row.batch = r.batch;
    row.lr = r.lr;
    row.lr_follows_rule = r.lr_follows_rule;
    row.dtype = r.dtype;
    row.repeats = static_cast<int>(r.repeats.size());
    row.runs = r.repeats;
    std::vector<double> rates, steps;
    int failed = 0;
    for (const auto& rep : r.repeats) {
      if (rep.failed || rep.samples_per_s <= 0) {
        ++failed;  // a run with no measured step (the target inside the warm-up) has no throughput either
        continue;
      }
      rates.push_back(rep.samples_per_s);
      if (rep.reached) {
        ++row.reached;
        steps.push_back(static_cast<double>(rep.steps_to_target));
      }
    }
    if (!rates.empty()) row.samples_per_s = summarize(rates);
    row.reached_target = row.repeats > 0 && row.reached == row.repeats;
    if (row.reached_target) {
      row.steps_to_target = median_of(steps);
      row.samples_to_target = row.steps_to_target * static_cast<double>(row.batch);
      row.dollars = row.samples_to_target / row.samples_per_s.median * rate / 3600.0;
      row.quantum_samples = static_cast<double>(eval_every * row.batch);
      row.quantum_share = row.quantum_samples / row.samples_to_target;
    } else if (row.repeats == 0) {
      row.why_not = "no repeat ran";
    } else {
      row.why_not =
          fmt::format("{} of {} repeats did not reach {:g} within {} steps{}", row.repeats - row.reached, row.repeats,
                      target, step_cap, failed ? fmt::format(" ({} failed)", failed) : std::string());
    }
    a.rows.push_back(row);
  }
  // Ranks over the full orderings. A configuration without a throughput figure is ranked last by
  // throughput; one that did not reach the target has no cost rank and counts, for the over-rated
  // move, as ranked after every configuration that did.
  std::vector<double> speeds, costs;
  for (const auto& row : a.rows) {
    speeds.push_back(row.samples_per_s.n > 0 ? row.samples_per_s.median : -1.0);
    if (row.reached_target) costs.push_back(row.dollars);
  }
  a.any_reached = !costs.empty();
  for (auto& row : a.rows) {
    row.rank_throughput = rank_of(row.samples_per_s.n > 0 ? row.samples_per_s.median : -1.0, speeds, true);
    row.rank_cost = row.reached_target ? rank_of(row.dollars, costs, false) : 0;
  }
  const int unreached_rank = static_cast<int>(costs.size()) + 1;
  a.orderings_agree = true;
  a.winners_agree = false;
  const CostRow* cheap = nullptr;
  const CostRow* dear = nullptr;
  for (const auto& row : a.rows) {
    const int cost_rank = row.reached_target ? row.rank_cost : unreached_rank;
    if (cost_rank != row.rank_throughput) a.orderings_agree = false;
    if (row.rank_throughput == 1 && row.rank_cost == 1) a.winners_agree = true;
    const int move = cost_rank - row.rank_throughput;
    // Of equal moves, the one throughput ranks higher (the one a ladder would promote first).
    const auto current =
        std::find_if(a.rows.begin(), a.rows.end(), [&](const CostRow& r) { return r.name == a.over_rated; });
    if (move > a.over_rated_places || (move > 0 && move == a.over_rated_places && current != a.rows.end() &&
                                       row.rank_throughput < current->rank_throughput)) {
      a.over_rated_places = move;
      a.over_rated = row.name;
    }
    if (row.reached_target) {
      if (!cheap || row.dollars < cheap->dollars) cheap = &row;
      if (!dear || row.dollars > dear->dollars) dear = &row;
    }
  }
  if (!a.any_reached) a.orderings_agree = false;
  if (cheap) {
    a.cheapest = cheap->name;
    a.dearest = dear->name;
    a.spread = dear->dollars / cheap->dollars;
  }
  std::stable_sort(a.rows.begin(), a.rows.end(), [](const CostRow& x, const CostRow& y) {
    const int rx = x.reached_target ? x.rank_cost : 1 << 20, ry = y.reached_target ? y.rank_cost : 1 << 20;
    return rx < ry;
  });
  return a;
}

std::string cost_table(const CostAnalysis& a, bool markdown) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : a.rows) {
    const std::string speed = r.samples_per_s.n > 0 ? fmt::format("{:.1f} ({:.1f}-{:.1f})", r.samples_per_s.median,
                                                                  r.samples_per_s.min, r.samples_per_s.max)
                                                    : "-";
    if (r.reached_target) {
      rows.push_back({r.name, speed, fmt::format("{:g}", r.steps_to_target), fmt::format("{:.0f}", r.samples_to_target),
                      money(r.dollars), std::to_string(r.rank_throughput), std::to_string(r.rank_cost),
                      fmt::format("{:.0f} ({:.0f}%)", r.quantum_samples, 100 * r.quantum_share)});
    } else {
      rows.push_back(
          {r.name, speed, "-", "-", "not reached: " + r.why_not, std::to_string(r.rank_throughput), "-", "-"});
    }
  }
  return render_table({"config", "samples/s median (min-max)", "steps to target", "samples to target", "$ to target",
                       "rank by throughput", "rank by cost", "stopping quantum (share)"},
                      rows, markdown);
}

std::string cost_repeats_table(const CostAnalysis& a, bool markdown) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : a.rows) {
    std::string speeds, steps;
    for (const auto& run : r.runs) {
      if (!speeds.empty()) speeds += ", ";
      if (!steps.empty()) steps += ", ";
      speeds += run.failed ? std::string("failed") : fmt::format("{:.1f}", run.samples_per_s);
      steps += run.failed    ? std::string("failed: ") + run.error
               : run.reached ? std::to_string(run.steps_to_target)
                             : std::string("not reached");
    }
    rows.push_back({r.name, std::to_string(r.batch), fmt::format("{:g}", r.lr), r.dtype, speeds, steps});
  }
  return render_table({"config", "batch", "lr", "dtype", "samples/s, every repeat", "steps to target, every repeat"},
                      rows, markdown);
}

std::string cost_findings(const CostAnalysis& a) {
  std::ostringstream out;
  if (!a.any_reached) {
    out << fmt::format(
        "No configuration reached {} within {} steps: there is no cost to compare, and "
        "throughput alone says nothing about it.\n",
        target_phrase(a.metric, a.target), a.step_cap);
    return out.str();
  }
  out << fmt::format("winners_agree: {}. ", a.winners_agree ? "true" : "false");
  if (a.orderings_agree) {
    out << "The two rankings agree over the full ordering: on this hardware throughput happened to order the "
           "configurations as their cost to the target does. That is a property of the hardware, not of the code: "
           "samples to target belong to the optimisation, samples/s to the device, and a device whose throughput "
           "order differs reverses the verdict (seed 000: the same study on an L4).\n";
  } else {
    if (a.winners_agree) out << "The winners agree and the orderings do not. ";
    if (!a.over_rated.empty()) {
      const auto it =
          std::find_if(a.rows.begin(), a.rows.end(), [&](const CostRow& r) { return r.name == a.over_rated; });
      out << fmt::format("Throughput over-rates `{}` the most: rank {} by throughput, {} by cost ({} place{} down).",
                         a.over_rated, it->rank_throughput,
                         it->reached_target ? std::to_string(it->rank_cost) : "last (target not reached)",
                         a.over_rated_places, a.over_rated_places == 1 ? "" : "s");
    }
    out << " The agreement or disagreement is a property of the hardware, not of the code: the samples a "
           "configuration needs belong to the optimisation, its samples/s to the device.\n";
  }
  if (a.cheapest != a.dearest) {
    const auto find = [&](const std::string& name) {
      return *std::find_if(a.rows.begin(), a.rows.end(), [&](const CostRow& r) { return r.name == name; });
    };
    const double speed_ratio = find(a.cheapest).samples_per_s.median / find(a.dearest).samples_per_s.median;
    out << fmt::format(
        "The spread: `{}` costs {:.2f}x `{}` to reach {:g}, where samples/s alone says {:.2f}x ({}); the rest is "
        "samples to target.\n",
        a.dearest, a.spread, a.cheapest, a.target, speed_ratio,
        speed_ratio < 1 ? "the dearer one is the faster" : "the cheaper one is the faster");
  }
  double worst_share = 0;
  std::string worst;
  for (const auto& r : a.rows) {
    if (r.reached_target && r.quantum_share > worst_share) {
      worst_share = r.quantum_share;
      worst = r.name;
    }
  }
  if (!worst.empty()) {
    out << fmt::format(
        "Stopping resolution: held-out {} is evaluated every {} steps, so samples to target is quantised to {} x "
        "batch samples, up to {:.0f}% of a row (`{}`); the bias is towards the larger batches.\n",
        cost_metric_name(a.metric), a.eval_every, a.eval_every, 100 * worst_share, worst);
  }
  for (const auto& r : a.rows) {
    if (!r.reached_target) out << fmt::format("`{}` did not reach the target: {}.\n", r.name, r.why_not);
  }
  return out.str();
}

std::vector<ScalingPoint> weak_scaling_points(const std::string& ledger_path, std::int64_t decode_cost,
                                              std::string* run_id, std::vector<std::string>* warnings,
                                              const ModelConfig& model) {
  std::error_code ec;
  TL_CHECK(std::filesystem::exists(ledger_path, ec),
           "cost study: --scaling-ledger '" + ledger_path + "' does not exist (run bench_scaling first)");
  const auto loaded = Ledger(ledger_path).load();
  if (warnings) warnings->insert(warnings->end(), loaded.warnings.begin(), loaded.warnings.end());
  // The latest run of this model with weak-scaling rows that communicate (a --bind-compare run has
  // none): another model's samples/s would price this model's samples to target at its speed.
  const std::string wanted = model_label(model);
  std::vector<ScalingRow> weak;
  std::set<std::string> others;
  for (auto& row : loaded.read<ScalingRow>(warnings)) {
    const ScalingConfig& c = row.config;
    if (!row.header.ok() || c.mode != "weak" || c.no_sync || c.bind_compare) continue;
    if (const std::string theirs = model_label(c.model, c.model_options); theirs != wanted) {
      others.insert(theirs);
      continue;
    }
    weak.push_back(std::move(row));
  }
  const auto [run, rows] = latest_run(weak);
  std::string trained;
  for (const auto& other : others) trained += (trained.empty() ? "" : ", ") + other;
  TL_CHECK(!run.empty(), "cost study: --scaling-ledger '" + ledger_path + "' holds no bench_scaling run of " + wanted +
                             (trained.empty() ? std::string() : " (its runs trained " + trained + ")"));
  std::map<int, std::pair<std::int64_t, std::vector<double>>> by_world;
  std::set<std::int64_t> decode_costs;
  for (const auto& row : rows) {
    decode_costs.insert(row.config.decode_cost);
    if (row.config.decode_cost != decode_cost) continue;
    auto& entry = by_world[row.config.world];
    entry.first = row.config.global_batch;
    entry.second.push_back(row.samples_per_s);
  }
  std::string have;
  for (auto d : decode_costs) {
    if (!have.empty()) have += ", ";
    have += std::to_string(d);
  }
  TL_CHECK(!by_world.empty(), fmt::format("cost study: bench_scaling run {} in '{}' has no weak-scaling rows at "
                                          "decode cost {} (it has: {})",
                                          run, ledger_path, decode_cost, have.empty() ? "none" : have));
  if (run_id) *run_id = run;
  std::vector<ScalingPoint> out;
  for (const auto& [world, entry] : by_world) out.push_back({world, entry.first, summarize(entry.second)});
  return out;
}

std::vector<BreakEvenRow> break_even(const std::vector<ScalingPoint>& points, const CostAnalysis& analysis,
                                     double rate) {
  std::vector<BreakEvenRow> out;
  for (const auto& p : points) {
    BreakEvenRow row;
    row.world = p.world;
    row.global_batch = p.global_batch;
    row.samples_per_s = p.samples_per_s.median;
    // The study's configuration at this global batch whose LR follows the rule, in f32: what the
    // scaled-out job would train.
    for (const auto& r : analysis.rows) {
      if (r.batch == p.global_batch && r.lr_follows_rule && r.dtype == "f32") {
        row.config = r.name;
        row.measured = r.reached_target;
        row.samples_to_target = r.samples_to_target;
        if (!r.reached_target) row.note = "`" + r.name + "` did not reach the target";
        break;
      }
    }
    if (row.config.empty())
      row.note = fmt::format("the study has no f32 configuration at batch {} with the LR rule", p.global_batch);
    if (row.measured) {
      row.hours = row.samples_to_target / row.samples_per_s / 3600.0;
      row.dollars = row.hours * rate * p.world;
    }
    out.push_back(row);
  }
  const auto base = std::find_if(out.begin(), out.end(), [](const BreakEvenRow& r) { return r.world == 1; });
  const BreakEvenRow world1 = base != out.end() ? *base : BreakEvenRow{};
  for (auto& row : out) {
    if (!row.measured) continue;
    if (!world1.measured) {
      if (row.note.empty()) row.note = "no world-1 figure to compare against";
      continue;
    }
    row.multiplier = row.dollars / world1.dollars;
    const double saved = world1.hours - row.hours;
    row.saves_time = saved > 0;
    if (row.world != 1 && saved > 0) row.dollars_per_hour_saved = (row.dollars - world1.dollars) / saved;
    if (row.world != 1 && saved <= 0) row.note = "no faster than world 1: scaling out buys no time here";
    if (row.world != 1 && saved > 0 && row.dollars <= world1.dollars)
      row.note = "faster and no dearer than world 1: nothing to trade";
  }
  return out;
}

std::string break_even_table(const std::vector<BreakEvenRow>& rows, bool markdown) {
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    if (!r.measured) {
      cells.push_back({std::to_string(r.world), std::to_string(r.global_batch), fmt::format("{:.1f}", r.samples_per_s),
                       r.config.empty() ? "-" : r.config, "-", "-", "-", "-", r.note});
      continue;
    }
    cells.push_back({std::to_string(r.world), std::to_string(r.global_batch), fmt::format("{:.1f}", r.samples_per_s),
                     r.config, fmt::format("{:.0f}", r.samples_to_target), fmt::format("{:.1f} s", r.hours * 3600),
                     money(r.dollars), r.multiplier > 0 ? fmt::format("{:.2f}x", r.multiplier) : "-",
                     r.world == 1                                   ? "-"
                     : r.saves_time && r.dollars_per_hour_saved > 0 ? money(r.dollars_per_hour_saved) + "/h saved"
                                                                    : r.note});
  }
  return render_table({"world", "global batch", "samples/s", "config", "samples to target", "time to target",
                       "$ to target", "cost vs world 1", "$ per hour saved"},
                      cells, markdown);
}

std::vector<CostConfigResult> cost_results_from_rows(const std::vector<CostRepeatRow>& rows) {
  std::vector<CostConfigResult> out;
  std::map<std::string, std::size_t> index;
  for (const auto& row : rows) {
    auto it = index.find(row.config_name);
    if (it == index.end()) {
      CostConfigResult r;
      r.name = row.config_name;
      r.batch = row.batch;
      r.lr = row.lr;
      r.lr_follows_rule = row.lr_follows_rule;
      r.dtype = row.dtype;
      it = index.emplace(row.config_name, out.size()).first;
      out.push_back(r);
    }
    CostRepeat rep;
    rep.failed = !row.header.ok();
    rep.error = row.error;
    if (!rep.failed) {
      rep.samples_per_s = row.samples_per_s;
      rep.reached = row.reached;
      rep.steps_to_target = rep.reached ? *row.steps_to_target : 0;
    }
    out[it->second].repeats.push_back(rep);
  }
  return out;
}

// Rank by throughput against rank by cost, each configuration joined across; the one throughput
// over-rates the most in red. A configuration that did not reach the target is ranked after every
// one that did.
chart::Figure cost_rank_figure(const CostAnalysis& a, const std::string& title) {
  const int unreached =
      static_cast<int>(std::count_if(a.rows.begin(), a.rows.end(), [](const CostRow& r) { return r.reached_target; })) +
      1;
  chart::RankChart ranks;
  ranks.left_title = "rank by throughput";
  ranks.right_title = "rank by cost";
  for (const auto& r : a.rows) {
    chart::RankItem item;
    item.left_rank = r.rank_throughput;
    item.right_rank = r.reached_target ? r.rank_cost : unreached;
    item.left_text = fmt::format("{} ({:.0f}/s)", r.name, r.samples_per_s.median);
    item.right_text = r.name + " (" + (r.reached_target ? money(r.dollars) : std::string("not reached")) + ")";
    item.highlight = r.name == a.over_rated;
    ranks.items.push_back(item);
  }
  return {title,
          {ranks},
          {fmt::format("left: the median samples/s order; right: $ to {} at ${}/h", target_phrase(a.metric, a.target),
                       a.rate),
           "red: the configuration throughput over-rates the most"}};
}

}  // namespace trainlab::bench
