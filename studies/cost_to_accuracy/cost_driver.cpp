// The cost-to-accuracy study's driver (seed 000): what does it cost to reach a model this good?
//
//   build/bin/cost_to_accuracy --rate 0.35 [--config configs/cost_cpu.yaml] [--quick]
//                              [--scaling-ledger results/ledger_cpu.jsonl]
//
// Each configuration of the study file trains the model (the file's, or --model's; SmallCNN by
// default) on SyntheticImages (or --data) from scratch until
// held-out accuracy reaches the target on `consecutive` evaluations in a row (the trainer's stop
// rule; evaluation outside the timing), R repeats interleaved across configurations (A B C ... A B
// C ...). Each repeat is a ledger row as soon as it ends. The table ranks the configurations by
// throughput and by $ to target, over the full orderings; the findings say where they disagree.
// The device is the configuration's backend (a CUDA study file runs on the GPU), and every time is
// the backend's own timer (CUDA events there), never the host's clock around queued work.
#include <fmt/format.h>
#include <cstdio>
#include <iostream>

#include "backends/registry.h"
#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "engine/train/trainer.h"
#include "studies/cost_to_accuracy/cost_study.h"
#include "studies/cost_to_accuracy/rows.h"

namespace trainlab::bench {

namespace {

// The study file for this machine: the GPU's where the cuda backend is built in and finds a device
// (seed 000's first GPU bug was a cost study that measured the CPU on a rented GPU).
std::string default_study_file() {
  for (const auto& info : registered_backends()) {
    if (info.device_type != DeviceType::cuda) continue;
    try {
      get_backend(info.name);
      return "configs/cost_cuda.yaml";
    } catch (const Error&) {
      // built in, but no device here
    }
  }
  return "configs/cost_cpu.yaml";
}

// One run of the study: its file, its configurations, where it runs and where its rows go.
struct CostRun {
  CostOptions o;
  CostStudySpec spec;
  std::vector<TrainConfig> configs;
  int repeats = 0;
  double target = 0;
  std::int64_t step_cap = 0;
  Environment env;
  std::string run_id;
  Ledger ledger{""};
  std::vector<ScalingPoint> scaling_points;  // --scaling-ledger's weak scaling
  std::string scaling_run;
  DataSource data;  // what every configuration trains on
};

// The study file read and checked against the machine, the ledger and the scaling ledger checked,
// all before any training.
CostRun prepare(CostOptions o) {
  // A language model's study is its own (a held-out loss target, AdamW): configs/cost_gpt.yaml.
  if (o.config_path.empty())
    o.config_path = o.model_given && find_model(o.model.name).context ? "configs/cost_gpt.yaml" : default_study_file();
  CostRun run;
  run.spec = load_cost_study(o.config_path);
  // A target is a property of the data: one chosen for SyntheticImages says nothing on another set.
  TL_CHECK(o.data.empty() || o.target > 0 || !run.spec.data.empty(),
           fmt::format("--data {}: give --target too (the held-out {} to reach on it, chosen from a pilot run): "
                       "{}'s target {:g} was chosen for its synthetic data",
                       o.data, cost_metric_name(run.spec.metric), o.config_path,
                       o.quick ? run.spec.quick_target : run.spec.target));
  if (o.target > 0) check_cost_target(run.spec.metric, o.target, "--target");
  use_data_set(run.spec.base, o.data);
  if (o.model_given) use_model(run.spec.base, o.model);
  run.configs = cost_configs(run.spec, o.quick);
  run.data = data_source_of(run.configs.front().data,
                            run.configs.front().model);  // a directory that is not a data set is named now
  // The model is built for the data (its keys' values, the data's sample shape): refused now, not
  // as a failed row per repeat.
  (void)model_task(run.configs.front());
  run.repeats = o.repeats > 0 ? o.repeats : (o.quick ? run.spec.quick_repeats : run.spec.repeats);
  run.target = o.target > 0 ? o.target : o.quick ? run.spec.quick_target : run.spec.target;
  run.step_cap = o.quick ? run.spec.quick_step_cap : run.spec.step_cap;
  // The device comes from the configuration's backend, and must be the one the file is meant for.
  const auto& configs = run.configs;
  Backend& backend = get_backend(configs.front().execution.backend.empty() ? default_backend_name()
                                                                           : configs.front().execution.backend);
  for (const auto& c : configs) {
    TL_CHECK(c.execution.backend == configs.front().execution.backend,
             o.config_path +
                 ": every configuration must run on one backend (a cost compares configurations on one "
                 "machine at one rate); set backend in base only");
  }
  run.env = current_environment(backend);
  TL_CHECK(run.env.device.type == run.spec.device,
           fmt::format("{}: the study is meant for {}, but backend '{}' runs on {} (set backend in its base)",
                       o.config_path, run.spec.device, backend.name(), run.env.device.type));
  run.run_id = new_run_id();
  run.ledger = Ledger(o.ledger_path.empty() ? default_ledger_path(run.env.device.type) : o.ledger_path);
  if (!o.no_ledger) {
    // Before hours of training: a ledger that will refuse the rows refuses them now.
    const auto existing = run.ledger.load();
    if (!existing.rows.empty()) {
      const DeviceId theirs = from_json<RowHeader>(existing.rows.front()).env.device;
      TL_CHECK(theirs == run.env.device, "ledger '" + run.ledger.path() + "' holds rows measured on " +
                                             to_json(theirs).dump() + "; this study runs on " +
                                             to_json(run.env.device).dump() +
                                             " (pass --ledger with that device's own ledger)");
    }
  }
  // The scaling ledger is read before any training: a missing or empty one is named now.
  if (!o.scaling_ledger.empty()) {
    std::vector<std::string> warnings;
    run.scaling_points = weak_scaling_points(o.scaling_ledger, configs.front().data.decode_cost, &run.scaling_run,
                                             &warnings, configs.front().model);
    for (const auto& warning : warnings) std::fprintf(stderr, "cost_to_accuracy: warning: %s\n", warning.c_str());
  }
  run.o = std::move(o);
  return run;
}

void print_header(const CostRun& run) {
  std::cout << fmt::format(
      "# cost_to_accuracy: {} ({}), {} configurations x {} repeats interleaved; target: {} on "
      "{} consecutive evaluations, every {} steps, cap {} steps; rate ${}/hour\n",
      run.spec.name, run.o.quick ? "quick" : "full", run.configs.size(), run.repeats,
      target_phrase(run.spec.metric, run.target), run.spec.consecutive, run.spec.eval_every, run.step_cap, run.o.rate);
  std::cout << fmt::format("# device: {} ({}), backend {}, timer {}, engine {}; run {}\n", run.env.device.name,
                           run.env.device.type, run.env.backend, run.env.timer, run.env.engine(), run.run_id);
  std::cout << fmt::format("# data: {}; held-out {} over {} samples of its held-out split\n", run.data.label(),
                           cost_metric_name(run.spec.metric), run.configs.front().data.eval_samples);
  std::cout << fmt::format("# model: {}\n", model_label(run.configs.front().model));
  std::cout.flush();
}

// Repeat r of configuration c: trained from scratch until the stop rule or the cap; its row.
CostRepeat train_repeat(const CostRun& run, std::size_t c, int r, const CostConfigResult& result) {
  TrainConfig config = run.configs[c];
  config.seed = run.configs[c].seed + static_cast<std::uint64_t>(r);  // each repeat its own init and order
  config.steps = run.step_cap;
  config.reporting.log_every = 1 << 30;
  CostRepeatRow row;
  row.header.env = run.env;
  row.header.kind = CostRepeatRow::kKind;
  row.header.run_id = run.run_id;
  row.study = run.spec.name;
  row.config_name = result.name;
  row.config_index = static_cast<std::int64_t>(c);
  row.repeat = r;
  row.batch = config.batch;
  row.lr = config.optimizer.lr;
  row.lr_follows_rule = result.lr_follows_rule;
  row.dtype = result.dtype;
  row.config = knobs_of(config);
  row.data = run.data;
  row.target = run.target;
  row.metric = cost_metric_name(run.spec.metric);
  row.consecutive = run.spec.consecutive;
  row.eval_every = run.spec.eval_every;
  row.step_cap = run.step_cap;
  row.rate = run.o.rate;
  row.quick = run.o.quick;
  CostRepeat rep;
  try {
    Trainer trainer(config, model_task(config));
    TrainCallbacks callbacks;
    const bool by_loss = run.spec.metric == CostMetric::loss;
    callbacks.stop_rule =
        by_loss ? loss_at_most(run.target, run.spec.consecutive) : accuracy_at_least(run.target, run.spec.consecutive);
    trainer.set_callbacks(callbacks);
    const TrainResult trained = trainer.train(nullptr);
    rep.samples_per_s = trained.samples_per_s;
    // The stop rule ends the run when it is met; at the cap, the evaluation there is asked too.
    rep.reached = trained.stopped_by == "stop rule" || callbacks.stop_rule.should_stop(trained.evals);
    rep.steps_to_target = rep.reached ? trained.evals.back().step : 0;
    row.header.status = "ok";
    row.samples_per_s = rep.samples_per_s;
    row.reached = rep.reached;
    if (rep.reached) row.steps_to_target = rep.steps_to_target;
    row.stopped_by = trained.stopped_by;
    row.stop_rule = trained.stop_rule;
    row.measured_steps = trained.measured_steps;
    row.warmup_steps_excluded = trained.warmup_steps;
    row.step_seconds = trained.step_seconds;
    row.evals = json::array();
    for (const auto& e : trained.evals) row.evals.push_back({e.step, by_loss ? e.loss : e.accuracy});
    row.wall_s = trained.wall_s;
    const double last = trained.evals.empty() ? 0.0
                        : by_loss             ? trained.evals.back().loss
                                              : trained.evals.back().accuracy;
    std::cout << fmt::format("repeat {}/{} {:<20} {:>8.1f} samples/s  {}\n", r + 1, run.repeats, result.name,
                             rep.samples_per_s,
                             rep.reached ? fmt::format("reached {:g} at step {} ({} samples)", run.target,
                                                       rep.steps_to_target, rep.steps_to_target * config.batch)
                                         : fmt::format("NOT reached within {} steps (last held-out {} {:.3f})",
                                                       run.step_cap, cost_metric_name(run.spec.metric), last));
  } catch (const std::exception& e) {
    rep.failed = true;
    rep.error = e.what();
    row.header.status = "failed";
    row.error = rep.error;
    std::cout << fmt::format("repeat {}/{} {:<20} FAILED: {}\n", r + 1, run.repeats, result.name, rep.error);
  }
  std::cout.flush();
  if (!run.o.no_ledger) run.ledger.append(row);
  return rep;
}

// Every repeat of every configuration, interleaved (A B C ... A B C ...).
std::vector<CostConfigResult> train_all(const CostRun& run) {
  std::vector<CostConfigResult> results(run.configs.size());
  for (std::size_t c = 0; c < run.configs.size(); ++c) {
    results[c].name = run.spec.configs[c].name;
    results[c].batch = run.configs[c].batch;
    results[c].lr = run.configs[c].optimizer.lr;
    results[c].lr_follows_rule = run.spec.configs[c].lr_follows_rule;
    results[c].dtype = dtype_name(run.configs[c].execution.dtype);
  }
  for (int r = 0; r < run.repeats; ++r)
    for (std::size_t c = 0; c < run.configs.size(); ++c)
      results[c].repeats.push_back(train_repeat(run, c, r, results[c]));
  return results;
}

// Scaling out: the time and $ to target at each world size of the bench_scaling run, and their rows.
void print_break_even(const CostRun& run, const CostAnalysis& analysis) {
  const CostOptions& o = run.o;
  const auto rows = break_even(run.scaling_points, analysis, o.rate);
  std::cout << fmt::format(
      "\nScaling break-even (weak scaling from bench_scaling run {} in {}; each rank charged ${}/hour; samples to "
      "target measured by this study at the world's global batch):\n\n",
      run.scaling_run, o.scaling_ledger, o.rate);
  std::cout << break_even_table(rows, true);
  if (o.no_ledger) return;
  for (const auto& b : rows) {
    CostBreakEvenRow row;
    row.header.env = run.env;
    row.header.kind = CostBreakEvenRow::kKind;
    row.header.run_id = run.run_id;
    row.header.status = b.measured ? "ok" : "skipped";
    row.scaling_ledger = o.scaling_ledger;
    row.scaling_run = run.scaling_run;
    row.world = b.world;
    row.global_batch = b.global_batch;
    row.samples_per_s = b.samples_per_s;
    row.config_name = b.config;
    row.samples_to_target = b.samples_to_target;
    row.hours = b.hours;
    row.dollars = b.dollars;
    row.multiplier = b.multiplier;
    row.dollars_per_hour_saved = b.dollars_per_hour_saved;
    row.note = b.note;
    row.rate = o.rate;
    run.ledger.append(row);
  }
}

int run_study(const CostRun& run) {
  print_header(run);
  const std::vector<CostConfigResult> results = train_all(run);
  const CostAnalysis analysis =
      analyse_cost(results, run.o.rate, run.target, run.spec.eval_every, run.step_cap, run.spec.metric);
  std::cout << fmt::format("\nCost to {} at ${}/hour ({}; samples/s over measured steps, {} repeats):\n\n",
                           target_phrase(run.spec.metric, run.target), run.o.rate, run.env.device.name, run.repeats);
  std::cout << cost_table(analysis, true) << "\n" << cost_findings(analysis);
  std::cout << "\nEvery repeat (repeat r trains with the configuration's seed + r):\n\n"
            << cost_repeats_table(analysis, true);
  if (!run.o.scaling_ledger.empty()) print_break_even(run, analysis);
  if (!run.o.no_ledger) std::cout << "\nrows: " << run.ledger.path() << " (run " << run.run_id << ")\n";
  // Every repeat of every configuration failed: nothing was measured, and the exit status says so
  // (the failed rows stay in the ledger, with their errors).
  bool any_ran = false;
  std::string first_error;
  for (const auto& r : results) {
    for (const auto& rep : r.repeats) {
      any_ran = any_ran || !rep.failed;
      if (rep.failed && first_error.empty()) first_error = r.name + ": " + rep.error;
    }
  }
  if (!any_ran) {
    std::cerr << "cost_to_accuracy: error: every repeat of every configuration failed (first: " << first_error << ")\n";
    return 1;
  }
  return 0;
}

}  // namespace

int run_cost_study(const CostOptions& options) {
  try {
    return run_study(prepare(options));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cost_to_accuracy: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace trainlab::bench
