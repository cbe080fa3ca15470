#include "studies/pinning/driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <tuple>
#include <vector>

#include "backends/registry.h"
#include "bench/measure/affinity.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "engine/train/task.h"
#include "studies/pinning/arm_process.h"
#include "studies/pinning/pinning_study.h"

namespace trainlab::bench {

namespace {

// The arms on this machine's topology, the conditions, and the loader workers every arm runs; where
// the run is measured and its id.
struct PinningPlan {
  Environment env;
  std::string run_id;
  Topology topology;
  CpuSet half_a, half_b, all;
  int workers = 0;
  std::vector<ArmPlan> arms;  // in kPinningArms' order
  std::vector<std::string> conditions;
  bool capped_equals_default = false;
};

PinningPlan plan_pinning(const PinningOptions& o) {
  PinningPlan plan;
  plan.topology = machine_topology();
  std::tie(plan.half_a, plan.half_b) = plan.topology.halves();
  plan.all = plan.topology.all();
  const Topology& topology = plan.topology;
  auto cores_in = [&](const CpuSet& cpus) {
    int n = 0;
    for (const auto& core : topology.cores)
      n += std::includes(cpus.begin(), cpus.end(), core.begin(), core.end()) ? 1 : 0;
    return std::max(1, n);
  };
  plan.workers = o.workload.workers > 0 ? o.workload.workers : cores_in(plan.half_b);
  plan.arms = {{"default", {}, {}, 0},
               {"default_b", {}, {}, 0},
               {"threads_capped", {}, {}, topology.physical_cores()},
               {"pinned_split", plan.half_a, plan.half_b, cores_in(plan.half_a)},
               {"pinned_half_shared", plan.half_a, plan.half_a, cores_in(plan.half_a)}};
  plan.conditions = {"quiet"};
  if (o.contend > 0)
    plan.conditions.push_back(fmt::format("contended: {} busy thread{}", o.contend, o.contend == 1 ? "" : "s"));
  return plan;
}

void print_plan(const PinningOptions& o, const PinningPlan& plan) {
  std::cout << fmt::format(
      "# pinning: {} physical cores ({} logical CPUs: {}), halves {} | {} (hwloc); {} arms x {} repeats interleaved, "
      "each repeat its own process; workload: {}, batch {}, decode cost {}, {} loader worker(s), {} warm-up + {} "
      "measured steps; conditions: {}\n",
      plan.topology.physical_cores(), plan.all.size(), cpu_list(plan.all), cpu_list(plan.half_a), cpu_list(plan.half_b),
      plan.arms.size(), o.repeats, model_label(o.workload.model), o.workload.batch, o.workload.decode_cost,
      plan.workers, o.workload.warmup, o.workload.steps,
      o.contend > 0 ? "quiet and contended, alternating each round" : "quiet");
  const Environment& env = plan.env;
  std::cout << fmt::format("# device: {}, backend {}, timer {}, engine {}; run {}\n", env.device.name, env.backend,
                           env.timer, env.engine(), plan.run_id);
  if (plan.half_a == plan.half_b)
    std::cout << "# one core: pinned_split and pinned_half_shared are the same arm here (nothing to split)\n";
  std::cout.flush();
}

// The row of one repeat: the arm as planned and, from its child, what it measured and the masks
// every thread had (as_set: each worker ran its hook and has the arm's mask; every other thread
// has main's).
PinningRepeatRow repeat_row(const PinningOptions& o, const PinningPlan& plan, std::size_t a, std::size_t c, int round,
                            const ChildResult& r) {
  const ArmPlan& arm = plan.arms[a];
  PinningRepeatRow row;
  row.header.env = plan.env;
  row.header.kind = PinningRepeatRow::kKind;
  row.header.run_id = plan.run_id;
  row.condition = plan.conditions[c];
  row.contend_threads = c == 0 ? 0 : o.contend;
  row.arm = arm.name;
  row.calibration = a < 2;
  row.round = round;
  row.workers = plan.workers;
  row.batch = o.workload.batch;
  row.decode_cost = o.workload.decode_cost;
  row.model = o.workload.model.name;
  row.model_options = model_options_text(o.workload.model.options);
  row.capped_equals_default = plan.capped_equals_default;
  row.default_threads = plan.env.threads;
  row.physical_cores = plan.topology.physical_cores();
  row.requested = {arm.main.empty() ? "unconfined" : cpu_list(arm.main),
                   arm.workers.empty() ? "unconfined" : cpu_list(arm.workers), arm.threads};
  if (!r.ok) {
    row.header.status = "failed";
    row.error = r.error;
    row.threads = arm.threads;
    return row;
  }
  const std::string main_expected = arm.main.empty() ? cpu_list(plan.all) : cpu_list(arm.main);
  const std::string workers_expected = arm.workers.empty() ? main_expected : cpu_list(arm.workers);
  const std::optional<PinningReadBack>& rb = r.value.readback;
  row.header.status = "ok";
  row.threads = r.value.threads;
  PinningMeasurement& m = row.measurement;
  m.samples_per_s = r.value.samples_per_s;
  m.measured_steps = r.value.measured_steps;
  m.warmup_steps_excluded = r.value.warmup_steps_excluded;
  m.data_wait_share = r.value.data_wait_share;
  m.step_seconds = r.value.step_seconds;
  m.applied.main = rb ? rb->main : "?";
  m.applied.workers = rb ? rb->workers : "?";
  m.applied.other_threads = rb ? rb->other_threads : "?";
  m.applied.expected_main = main_expected;
  m.applied.expected_workers = workers_expected;
  m.applied.as_set = rb && rb->main == main_expected && rb->worker_threads == plan.workers &&
                     rb->workers == workers_expected &&
                     (rb->other_threads.empty() || rb->other_threads == main_expected);
  return row;
}

void print_repeat(const PinningOptions& o, const PinningRepeatRow& row) {
  if (!row.header.ok()) {
    std::cout << fmt::format("round {}/{} {:<28} {:<20} FAILED: {}\n", row.round + 1, o.repeats, row.condition, row.arm,
                             row.error);
  } else {
    const PinningMeasurement& m = row.measurement;
    std::cout << fmt::format("round {}/{} {:<28} {:<20} {:>8.1f} samples/s  threads {}  main {}  workers {}{}\n",
                             row.round + 1, o.repeats, row.condition, row.arm, m.samples_per_s, row.threads,
                             m.applied.main, m.applied.workers, m.applied.as_set ? "" : "  AFFINITY NOT AS SET");
  }
  std::cout.flush();
}

// Every round: each condition in turn (its busy load running through it), each arm once.
// results[condition][arm] gathers the arms for the tables.
std::vector<std::vector<PinningArm>> run_rounds(const PinningOptions& o, const PinningPlan& plan,
                                                const Ledger& ledger) {
  std::vector<std::vector<PinningArm>> results(plan.conditions.size(), std::vector<PinningArm>(plan.arms.size()));
  for (int round = 0; round < o.repeats; ++round) {
    for (std::size_t c = 0; c < plan.conditions.size(); ++c) {
      Contention contention(c == 0 ? 0 : o.contend);
      for (std::size_t a = 0; a < plan.arms.size(); ++a) {
        const ChildResult r = run_arm(o, plan.arms[a], plan.workers, "");
        const PinningRepeatRow row = repeat_row(o, plan, a, c, round, r);
        PinningArm& out = results[c][a];
        out.name = row.arm;
        out.workers = row.workers;
        add_repeat(out, row);
        print_repeat(o, row);
        if (!o.no_ledger) ledger.append(row);
      }
    }
  }
  return results;
}

}  // namespace

int run_pinning(const PinningOptions& o) {
  {
    // The model takes SyntheticImages (its keys' values too): refused here, before any child runs.
    TrainConfig config;
    config.model = o.workload.model;
    (void)model_task(config);
  }
  PinningPlan plan = plan_pinning(o);
  Backend& backend = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
  plan.env = current_environment(backend);
  TL_CHECK(plan.env.device.type == "cpu", "pinning: backend '" + backend.name() + "' is not a CPU backend");
  plan.run_id = new_run_id();
  const Ledger ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
  // threads_capped is default's configuration when the default thread count (this process's, as
  // unconfined as default's children) is the physical core count.
  plan.capped_equals_default = plan.env.threads == plan.topology.physical_cores();
  print_plan(o, plan);
  // The trace (a profiled run is slower): an extra pinned_split repeat before the rounds, not counted.
  std::string trace_error;
  if (!o.trace_path.empty()) {
    const ChildResult traced = run_arm(o, plan.arms[3], plan.workers, o.trace_path);
    if (!traced.ok) trace_error = traced.error;
    std::cout << (traced.ok ? "# trace of pinned_split (an extra repeat, not counted): " + o.trace_path
                            : "# trace of pinned_split failed: " + traced.error)
              << "\n";
  }

  const auto results = run_rounds(o, plan, ledger);
  std::vector<PinningAnalysis> analyses;
  for (std::size_t c = 0; c < plan.conditions.size(); ++c) {
    analyses.push_back(analyse_pinning(plan.conditions[c], results[c], plan.capped_equals_default));
    std::cout << fmt::format("\nPinning, {} ({} repeats per arm, each its own process):\n\n", plan.conditions[c],
                             o.repeats);
    std::cout << pinning_table(analyses.back(), true) << "\n" << pinning_findings(analyses.back());
  }
  if (analyses.size() > 1) std::cout << "\nQuiet and contended side by side:\n\n" << pinning_comparison(analyses, true);
  if (!o.no_ledger) std::cout << "\nrows: " << ledger.path() << " (run " << plan.run_id << ")\n";
  if (!trace_error.empty()) {
    std::fprintf(stderr, "pinning: error: the trace (--trace %s) was not written: %s\n", o.trace_path.c_str(),
                 trace_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace trainlab::bench
