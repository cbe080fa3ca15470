#include "studies/ladder/ladder.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <set>
#include <sstream>

#include "backends/registry.h"
#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "engine/instrument/profiler.h"
#include "engine/io/yaml_file.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"

namespace trainlab::bench {

namespace {

// Keys that say how a measurement is taken, not what is measured.
const std::set<std::string> kBookkeeping = {"steps",       "stop_at", "warmup",     "log_every", "eval_every",
                                            "eval_at_end", "save",    "save_every", "resume",    "trace"};

std::string number_text(double v) {
  std::ostringstream out;
  out.precision(10);
  out << v;
  return out.str();
}

Breakdown phase_breakdown(const PhaseTimes& totals, std::int64_t steps) {
  const double total = totals.total();
  const auto share = [&](double seconds) {
    return PhaseShare{steps > 0 ? seconds / static_cast<double>(steps) : 0.0, total > 0 ? seconds / total : 0.0};
  };
  return {share(totals.data_wait_s), share(totals.forward_s), share(totals.backward_s), share(totals.optimizer_s)};
}

}  // namespace

namespace {
LadderSpec ladder_from_yaml(const YAML::Node& root, const std::string& path);
}  // namespace

double LrRule::lr_for(std::int64_t batch) const {
  return base_lr * static_cast<double>(batch) / static_cast<double>(base_batch);
}

LadderSpec load_ladder(const std::string& path) { return ladder_from_yaml(load_yaml_file(path, "ladder file"), path); }

LadderSpec load_ladder_text(const std::string& text, const std::string& source) {
  return ladder_from_yaml(load_yaml_text(text, source), source);
}

namespace {
LadderSpec ladder_from_yaml(const YAML::Node& root, const std::string& path) {
  TL_CHECK(root.IsMap(), "ladder file '" + path + "' must be a map");
  static const std::set<std::string> allowed = {"ladder", "device", "base",    "rungs",
                                                "steps",  "warmup", "lr_rule", "data"};
  for (const auto& item : root) {
    TL_CHECK(item.first.IsScalar(), path + ": every key must be a plain name");
    const std::string key = item.first.Scalar();
    TL_CHECK(allowed.count(key), path + ": unknown key " + quote_value(key) +
                                     " (allowed: ladder, device, base, rungs, steps, warmup, lr_rule, data)");
  }
  LadderSpec spec;
  try {
    spec.name = root["ladder"].as<std::string>();
    spec.device = root["device"].as<std::string>();
    TL_CHECK(spec.device == "cpu" || spec.device == "cuda",
             path + ": device must be cpu or cuda, got '" + spec.device + "'");
    spec.base = yaml_map(root["base"], path + ": base");
    if (root["data"]) use_data_set(spec.base, root["data"].as<std::string>());
    if (root["steps"]) {
      spec.quick_steps = root["steps"]["quick"].as<std::int64_t>();
      spec.full_steps = root["steps"]["full"].as<std::int64_t>();
    }
    if (root["warmup"]) spec.warmup = root["warmup"].as<std::int64_t>();
    TL_CHECK(spec.quick_steps >= 1 && spec.full_steps >= 1 && spec.warmup >= 0,
             path + ": steps must be >= 1 and warmup >= 0");
    if (root["lr_rule"]) {
      const std::string kind = root["lr_rule"]["kind"].as<std::string>();
      TL_CHECK(kind == "linear",
               path + ": lr_rule kind must be 'linear' (lr = base lr * batch / base_batch), got '" + kind + "'");
      for (const auto& item : root["lr_rule"]) {
        const std::string key = item.first.as<std::string>();
        TL_CHECK(key == "kind" || key == "base_batch" || key == "warmup_steps",
                 path + ": lr_rule: unknown key " + quote_value(key) + " (allowed: kind, base_batch, warmup_steps)");
      }
      spec.lr_rule.base_batch = root["lr_rule"]["base_batch"].as<std::int64_t>();
      TL_CHECK(spec.lr_rule.base_batch >= 1, path + ": lr_rule base_batch must be >= 1");
      if (root["lr_rule"]["warmup_steps"])
        spec.lr_rule.warmup_steps = root["lr_rule"]["warmup_steps"].as<std::int64_t>();
      TL_CHECK(spec.lr_rule.warmup_steps >= 0,
               path + ": lr_rule warmup_steps must be >= 0, got " + std::to_string(spec.lr_rule.warmup_steps));
    }
    TL_CHECK(root["rungs"] && root["rungs"].IsSequence() && root["rungs"].size() >= 1,
             path + ": rungs must be a list with at least the baseline");
    std::set<std::string> names;
    for (const auto& node : root["rungs"]) {
      Rung rung;
      rung.name = node["name"].as<std::string>();
      TL_CHECK(names.insert(rung.name).second, path + ": rung name '" + rung.name + "' appears twice");
      rung.set = yaml_map(node["set"], path + ": rung '" + rung.name + "' set");
      if (node["needs"]) rung.needs = node["needs"].as<std::string>();
      if (node["skip_reason"]) rung.skip_reason = node["skip_reason"].as<std::string>();
      if (node["note"]) rung.note = node["note"].as<std::string>();
      TL_CHECK(rung.needs.empty() || !rung.skip_reason.empty(),
               path + ": rung '" + rung.name + "' needs " + rung.needs + " and must say why (skip_reason)");
      spec.rungs.push_back(std::move(rung));
    }
  } catch (const YAML::Exception& e) {
    throw Error("ladder file '" + path + "': " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  // Every config is valid, and every step changes one knob.
  const auto configs = rung_configs(spec);
  for (std::size_t i = 1; i < configs.size(); ++i)
    single_change(configs[i - 1], configs[i], spec.lr_rule, spec.rungs[i].name);
  return spec;
}
}  // namespace

bool rung_runs_on(const Rung& rung, const std::string& device_type) {
  return rung.needs.empty() || rung.needs == device_type;
}

std::string rung_model_skip_reason(const Rung& rung, const ModelConfig& model) {
  // The loader's knobs hide decoding behind the step; a token model's windows are copied out of memory
  // (a data set's shards are read once), so there is no work for them to hide.
  static const std::set<std::string> loader_knobs = {"workers", "persistent_workers", "prefetch"};
  const ModelDef& def = find_model(model.name);
  if (def.context) {
    for (const auto& [key, value] : rung.set) {
      if (loader_knobs.count(key) > 0)
        return model_label(model) +
               " trains on windows of token ids copied from memory, with nothing to decode: " + key +
               " has no loading work to take off the step, so the rung does not apply to this model";
    }
  }
  // Only these knobs act on what the model runs; every other one (the batch, the dtype, CUDA graphs)
  // applies to any model, and no probe is built for it.
  static const std::set<std::string> model_knobs = {"layout", "recompute", "fuse", "tf32"};
  TrainConfig knobs;
  bool any = false;
  for (const auto& [key, value] : rung.set) {
    if (model_knobs.count(key) == 0) continue;
    apply_config_value(knobs, key, value, "rung '" + rung.name + "'");
    any = true;
  }
  if (!any) return "";
  const std::shared_ptr<Module> probe = probe_model(model);
  const std::set<BackendOp> ops = probe->ops_used();
  const bool four_d = ops.count(BackendOp::conv2d) > 0 || ops.count(BackendOp::max_pool2d) > 0;
  const bool matmuls = ops.count(BackendOp::conv2d) > 0 || ops.count(BackendOp::linear) > 0;
  const std::string name = model_label(model);
  const ExecutionConfig& x = knobs.execution;
  if (x.layout == MemoryFormat::channels_last && !four_d)
    return name +
           " runs no 4-D op (conv2d, max_pool2d): layout nhwc would only reorder each input batch before its first "
           "layer, so the rung does not apply to this model";
  if (x.recompute != Recompute::none) {
    try {
      probe->set_recompute(x.recompute);
    } catch (const Error& e) {
      return name + " takes no recompute " + recompute_name(x.recompute) + " (" + e.what() +
             "), so the rung does not apply to this model";
    }
  }
  if ((x.fuse || x.tf32) && !matmuls)
    return name + " has no convolution or linear layer (what " + (x.fuse ? "fusion" : "TF32") +
           " acts on), so the rung does not apply to this model";
  return "";
}

std::vector<TrainConfig> rung_configs(const LadderSpec& spec, const std::string& device_type) {
  const std::string origin = "ladder '" + spec.name + "'";
  TrainConfig current = config_from(spec.base, origin + " base");
  std::vector<TrainConfig> out;
  // The rule is anchored at the base point: lr is proportional to the batch from (base batch, base
  // lr), the same reading single_change checks a batch rung against.
  LrRule rule = spec.lr_rule;
  rule.base_lr = current.optimizer.lr * static_cast<double>(rule.base_batch) / static_cast<double>(current.batch);
  for (const auto& rung : spec.rungs) {
    if (!device_type.empty() &&
        (!rung_runs_on(rung, device_type) || !rung_model_skip_reason(rung, current.model).empty())) {
      out.push_back(current);  // skipped here: nothing changes
      continue;
    }
    // Applied through the config table: unknown keys and bad values are refused here, by name.
    for (const auto& [key, value] : rung.set) {
      apply_config_value(current, key, value, origin + " rung '" + rung.name + "'");
    }
    // The LR follows from the batch unless the rung sets it (then it is a knob of its own).
    // (As decimal text of 10 significant digits, the way a ladder file would declare it.)
    // A larger LR by the rule warms up over the rule's steps, as part of the same change.
    if (!rung.set.count("lr") && rung.set.count("batch")) {
      const double lr = std::stod(number_text(rule.lr_for(current.batch)));
      if (lr > current.optimizer.lr && rule.warmup_steps > 0 && !rung.set.count("warmup_steps"))
        current.optimizer.warmup_steps = rule.warmup_steps;
      current.optimizer.lr = lr;
    }
    out.push_back(current);
  }
  return out;
}

std::optional<Change> single_change(const TrainConfig& before, const TrainConfig& after, const LrRule& rule,
                                    const std::string& rung) {
  std::vector<const ConfigField*> changed;
  for (const auto& field : config_fields()) {
    if (kBookkeeping.count(field.key) == 0 && !field.same(before, after)) changed.push_back(&field);
  }
  if (changed.empty()) return std::nullopt;
  const auto has = [&](const char* key) {
    return std::any_of(changed.begin(), changed.end(), [&](const ConfigField* f) { return f->key == key; });
  };
  // batch with the LR its rule gives (and, where the rule has one, its warm-up) is one change.
  const bool warmed = has("warmup_steps") && rule.warmup_steps > 0 && after.optimizer.warmup_steps == rule.warmup_steps;
  if (changed.size() == (warmed ? 3u : 2u) && has("batch") && has("lr")) {
    LrRule r = rule;
    r.base_lr = before.optimizer.lr * static_cast<double>(rule.base_batch) / static_cast<double>(before.batch);
    const double expected = r.lr_for(after.batch);
    if (std::abs(after.optimizer.lr - expected) <= 1e-12 * std::max(1.0, std::abs(expected))) {
      const ConfigField& lr = config_field("lr");
      const std::string warmup = warmed ? fmt::format(", {}-step warm-up", rule.warmup_steps) : "";
      return Change{warmed ? "batch (+ LR rule, warm-up)" : "batch (+ LR rule)",
                    std::to_string(before.batch) + " (lr " + lr.get(before) + ")",
                    std::to_string(after.batch) + " (lr " + lr.get(after) + warmup + ")"};
    }
  }
  if (changed.size() > 1) {
    std::string names;
    for (const ConfigField* f : changed)
      names += (names.empty() ? "" : ", ") + f->key + " (" + f->get(before) + " -> " + f->get(after) + ")";
    throw Error("rung '" + rung + "' changes " + std::to_string(changed.size()) +
                " knobs against the previous rung: " + names +
                "; a rung must change exactly one (batch with its LR rule, and the rule's warm-up, counts as one)");
  }
  return Change{changed[0]->key, changed[0]->get(before), changed[0]->get(after)};
}

// ---------------------------------------------------------------------------------------------
// running

namespace {

struct Arm {
  std::string name;
  std::size_t index;  // position in the ladder (calibration arms share the baseline's config)
  TrainConfig config;
  const Rung* rung = nullptr;
  std::optional<Change> change;
  bool calibration = false;
  std::string skip_reason;
  std::string error;
  std::vector<double> accuracies;  // held-out accuracy after each repeat's training (seed + repeat)
  std::optional<TrainConfig> ran;  // as it ran (the runner's steps, warm-up and evaluation settings, the backend)
  // What the backend ran natively and what it emulated (the planner's answer, engine/train/step.h).
  std::map<std::string, std::string> compute;
  std::string emulated;
  std::vector<double> values;
  PhaseTimes phases;
  std::int64_t measured_steps = 0, warmup_steps = 0;
  Environment env;
};

// What every row of an arm says (its repeat rows and its rung row).
RowHeader arm_header(const Arm& arm, const std::string& run_id, const char* kind) {
  RowHeader h;
  h.env = arm.env;
  h.kind = kind;
  h.run_id = run_id;
  return h;
}

LadderArmFields arm_fields(const Arm& arm, const LadderSpec& spec) {
  LadderArmFields f;
  f.ladder = spec.name;
  f.rung = arm.name;
  f.rung_index = static_cast<std::int64_t>(arm.index);
  f.calibration = arm.calibration;
  f.config = knobs_of(arm.ran ? *arm.ran : arm.config);
  f.data = data_source_of(arm.config.data, arm.config.model);
  f.changed = arm.change;
  if (arm.rung) f.note = arm.rung->note;
  return f;
}

Environment environment_for(const TrainConfig& config) {
  Backend& backend = get_backend(config.execution.backend.empty() ? default_backend_name() : config.execution.backend);
  if (config.execution.threads > 0) backend.set_num_threads(config.execution.threads);
  return current_environment(backend);
}

}  // namespace

namespace {

// The arms in the order every round measures them: the rungs, between the two calibration arms
// (two secretly identical copies of the baseline) when asked for.
struct LadderPlan {
  std::vector<Arm> arms;
  std::vector<std::size_t> order;
};

LadderPlan plan_arms(const LadderSpec& spec, bool calibrate) {
  // The device the baseline runs on decides which rungs are skipped; their knobs are not applied.
  const std::string device_type = environment_for(rung_configs(spec).front()).device.type;
  const auto declared = rung_configs(spec);
  const auto configs = rung_configs(spec, device_type);
  LadderPlan plan;
  for (std::size_t i = 0; i < spec.rungs.size(); ++i) {
    Arm arm;
    arm.name = spec.rungs[i].name;
    arm.index = i;
    arm.rung = &spec.rungs[i];
    // Skipped where it needs another device, or where its knob does nothing for the model (the
    // model of the config it would be applied to, as rung_configs asks).
    const bool on_device = rung_runs_on(spec.rungs[i], device_type);
    const std::string model_reason =
        on_device ? rung_model_skip_reason(spec.rungs[i], configs[i == 0 ? 0 : i - 1].model) : "";
    const bool runs = on_device && model_reason.empty();
    const auto& chain = runs ? configs : declared;  // a skipped rung: what it would have run
    if (!runs) arm.skip_reason = on_device ? model_reason : spec.rungs[i].skip_reason;
    arm.config = chain[i];
    if (i > 0) arm.change = single_change(chain[i - 1], chain[i], spec.lr_rule, arm.name);
    arm.env = environment_for(arm.config);
    plan.arms.push_back(std::move(arm));
  }
  if (calibrate) {
    for (const char* name : {"calibration A", "calibration B"}) {
      Arm arm;
      arm.name = name;
      arm.index = spec.rungs.size() + (name[12] == 'A' ? 0 : 1);
      arm.config = configs[0];
      arm.calibration = true;
      arm.env = plan.arms[0].env;
      plan.arms.push_back(std::move(arm));
    }
    plan.order.push_back(plan.arms.size() - 2);
  }
  for (std::size_t i = 0; i < spec.rungs.size(); ++i) plan.order.push_back(i);
  if (calibrate) plan.order.push_back(plan.arms.size() - 1);
  return plan;
}

// An arm's rung row: its repeats and their statistics, or why it was skipped or failed.
LadderRungRow rung_row(const Arm& arm, const std::string& run_id, const LadderSpec& spec) {
  LadderRungRow row;
  row.header = arm_header(arm, run_id, LadderRungRow::kKind);
  row.arm = arm_fields(arm, spec);
  if (!arm.skip_reason.empty()) {
    row.header.status = "skipped";
    row.arm.reason = arm.skip_reason;
  } else if (!arm.error.empty()) {
    row.header.status = "failed";
    row.arm.error = arm.error;
    row.repeats = arm.values;
  } else {
    row.header.status = "ok";
    row.repeats = arm.values;
    row.arm.compute = arm.compute;
    row.arm.emulated = arm.emulated;
    row.stats = summarize(arm.values);
    row.arm.breakdown = phase_breakdown(arm.phases, arm.measured_steps);
    row.arm.warmup_steps_excluded = arm.warmup_steps;
    row.arm.measured_steps = arm.measured_steps;
    row.arm.held_out_accuracies = arm.accuracies;
    if (!arm.accuracies.empty()) row.arm.held_out_accuracy = summarize(arm.accuracies).median;
  }
  return row;
}

// The configuration of one repeat of an arm: its steps, warm-up excluded, no logging, the seed +
// repeat; each rung's run ends with a held-out evaluation (after its measured steps, outside the
// timing), so a rung that is fast because it stopped learning shows, against the seeds' spread.
TrainConfig repeat_config(const Arm& arm, const LadderSpec& spec, const LadderOptions& options, int repeat) {
  TrainConfig config = arm.config;
  config.seed = arm.config.seed + static_cast<std::uint64_t>(repeat);
  config.steps = spec.warmup + (options.quick ? spec.quick_steps : spec.full_steps);
  config.reporting.warmup = spec.warmup;
  config.reporting.eval_every = 0;
  config.reporting.log_every = config.steps + 1;
  if (config.execution.backend.empty()) config.execution.backend = default_backend_name();  // the trainer's
  config.reporting.eval_at_end = !arm.calibration;
  return config;
}

// One repeat of an arm, measured into its repeat row and the arm's totals; returns the data wait's
// share of the step (for the progress line). Throws what the trainer throws.
double measure_repeat(Arm& arm, const TrainConfig& config, LadderRepeatRow& row) {
  Trainer trainer(config);
  const TrainResult result = trainer.train(nullptr);
  arm.env.backend_describe = trainer.backend().describe();  // now with the kernels it picked
  row.header.env.backend_describe = arm.env.backend_describe;
  arm.compute.clear();
  for (const auto& [op, support] : trainer.step_plan().paths()) arm.compute[op] = support;
  arm.emulated = trainer.step_plan().emulated();
  row.arm.compute = arm.compute;
  row.arm.emulated = arm.emulated;
  arm.values.push_back(result.samples_per_s);
  arm.phases += result.measured;
  arm.measured_steps += result.measured_steps;
  arm.warmup_steps = result.warmup_steps;
  row.header.status = "ok";
  row.value = result.samples_per_s;
  row.arm.breakdown = phase_breakdown(result.measured, result.measured_steps);
  row.arm.warmup_steps_excluded = result.warmup_steps;
  row.arm.measured_steps = result.measured_steps;
  row.memory = json::parse(memory_usage_json(result.memory, result.memory_device));  // by category
  if (config.reporting.eval_at_end) {
    row.arm.held_out_accuracy = result.final_eval.accuracy;
    arm.accuracies.push_back(result.final_eval.accuracy);
  }
  return result.measured.total() > 0 ? result.measured.data_wait_s / result.measured.total() : 0;
}

}  // namespace

LadderRun run_ladder(const LadderSpec& spec, const LadderOptions& options) {
  TL_CHECK(options.repeats >= 1, "ladder: repeats must be >= 1, got " + std::to_string(options.repeats));
  LadderPlan plan = plan_arms(spec, options.calibrate);
  std::vector<Arm>& arms = plan.arms;
  LadderRun run;
  run.run_id = new_run_id();
  run.ledger_path = options.ledger_path.empty() ? default_ledger_path(spec.device) : options.ledger_path;
  const Ledger ledger(run.ledger_path);
  std::ostream* log = options.log;
  if (log) {
    *log << fmt::format(
        "ladder '{}' of {} on {} ({}), {} repeats of {} measured steps after {} warm-up steps, run {}\n", spec.name,
        model_label(arms[0].config.model), arms[0].env.device.name, arms[0].env.backend_describe, options.repeats,
        options.quick ? spec.quick_steps : spec.full_steps, spec.warmup, run.run_id);
    *log << fmt::format("data: {}\nledger: {}\n", data_source_of(arms[0].config.data, arms[0].config.model).label(),
                        run.ledger_path);
  }
  // Skipped rungs are recorded before anything runs.
  for (const Arm& arm : arms) {
    if (arm.skip_reason.empty()) continue;
    ledger.append(rung_row(arm, run.run_id, spec));
    if (log) *log << fmt::format("rung {:<20} skipped: {}\n", arm.name, arm.skip_reason);
  }
  const int total = options.repeats * static_cast<int>(plan.order.size());
  int done = 0;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    for (std::size_t position : plan.order) {
      Arm& arm = arms[position];
      ++done;
      if (!arm.skip_reason.empty() || !arm.error.empty()) continue;  // an arm that stopped is passed by
      TrainConfig config = repeat_config(arm, spec, options, repeat);
      arm.ran = config;
      if (options.trace && repeat == 0 && !arm.calibration) {
        config.reporting.trace =
            (std::filesystem::path(options.trace_dir) / (spec.name + "_" + arm.name + ".json")).string();
      }
      LadderRepeatRow row;
      row.header = arm_header(arm, run.run_id, LadderRepeatRow::kKind);
      row.arm = arm_fields(arm, spec);
      row.repeat = repeat;
      std::string stopped;  // "skipped" or "failed": the arm cannot go on
      double data_wait_share = 0;
      try {
        data_wait_share = measure_repeat(arm, config, row);
      } catch (const Unsupported& e) {
        // A capability question answered no (the planner, before any step): the rung cannot run on
        // this machine, which is a skip with the reason, never a failure. The ladder goes on.
        arm.skip_reason = row.arm.reason = e.what();
        stopped = "skipped";
      } catch (const std::exception& e) {
        // A rung that crashes is a failed row with its error; the ladder goes on.
        arm.error = row.arm.error = e.what();
        stopped = "failed";
      }
      if (!stopped.empty()) row.header.status = stopped;
      ledger.append(row);
      if (!stopped.empty()) ledger.append(rung_row(arm, run.run_id, spec));
      if (!log) continue;
      const std::string what =
          stopped.empty() ? fmt::format("{:>9.1f} samples/s  data-wait {:>5.1f}%", *row.value, 100 * data_wait_share)
                          : fmt::format("{}: {}", stopped == "failed" ? "FAILED" : stopped,
                                        stopped == "failed" ? arm.error : arm.skip_reason);
      *log << fmt::format("[{:>3}/{}] repeat {}/{}  {:<20} {}\n", done, total, repeat + 1, options.repeats, arm.name,
                          what);
      log->flush();
    }
  }
  // The arms that ran to the end, in ladder order, through the accuracy guard, then recorded.
  std::vector<LadderRungRow> finished;
  for (const Arm& arm : arms)
    if (arm.skip_reason.empty() && arm.error.empty()) finished.push_back(rung_row(arm, run.run_id, spec));
  accuracy_guard(finished);
  for (const LadderRungRow& row : finished) {
    ledger.append(row);
    if (log && row.arm.breaks_training) *log << fmt::format("rung {:<20} {}\n", row.arm.rung, row.arm.accuracy_check);
  }
  // The rows, in ladder order, from the ledger itself (what a report will see).
  for (const auto& row : ledger.load().read<LadderRungRow>())
    if (row.header.run_id == run.run_id) run.rung_rows.push_back(row);
  std::stable_sort(run.rung_rows.begin(), run.rung_rows.end(),
                   [](const LadderRungRow& a, const LadderRungRow& b) { return a.arm.rung_index < b.arm.rung_index; });
  return run;
}

// ---------------------------------------------------------------------------------------------
// the plan

std::string plan_ladder(const LadderSpec& spec, bool quick) {
  const auto configs = rung_configs(spec);  // the baseline is the same on every device
  TrainConfig config = configs[0];
  const std::int64_t steps = quick ? spec.quick_steps : spec.full_steps;
  config.steps = spec.warmup + steps;
  config.reporting.warmup = spec.warmup;
  config.reporting.eval_at_end = false;
  config.reporting.log_every = config.steps + 1;
  Profiler& profiler = Profiler::instance();
  Trainer trainer(config);
  profiler.clear();
  profiler.set_enabled(true);
  const TrainResult result = trainer.train(nullptr);
  profiler.set_enabled(false);
  std::map<std::string, double> op_seconds;
  for (const auto& span : profiler.take())
    op_seconds[span.name] += static_cast<double>(span.end_ns - span.start_ns) * 1e-9;

  std::ostringstream out;
  const PhaseTimes& m = result.measured;
  const double total = m.total();
  out << fmt::format("baseline '{}' of {} ({} measured steps, {} warm-up excluded): {:.1f} samples/s\n",
                     spec.rungs[0].name, model_label(config.model), result.measured_steps, result.warmup_steps,
                     result.samples_per_s);
  const std::pair<const char*, double> phases[] = {
      {"data_wait", m.data_wait_s}, {"forward", m.forward_s}, {"backward", m.backward_s}, {"optimizer", m.optimizer_s}};
  out << "step breakdown:\n";
  for (const auto& [name, seconds] : phases) {
    out << fmt::format("  {:<10} {:>8.2f} ms/step  {:>5.1f}%\n", name,
                       1000 * seconds / static_cast<double>(std::max<std::int64_t>(1, result.measured_steps)),
                       100 * seconds / total);
  }
  std::vector<std::pair<double, std::string>> ops;
  for (const auto& [name, seconds] : op_seconds) {
    if (name == "step" || name == "data_wait" || name == "forward" || name == "backward" || name == "optimizer")
      continue;
    ops.emplace_back(seconds, name);
  }
  std::sort(ops.rbegin(), ops.rend());
  out << "largest spans inside the phases (inclusive, so nested spans overlap):\n";
  for (std::size_t i = 0; i < std::min<std::size_t>(8, ops.size()); ++i) {
    out << fmt::format("  {:<32} {:>8.2f} ms/step\n", ops[i].second,
                       1000 * ops[i].first / static_cast<double>(std::max<std::int64_t>(1, result.measured_steps)));
  }
  const auto largest = *std::max_element(std::begin(phases), std::end(phases),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
  const std::string category = largest.first;
  std::string points_to;
  if (category == "data_wait") {
    points_to =
        "the input pipeline: workers first (then persistent_workers, prefetch); precision and layout cannot "
        "help while the device waits for data";
  } else if (category == "optimizer") {
    points_to = "the optimiser step: compile (fused kernels, pre-planned buffers)";
  } else {
    points_to = "compute: amp_bf16, channels_last, compile (in the order the top spans suggest)";
  }
  out << fmt::format("largest exposed category: {} ({:.1f}% of the step) -> {}\n", category,
                     100 * largest.second / total, points_to);
  // Does the ladder's order follow the profile?
  if (spec.rungs.size() > 1) {
    const std::string first = spec.rungs[1].name;
    const bool data_first = first.find("worker") != std::string::npos || first.find("prefetch") != std::string::npos;
    if ((category == "data_wait") != data_first) {
      out << fmt::format("note: the ladder's first rung is '{}', which the profile does not point to first\n", first);
    } else {
      out << fmt::format("the ladder's first rung, '{}', is the one the profile points to\n", first);
    }
  }
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// the accuracy guard

namespace {
std::vector<double> accuracies_of(const LadderRungRow& row) {
  if (!row.arm.held_out_accuracies.empty()) return row.arm.held_out_accuracies;
  if (row.arm.held_out_accuracy) return {*row.arm.held_out_accuracy};  // a row from before the guard
  return {};
}
std::string percent_range(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{:.1f}-{:.1f}%", 100 * *lo, 100 * *hi);
}
}  // namespace

void accuracy_guard(std::vector<LadderRungRow>& rows) {
  const LadderRungRow* baseline = nullptr;
  const LadderRungRow* previous = nullptr;  // the last rung that still trains
  for (LadderRungRow& row : rows) {
    if (row.arm.calibration || !row.header.ok()) continue;
    row.arm.breaks_training = false;
    const std::vector<double> own = accuracies_of(row);
    if (baseline == nullptr) {
      baseline = previous = &row;
      row.arm.accuracy_check = own.empty()
                                   ? "not checked: no held-out evaluation"
                                   : fmt::format("the reference: {} seed(s), {}", own.size(), percent_range(own));
      continue;
    }
    std::vector<double> reference = accuracies_of(*baseline);
    if (previous != baseline) {
      const std::vector<double> prev = accuracies_of(*previous);
      reference.insert(reference.end(), prev.begin(), prev.end());
    }
    if (own.size() < 2 || accuracies_of(*baseline).size() < 2) {
      row.arm.accuracy_check = "not checked: the guard needs held-out accuracy from 2 or more seeds (--repeats >= 2)";
      previous = &row;
      continue;
    }
    const auto [lo, hi] = std::minmax_element(reference.begin(), reference.end());
    const double spread = std::max(*hi - *lo, 0.01), median = summarize(own).median;
    const std::string against =
        previous == baseline ? "the baseline's" : "the baseline's and " + previous->arm.rung + "'s";
    if (median < *lo - spread) {
      row.arm.breaks_training = true;
      row.arm.accuracy_check = fmt::format(
          "BREAKS TRAINING: held-out accuracy {:.1f}% (median of {} seeds, {}), below the lowest of {} seeds "
          "({:.1f}%) by more than their spread ({:.1f} points): its speed is not a gain",
          100 * median, own.size(), percent_range(own), against, 100 * *lo, 100 * spread);
      continue;  // the next rung is checked against the last one that trains
    }
    row.arm.accuracy_check =
        fmt::format("trains: {:.1f}% (median of {} seeds, {}) within {} seeds' {} less their spread", 100 * median,
                    own.size(), percent_range(own), against, percent_range(reference));
    previous = &row;
  }
}

// ---------------------------------------------------------------------------------------------
// the table

std::string ladder_table(const std::vector<LadderRungRow>& rows, bool markdown) {
  TL_CHECK(!rows.empty(), "ladder table: no rows");
  // One table never mixes devices or engine versions.
  const Environment& first = rows.front().header.env;
  for (const auto& row : rows) {
    const Environment& env = row.header.env;
    TL_CHECK(env.device == first.device, "ladder table: rows from different devices (" + first.device.name + " and " +
                                             env.device.name + ") are never merged into one table");
    TL_CHECK(env.engine() == first.engine(), "ladder table: rows from different engine versions (" + first.engine() +
                                                 " and " + env.engine() + ") are never merged into one table");
  }
  const std::optional<Calibration> calibration = ladder_calibration(rows);

  std::ostringstream out;
  if (markdown) {
    out << "| rung | samples/s | ± | min-max | data-wait | vs prev | x noise floor | separable? |\n"
           "|---|---|---|---|---|---|---|---|\n";
  } else {
    out << fmt::format("{:<26} {:>10} {:>8} {:>21} {:>9} {:>9} {:>7}  {}\n", "rung", "samples/s", "±", "min-max",
                       "data-wait", "vs prev", "x floor", "separable?");
  }
  std::optional<Summary> previous;
  for (const auto& row : rows) {
    if (row.arm.calibration) continue;
    const std::string& name = row.arm.rung;
    if (!row.header.ok()) {
      const std::string why =
          row.header.status == "skipped" ? "skipped: " + row.arm.reason : "failed: " + row.arm.error;
      if (markdown) {
        out << fmt::format("| {} | {} | | | | | | |\n", name, why);
      } else {
        out << fmt::format("{:<26} {}\n", name, why);
      }
      continue;
    }
    const Summary& s = *row.stats;
    const double wait = row.arm.breakdown->data_wait.share * 100;
    // A rung whose ops ran emulated says so by its name (the note below the table says which).
    const std::string shown = row.arm.emulated.empty() ? name : name + " (emulated)";
    std::string vs = "-", floors = "-", sep = "-";
    if (previous) {
      const double effect = effect_percent(s, *previous);
      vs = fmt::format("{:+.1f}%", effect);
      floors = floor_multiple_text(effect, calibration);
      sep = row.arm.breaks_training ? std::string("breaks training: not a gain")
                                    : verdict_text(verdict(s, *previous, calibration));
    }
    if (markdown) {
      out << fmt::format("| {} | {:.1f} | {:.1f} | {:.1f}-{:.1f} | {:.1f}% | {} | {} | {} |\n", shown, s.median, s.std,
                         s.min, s.max, wait, vs, floors, sep);
    } else {
      out << fmt::format("{:<26} {:>10.1f} {:>8.1f} {:>10.1f}-{:<10.1f} {:>8.1f}% {:>9} {:>7}  {}\n", shown, s.median,
                         s.std, s.min, s.max, wait, vs, floors, sep);
    }
    previous = s;
  }
  out << ladder_table_notes(rows, calibration, markdown);
  return out.str();
}

std::optional<Calibration> ladder_calibration(const std::vector<LadderRungRow>& rows) {
  std::vector<double> arm_a, arm_b;
  for (const auto& row : rows) {
    if (!row.arm.calibration || !row.header.ok()) continue;
    (row.arm.rung == "calibration A" ? arm_a : arm_b) = row.repeats;
  }
  if (arm_a.empty() || arm_b.empty()) return std::nullopt;
  return calibrate(arm_a, arm_b);
}

std::string ladder_table_notes(const std::vector<LadderRungRow>& rows, const std::optional<Calibration>& calibration,
                               bool markdown) {
  std::ostringstream out;
  if (calibration) {
    out << fmt::format(
        "{}noise floor: {:.1f}% (calibration arms, the baseline measured twice per round: {:.1f} "
        "[{:.1f}-{:.1f}] and {:.1f} [{:.1f}-{:.1f}]); {}\n",
        markdown ? "\n" : "", calibration->noise_floor_percent, calibration->a.median, calibration->a.min,
        calibration->a.max, calibration->b.median, calibration->b.min, calibration->b.max,
        calibration->valid ? "the arms overlap, so separability verdicts stand"
                           : "the arms came out SEPARABLE although identical: at this number of "
                             "repeats the test is unsound, so every verdict is NO CONCLUSION");
  } else {
    out << (markdown ? "\n" : "") << "noise floor: not measured (run with --calibrate)\n";
  }
  // What ran emulated, once per distinct answer, with the rungs it applies to: on a CPU without
  // native bf16 the bf16 rungs pay for conversions the native path does not (seed 000's negative
  // result, kept in the table).
  std::vector<std::pair<std::string, std::string>> emulated;  // (what, rungs)
  for (const auto& row : rows) {
    if (row.arm.calibration || !row.header.ok() || row.arm.emulated.empty()) continue;
    auto it =
        std::find_if(emulated.begin(), emulated.end(), [&](const auto& e) { return e.first == row.arm.emulated; });
    if (it == emulated.end()) {
      emulated.emplace_back(row.arm.emulated, row.arm.rung);
    } else {
      it->second += ", " + row.arm.rung;
    }
  }
  for (const auto& [what, rungs] : emulated)
    out << fmt::format("{}emulated on this CPU ({}): {}\n", markdown ? "\n" : "", rungs, what);
  std::string accuracies, broken;
  std::int64_t steps = 0;
  std::size_t seeds = 0;
  for (const auto& row : rows) {
    if (!row.arm.held_out_accuracy) continue;
    const std::vector<double> each = accuracies_of(row);
    seeds = std::max(seeds, each.size());
    accuracies +=
        fmt::format("{}{} {:.1f}%{}", accuracies.empty() ? "" : ", ", row.arm.rung, 100 * *row.arm.held_out_accuracy,
                    each.size() > 1 ? " (" + percent_range(each) + ")" : "");
    if (row.arm.breaks_training)
      broken += fmt::format("{}{}: {}\n", markdown ? "\n" : "", row.arm.rung, row.arm.accuracy_check);
    if (const auto it = row.arm.config.find("steps"); it != row.arm.config.end()) {
      try {
        steps = std::stoll(it->second);
      } catch (const std::exception&) {
        steps = 0;  // a damaged row's text: the line says 0 steps rather than stop the table
      }
    }
  }
  if (!accuracies.empty()) {
    // (Rows from before the guard evaluated the first run only.)
    out << fmt::format("{}held-out accuracy after each rung's {} ({} steps from scratch{}): {}\n", markdown ? "\n" : "",
                       seeds > 1 ? "runs" : "first run", steps,
                       seeds > 1 ? fmt::format("; median (min-max) of {} seeds", seeds) : std::string(), accuracies);
  }
  out << broken;
  return out.str();
}

}  // namespace trainlab::bench
