#include "studies/memory/driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "backends/registry.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "comm/ddp.h"
#include "comm/mpi_communicator.h"
#include "comm/run_training.h"
#include "engine/instrument/memory_model.h"
#include "engine/train/trainer.h"
#include "studies/memory/memory_study.h"

namespace trainlab::bench {

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) items.push_back(item);
  return items;
}

struct PlannedArm {
  std::string name;
  std::int64_t batch;
  Recompute recompute;
  int zero;
};

struct Plan {
  std::vector<PlannedArm> arms;
  std::int64_t control_batch = 0;
  std::string left_out;  // the default recompute levels the model does not take, and why ("" none)
};

// The recompute levels the model takes: each asked of a probe of it, as the trainer asks the model it
// builds (Module::set_recompute). A level it refuses is an error when --recompute named it, and left
// out (said in `left_out`) when it came from the default list.
std::vector<Recompute> levels_the_model_takes(const MemoryOptions& o, const std::vector<Recompute>& levels,
                                              std::string& left_out) {
  const std::shared_ptr<Module> probe = probe_model(o.model);
  std::vector<Recompute> kept;
  for (Recompute level : levels) {
    try {
      probe->set_recompute(level);
      kept.push_back(level);
    } catch (const Error& e) {
      TL_CHECK(!o.recompute_given, fmt::format("memory_study: --recompute {}: {} does not take it ({})",
                                               recompute_name(level), model_label(o.model), e.what()));
      left_out += fmt::format("{}{}", left_out.empty() ? "" : ", ", recompute_name(level));
    }
  }
  if (!left_out.empty()) {
    std::string taken;
    for (Recompute level : kept) taken += (taken.empty() ? "" : ", ") + std::string(recompute_name(level));
    left_out = fmt::format("recompute {} left out of the default levels: {} takes only {}", left_out,
                           model_label(o.model), taken);
  }
  return kept;
}

// The lists of --batches, --recompute and --zero, checked, as the arms they make: every
// combination, and the control (the middle batch, none, zero 0) twice: the calibration pair.
Plan plan_arms(const MemoryOptions& o, int world) {
  std::vector<std::int64_t> batches;
  for (const std::string& b : split(o.batches)) {
    std::int64_t value = 0;
    std::size_t used = 0;
    try {
      value = std::stoll(b, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TL_CHECK(used == b.size() && used > 0 && value >= world && value % world == 0,
             fmt::format("memory_study: --batches: {} is not a whole number that splits over the {} ranks",
                         quote_value(b), world));
    batches.push_back(value);
  }
  std::vector<Recompute> levels;
  for (const std::string& r : split(o.recompute)) {
    const ConfigField& field = config_field("recompute");
    TrainConfig probe;
    field.set(probe, r, "--recompute");
    levels.push_back(probe.execution.recompute);
  }
  std::string left_out;
  levels = levels_the_model_takes(o, levels, left_out);
  std::vector<int> stages;
  if (o.zero.empty() && world < 2)
    left_out += std::string(left_out.empty() ? "" : "; ") +
                "zero 1-3 left out of the default stages: one rank has no peers to shard over";
  for (const std::string& z : split(o.zero.empty() ? (world >= 2 ? "0,1,2,3" : "0") : o.zero)) {
    TL_CHECK(z == "0" || z == "1" || z == "2" || z == "3",
             "memory_study: --zero: " + quote_value(z) + " is not a stage DDP runs (0, 1, 2 or 3)");
    stages.push_back(z[0] - '0');
  }
  TL_CHECK(!batches.empty() && !levels.empty() && !stages.empty(),
           "memory_study: --batches, --recompute and --zero each need at least one value");
  TL_CHECK(levels.front() == Recompute::none && stages.front() == 0,
           "memory_study: the first --recompute must be none and the first --zero 0 (the controls)");
  const auto sharded = std::find_if(stages.begin(), stages.end(), [](int z) { return z > 0; });
  TL_CHECK(world >= 2 || sharded == stages.end(),
           fmt::format("memory_study: zero {} shards over the ranks: launch at least 2 (scripts/mpirun -np 2 ...)",
                       sharded == stages.end() ? 0 : *sharded));
  Plan plan;
  plan.left_out = left_out;
  plan.control_batch = batches[batches.size() / 2];
  for (std::int64_t batch : batches) {
    for (Recompute level : levels) {
      for (int zero : stages) {
        const std::string name = fmt::format("b{} {} z{}", batch, recompute_name(level), zero);
        plan.arms.push_back({name, batch, level, zero});
        if (batch == plan.control_batch && level == Recompute::none && zero == 0)
          plan.arms.push_back({name + " again", batch, level, zero});
      }
    }
  }
  return plan;
}

TrainConfig arm_config(const MemoryOptions& o, const PlannedArm& arm) {
  TrainConfig config;
  config.model = o.model;
  config.execution.backend = o.backend;
  config.execution.dtype = parse_dtype(o.dtype);
  config.execution.threads = o.threads;
  config.batch = arm.batch;
  config.execution.recompute = arm.recompute;
  config.parallel.zero = arm.zero;
  if (o.optimizer == "adamw") {
    config.optimizer.kind = OptimizerKind::adamw;
    config.optimizer.lr = 1e-3;
  } else {
    config.optimizer.momentum = 0.9;
  }
  config.reporting.warmup = o.warmup;
  config.steps = o.warmup + o.steps;
  config.data.train_samples = arm.batch * config.steps;
  config.reporting.eval_at_end = false;
  config.reporting.log_every = 1 << 30;
  config.data.eval_samples = 10;
  config.data.eval_batch = 10;
  return config;
}

// What every row of the run shares: where it was measured (the host's environment, with MPI's
// version, the study's timer and the threads per rank) and the run's id.
struct RunHeader {
  Environment env;
  std::string run_id;
  int world = 0, rank = 0;
};

// Seed 003's formula and the estimator beside what the arm measured: its activations (the model's
// memory chain at the batch per rank; a model without one: not estimated) and DDP's communication
// buffers (its plan).
void estimate_arm(Trainer& trainer, const TrainConfig& config, const comm::Ddp& ddp, std::int64_t per_rank_batch,
                  MemoryPerRank& memory) {
  const ChainShape shape{per_rank_batch, config.execution.dtype,
                         config.execution.layout == MemoryFormat::channels_last};
  const std::vector<ChainOp> chain = trainer.model().memory_chain(shape, trainer.backend());
  memory.formula_bytes.emplace();
  memory.estimated_bytes.emplace();
  if (!chain.empty()) {
    (*memory.formula_bytes)["activations"] = seed_activation_bytes(chain);
    const ChainEstimate estimate = estimate_chain(chain);
    (*memory.estimated_bytes)["activations"] = estimate.activation_peak;
    (*memory.estimated_bytes)["activations_saved"] = estimate.saved;
  }
  const CommBufferEstimate buffers = estimate_communication_buffers(ddp.communication_buffer_plan());
  (*memory.estimated_bytes)["communication"] = buffers.peak();
  std::string parts;
  if (buffers.persistent > 0) parts = mib_or_bytes(buffers.persistent, " MiB") + " held (the buckets' copies)";
  if (buffers.transient > 0)
    parts += fmt::format("{}{} at most: {}", parts.empty() ? "" : "; ", mib_or_bytes(buffers.transient, " MiB"),
                         buffers.transient_what);
  memory.communication_estimate = parts.empty() ? "none" : parts;
}

// One repeat of one arm, trained over every rank; every rank takes part in the gathers, and rank 0
// gets the row: the slowest rank's median step and the largest rank's memory (its breakdown at the
// peak; each category's peak over the ranks).
std::optional<MemoryRepeatRow> measure_arm(comm::MpiCommunicator& world, const MemoryOptions& o, const PlannedArm& arm,
                                           int repeat, const RunHeader& run) {
  const TrainConfig config = arm_config(o, arm);
  comm::Replica replica(world);
  auto trainer = replica.trainer(config, model_task(config));
  comm::Ddp& ddp = *replica.ddp();
  const TrainResult trained = trainer->train(nullptr);
  std::vector<double> steps = trained.step_seconds;
  std::sort(steps.begin(), steps.end());
  const double median = steps.empty() ? 0 : steps[steps.size() / 2];
  const auto medians = ddp.gather(median);
  const MemoryUsage& m = trained.memory;
  const auto totals = ddp.gather(m.total_peak);
  const auto largest = static_cast<std::size_t>(std::max_element(totals.begin(), totals.end()) - totals.begin());
  MemoryRepeatRow row;
  MemoryPerRank& memory = row.memory_per_rank;
  for (int c = 0; c < kMemoryCategories; ++c) {
    const auto category = static_cast<MemoryCategory>(c);
    const auto peaks = ddp.gather(m.peak_of(category));
    const auto ats = ddp.gather(m.at_peak[static_cast<std::size_t>(c)]);
    memory.peak_bytes[memory_category_name(category)] = *std::max_element(peaks.begin(), peaks.end());
    memory.at_peak_bytes[memory_category_name(category)] = ats[largest];
  }
  // Between steps: what the trainer still holds (its model, optimiser and DDP are alive).
  const MemoryUsage now = memory_usage(trainer->backend().device_type());
  memory.held_bytes.emplace();
  for (MemoryCategory category :
       {MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_state}) {
    const auto live = ddp.gather(now.live_of(category));
    (*memory.held_bytes)[memory_category_name(category)] = *std::max_element(live.begin(), live.end());
  }
  memory.parameters = 0;
  for (const auto& [name, p] : trainer->model().named_parameters()) *memory.parameters += p.numel();
  const auto phases = ddp.gather(static_cast<std::int64_t>(m.peak_phase));
  const auto held = ddp.gather(m.activations_after_forward);
  if (run.rank != 0) return std::nullopt;
  estimate_arm(*trainer, config, ddp, arm.batch / run.world, memory);
  row.header.env = run.env;
  row.header.run_id = run.run_id;
  row.header.kind = MemoryRepeatRow::kKind;
  row.header.status = "ok";
  row.arm = arm.name;
  row.repeat = repeat;
  row.config = {.batch = arm.batch,
                .per_rank_batch = arm.batch / run.world,
                .recompute = recompute_name(arm.recompute),
                .zero = arm.zero,
                .world = run.world,
                .dtype = o.dtype,
                .optimizer = o.optimizer,
                .steps = config.steps,
                .warmup_steps_excluded = o.warmup,
                .allreduce = "native",
                .model = o.model.name,
                .model_options = model_options_text(o.model.options)};
  row.step_s_median = *std::max_element(medians.begin(), medians.end());
  row.step_s_median_per_rank = medians;
  row.step_seconds_rank0 = trained.step_seconds;
  row.samples_per_s = trained.samples_per_s;
  memory.total_peak_bytes = totals[largest];
  memory.peak_rank = static_cast<std::int64_t>(largest);
  memory.peak_phase = memory_phase_name(static_cast<MemoryPhase>(phases[largest]));
  memory.activations_after_forward_bytes = *std::max_element(held.begin(), held.end());
  memory.note = "tensor bytes by category (engine accounting), the largest rank's; backend scratch not counted";
  return row;
}

}  // namespace

int run_memory_study(const MemoryOptions& o) {
  auto world = comm::MpiCommunicator::world();
  RunHeader run;
  run.world = world->size();
  run.rank = world->rank();
  try {
    world->set_timeout(o.timeout);
    check_backend_name(o.backend);
    const Plan plan = plan_arms(o, run.world);
    const std::vector<PlannedArm>& arms = plan.arms;
    // The model takes SyntheticImages (its keys' values too): refused here, before any arm runs.
    (void)model_task(arm_config(o, arms.front()));
    Backend& host = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
    run.env = current_environment(host);
    run.env.versions["mpi"] = comm::mpi_library_version();
    run.env.timer = "steady_clock (the slowest rank's median measured step)";
    run.env.threads = o.threads;
    run.run_id = new_run_id();
    const Ledger ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
    if (run.rank == 0) {
      std::cout << fmt::format(
          "# memory_study: {}, {} arms x {} repeats interleaved over {} ranks, {} warm-up + {} measured steps each, {} "
          "thread(s) per rank, backend {}, {}, optimizer {}; control {} (twice: the calibration pair)\n",
          model_label(o.model), arms.size(), o.repeats, run.world, o.warmup, o.steps, o.threads, host.name(), o.dtype,
          o.optimizer, fmt::format("b{} none z0", plan.control_batch));
      if (!plan.left_out.empty()) std::cout << "# " << plan.left_out << "\n";
      std::cout.flush();
    }
    std::vector<MemoryRepeatRow> rows;
    for (int repeat = 0; repeat < o.repeats; ++repeat) {
      for (const PlannedArm& arm : arms) {
        if (auto row = measure_arm(*world, o, arm, repeat, run)) {
          if (!o.no_ledger) ledger.append(*row);
          std::cout << fmt::format("# repeat {}/{} {:<20} step {:.1f} ms, peak {:.2f} MiB per rank\n", repeat + 1,
                                   o.repeats, arm.name, 1e3 * row->step_s_median,
                                   static_cast<double>(row->memory_per_rank.total_peak_bytes) / (1 << 20));
          std::cout.flush();
          rows.push_back(std::move(*row));
        }
        world->sleeping_barrier(2e-3);
      }
    }
    if (run.rank == 0) {
      const MemoryAnalysis analysis = analyse_memory(memory_arms_from_rows(rows));
      std::cout << "\n" << memory_table(analysis, true) << "\n" << memory_findings(analysis);
      if (const std::string persistent = memory_persistent_table(analysis, true); !persistent.empty())
        std::cout << "\nPersistent state per rank, three ways:\n" << persistent;
      if (const std::string transient = memory_transient_table(analysis, true); !transient.empty())
        std::cout << "\nActivations and communication buffers per rank, three ways:\n" << transient;
      if (!o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run.run_id << ")\n";
    }
    return 0;
  } catch (const Error& e) {
    world->abort(std::string("memory_study: error: ") + e.what(), 2);
  }
}

}  // namespace trainlab::bench
