// The cost-to-accuracy study (seed 000): what does it cost to reach a model this good?
//
//   build/bin/cost_to_accuracy --rate 0.35 [--config configs/cost_cpu.yaml] [--quick]
//                              [--scaling-ledger results/ledger_cpu.jsonl]
//
// Each configuration of the study file trains SmallCNN on SyntheticImages from scratch until
// held-out accuracy reaches the target on `consecutive` evaluations in a row (the trainer's stop
// rule; evaluation outside the timing), R repeats interleaved across configurations (A B C ... A B
// C ...). Each repeat is a ledger row as soon as it ends. The table ranks the configurations by
// throughput and by $ to target, over the full orderings; the findings say where they disagree.
// The device is the configuration's backend (a CUDA study file runs on the GPU), and every time is
// the backend's own timer (CUDA events there), never the host's clock around queued work.
#include <fmt/format.h>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "apps/cli_parse.h"
#include "backends/registry.h"
#include "bench/measure/ledger.h"
#include "engine/trainer.h"
#include "studies/cost_to_accuracy/cost_study.h"

using namespace trainlab;
using namespace trainlab::bench;

namespace {

struct Options {
  std::string config_path;  // empty: configs/cost_cuda.yaml where a GPU is, else configs/cost_cpu.yaml
  double rate = 0;
  bool quick = false;
  int repeats = 0;  // 0: the study file's
  std::string ledger_path, scaling_ledger;
  bool no_ledger = false;
};

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

int run(Options o) {
  if (o.config_path.empty()) o.config_path = default_study_file();
  const CostStudySpec spec = load_cost_study(o.config_path);
  const std::vector<TrainConfig> configs = cost_configs(spec, o.quick);
  const int repeats = o.repeats > 0 ? o.repeats : (o.quick ? spec.quick_repeats : spec.repeats);
  const double target = o.quick ? spec.quick_target : spec.target;
  const std::int64_t step_cap = o.quick ? spec.quick_step_cap : spec.step_cap;

  // The device comes from the configuration's backend, and must be the one the file is meant for.
  Backend& backend = get_backend(configs.front().execution.backend.empty() ? default_backend_name()
                                                                           : configs.front().execution.backend);
  for (const auto& c : configs) {
    TL_CHECK(c.execution.backend == configs.front().execution.backend,
             o.config_path +
                 ": every configuration must run on one backend (a cost compares configurations on one "
                 "machine at one rate); set backend in base only");
  }
  const Environment env = current_environment(backend);
  TL_CHECK(env.device.type == spec.device,
           fmt::format("{}: the study is meant for {}, but backend '{}' runs on {} (set backend in its base)",
                       o.config_path, spec.device, backend.name(), env.device.type));
  const std::string run_id = new_run_id();
  const Ledger ledger(o.ledger_path.empty() ? default_ledger_path(env.device.type) : o.ledger_path);
  if (!o.no_ledger) {
    // Before hours of training: a ledger that will refuse the rows refuses them now.
    const auto existing = ledger.load();
    if (!existing.rows.empty()) {
      const json mine = env.to_json()["device"];
      TL_CHECK(existing.rows.front()["device"] == mine,
               "ledger '" + ledger.path() + "' holds rows measured on " + existing.rows.front()["device"].dump() +
                   "; this study runs on " + mine.dump() + " (pass --ledger with that device's own ledger)");
    }
  }

  // The scaling ledger is read before any training: a missing or empty one is named now.
  std::vector<ScalingPoint> scaling_points;
  std::string scaling_run;
  if (!o.scaling_ledger.empty())
    scaling_points = weak_scaling_points(o.scaling_ledger, configs.front().data.decode_cost, &scaling_run);

  std::cout << fmt::format(
      "# cost_to_accuracy: {} ({}), {} configurations x {} repeats interleaved; target: held-out accuracy >= {:g} on "
      "{} consecutive evaluations, every {} steps, cap {} steps; rate ${}/hour\n",
      spec.name, o.quick ? "quick" : "full", configs.size(), repeats, target, spec.consecutive, spec.eval_every,
      step_cap, o.rate);
  std::cout << fmt::format("# device: {} ({}), backend {}, timer {}, engine {}; run {}\n", env.device.name,
                           env.device.type, env.backend, env.timer, env.engine(), run_id);
  std::cout.flush();

  std::vector<CostConfigResult> results(configs.size());
  for (std::size_t c = 0; c < configs.size(); ++c) {
    results[c].name = spec.configs[c].name;
    results[c].batch = configs[c].batch;
    results[c].lr = configs[c].optimizer.lr;
    results[c].lr_follows_rule = spec.configs[c].lr_follows_rule;
    results[c].dtype = dtype_name(configs[c].execution.dtype);
  }
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t c = 0; c < configs.size(); ++c) {
      TrainConfig config = configs[c];
      config.seed = configs[c].seed + static_cast<std::uint64_t>(r);  // each repeat its own init and order
      config.steps = step_cap;
      config.reporting.log_every = 1 << 30;
      json row = env.to_json();
      row["run_id"] = run_id;
      row["kind"] = "cost_repeat";
      row["study"] = spec.name;
      row["config_name"] = results[c].name;
      row["config_index"] = c;
      row["repeat"] = r;
      row["batch"] = config.batch;
      row["lr"] = config.optimizer.lr;
      row["lr_follows_rule"] = results[c].lr_follows_rule;
      row["dtype"] = results[c].dtype;
      row["config"] = knobs_of(config);
      row["target"] = target;
      row["consecutive"] = spec.consecutive;
      row["eval_every"] = spec.eval_every;
      row["step_cap"] = step_cap;
      row["rate"] = o.rate;
      row["quick"] = o.quick;
      CostRepeat rep;
      try {
        Trainer trainer(config, smallcnn_task(config));
        TrainCallbacks callbacks;
        callbacks.stop_rule = accuracy_at_least(target, spec.consecutive);
        trainer.set_callbacks(callbacks);
        const TrainResult result = trainer.train(nullptr);
        rep.samples_per_s = result.samples_per_s;
        // The stop rule ends the run when it is met; at the cap, the evaluation there is asked too.
        rep.reached = result.stopped_by == "stop rule" || callbacks.stop_rule.should_stop(result.evals);
        rep.steps_to_target = rep.reached ? result.evals.back().step : 0;
        row["status"] = "ok";
        row["samples_per_s"] = rep.samples_per_s;
        row["reached"] = rep.reached;
        row["steps_to_target"] = rep.reached ? json(rep.steps_to_target) : json(nullptr);
        row["stopped_by"] = result.stopped_by;
        row["stop_rule"] = result.stop_rule;
        row["measured_steps"] = result.measured_steps;
        row["warmup_steps_excluded"] = result.warmup_steps;
        row["step_seconds"] = result.step_seconds;
        json evals = json::array();
        for (const auto& e : result.evals) evals.push_back({e.step, e.accuracy});
        row["evals"] = evals;
        row["wall_s"] = result.wall_s;
        const double last = result.evals.empty() ? 0.0 : result.evals.back().accuracy;
        std::cout << fmt::format(
            "repeat {}/{} {:<20} {:>8.1f} samples/s  {}\n", r + 1, repeats, results[c].name, rep.samples_per_s,
            rep.reached ? fmt::format("reached {:g} at step {} ({} samples)", target, rep.steps_to_target,
                                      rep.steps_to_target * config.batch)
                        : fmt::format("NOT reached within {} steps (last held-out accuracy {:.3f})", step_cap, last));
      } catch (const std::exception& e) {
        rep.failed = true;
        rep.error = e.what();
        row["status"] = "failed";
        row["error"] = rep.error;
        std::cout << fmt::format("repeat {}/{} {:<20} FAILED: {}\n", r + 1, repeats, results[c].name, rep.error);
      }
      std::cout.flush();
      results[c].repeats.push_back(rep);
      if (!o.no_ledger) ledger.append(row);
    }
  }

  const CostAnalysis analysis = analyse_cost(results, o.rate, target, spec.eval_every, step_cap);
  std::cout << fmt::format(
      "\nCost to held-out accuracy {:g} at ${}/hour ({}; samples/s over measured steps, {} "
      "repeats):\n\n",
      target, o.rate, env.device.name, repeats);
  std::cout << cost_table(analysis, true) << "\n" << cost_findings(analysis);
  std::cout << "\nEvery repeat (repeat r trains with the configuration's seed + r):\n\n"
            << cost_repeats_table(analysis, true);

  if (!o.scaling_ledger.empty()) {
    const auto rows = break_even(scaling_points, analysis, o.rate);
    std::cout << fmt::format(
        "\nScaling break-even (weak scaling from bench_scaling run {} in {}; each rank charged ${}/hour; samples to "
        "target measured by this study at the world's global batch):\n\n",
        scaling_run, o.scaling_ledger, o.rate);
    std::cout << break_even_table(rows, true);
    if (!o.no_ledger) {
      for (const auto& b : rows) {
        json row = env.to_json();
        row["run_id"] = run_id;
        row["kind"] = "cost_break_even";
        row["status"] = b.measured ? "ok" : "skipped";
        row["scaling_ledger"] = o.scaling_ledger;
        row["scaling_run"] = scaling_run;
        row["world"] = b.world;
        row["global_batch"] = b.global_batch;
        row["samples_per_s"] = b.samples_per_s;
        row["config_name"] = b.config;
        row["samples_to_target"] = b.samples_to_target;
        row["hours"] = b.hours;
        row["dollars"] = b.dollars;
        row["multiplier"] = b.multiplier;
        row["dollars_per_hour_saved"] = b.dollars_per_hour_saved;
        row["note"] = b.note;
        row["rate"] = o.rate;
        ledger.append(row);
      }
    }
  }
  if (!o.no_ledger) std::cout << "\nrows: " << ledger.path() << " (run " << run_id << ")\n";
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

int main(int argc, char** argv) {
  CLI::App app{"cost_to_accuracy: what it costs to reach held-out accuracy, per configuration (seed 000)",
               "cost_to_accuracy"};
  Options o;
  app.add_option("--rate", o.rate,
                 "the machine's price in $/hour (required: there is no honest default price; a made-up rate makes a "
                 "made-up cost)")
      ->check(FiniteRange(1e-9, 1e9));
  app.add_option("--config", o.config_path,
                 "the study file (default: configs/cost_cuda.yaml where a GPU is found, else configs/cost_cpu.yaml)");
  app.add_flag("--quick", o.quick, "the study file's quick form (a lower target, fewer steps and repeats)");
  app.add_option("--repeats", o.repeats, "repeats per configuration (default: the study file's)")
      ->check(FiniteRange(1, 100));
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_<device>.jsonl)");
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  app.add_option("--scaling-ledger", o.scaling_ledger,
                 "a ledger with a bench_scaling run: the time and $ to target at each world size");
  if (const auto status = parse_command_line(app, argc, argv, "cost_to_accuracy")) return *status;
  if (app.count("--rate") > 0 && !std::isfinite(o.rate)) {
    std::fprintf(stderr, "cost_to_accuracy: error: --rate %g is not a price in $/hour (a finite number > 0)\n", o.rate);
    return 2;
  }
  if (app.count("--rate") == 0) {
    std::fprintf(stderr,
                 "cost_to_accuracy: error: --rate is required: the price of this machine in $/hour (e.g. --rate 0.35). "
                 "There is no default: a made-up price would make up the cost this study exists to measure\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cost_to_accuracy: error: %s\n", e.what());
    return 2;
  }
}
