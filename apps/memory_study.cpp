// The memory study (issue 13, seed 003's capacity levers): how much memory each lever takes off a
// rank, and what it costs in step time.
//
//   scripts/mpirun -np 2 build/bin/memory_study [--batches 32,128,512] [--recompute none,convs,all]
//                                               [--zero 0,1] [--repeats 7] [--quick]
//
// Every arm (batch x recompute x zero) is a short DDP training run over the launched ranks: warm-up
// steps excluded, then the measured steps, the tensor memory of each rank by category (the engine's
// accounting: engine/memory_usage.h) and the median step time of the slowest rank. The repeats are
// interleaved across arms; the control arm (the middle batch, recompute none, zero 0) runs twice per
// round, and the gap between its two copies is the noise floor. Every repeat is a ledger row
// ("memory_repeat"); the tables come from those rows (bench/memory_study.h), here and in
// bench_report.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "apps/cli_parse.h"
#include "backends/registry.h"
#include "bench/measure/ledger.h"
#include "comm/ddp.h"
#include "comm/mpi_communicator.h"
#include "comm/run_training.h"
#include "engine/trainer.h"
#include "studies/memory/memory_study.h"

using namespace trainlab;
using namespace trainlab::bench;

namespace {

struct Options {
  std::string batches = "32,128,512", recompute = "none,convs,all", zero = "0,1";
  int repeats = 7, steps = 10, warmup = 3, threads = 1;
  std::string backend, dtype = "f32", optimizer = "sgd", ledger_path;
  bool quick = false, no_ledger = false;
  double timeout = 300;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) items.push_back(item);
  return items;
}

struct Arm {
  std::string name;
  std::int64_t batch;
  Recompute recompute;
  int zero;
};

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{"memory_study: batch x recompute x ZeRO stage, memory per rank by category and step time, interleaved",
               "memory_study"};
  Options o;
  app.add_option("--batches", o.batches, "global batch sizes (each split over the ranks)")->capture_default_str();
  app.add_option("--recompute", o.recompute, "recompute levels: none, convs, all")->capture_default_str();
  app.add_option("--zero", o.zero, "ZeRO stages: 0, 1")->capture_default_str();
  app.add_option("--repeats", o.repeats, "repeats per arm, interleaved")
      ->capture_default_str()
      ->check(FiniteRange(1, 100));
  app.add_option("--steps", o.steps, "measured steps per run")->capture_default_str()->check(FiniteRange(1, 100000));
  app.add_option("--warmup", o.warmup, "warm-up steps per run (excluded; at least 1)")
      ->capture_default_str()
      ->check(FiniteRange(1, 1000));
  app.add_option("--threads", o.threads, "compute threads per rank")
      ->capture_default_str()
      ->check(FiniteRange(1, 1024));
  app.add_option("--backend", o.backend, "engine backend (default: the default CPU backend)");
  app.add_option("--dtype", o.dtype, "f32 | bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--optimizer", o.optimizer, "sgd (momentum 0.9) | adamw")->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take")->check(FiniteRange(0.1, 86400.0));
  app.add_flag("--quick", o.quick,
               "a smoke run: batches 32,128, recompute none,convs, 2 repeats of 2 + 3 steps (unless given)");
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)");
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  if (const auto status = parse_command_line(app, argc, argv, "memory_study")) return *status;
  if (o.quick) {  // the smoke run's sizes, where not given explicitly
    if (app.count("--batches") == 0) o.batches = "32,128";
    if (app.count("--recompute") == 0) o.recompute = "none,convs";
    if (app.count("--repeats") == 0) o.repeats = 2;
    if (app.count("--steps") == 0) o.steps = 3;
    if (app.count("--warmup") == 0) o.warmup = 2;
  }
  auto world = comm::MpiCommunicator::world();
  const int P = world->size(), rank = world->rank();
  try {
    world->set_timeout(o.timeout);
    check_backend_name(o.backend);
    // The arms, the control (the middle batch, none, zero 0) twice: the calibration pair.
    std::vector<std::int64_t> batches;
    for (const std::string& b : split(o.batches)) {
      std::int64_t value = 0;
      std::size_t used = 0;
      try {
        value = std::stoll(b, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      TL_CHECK(used == b.size() && used > 0 && value >= P && value % P == 0,
               fmt::format("memory_study: --batches: {} is not a whole number that splits over the {} ranks",
                           quote_value(b), P));
      batches.push_back(value);
    }
    std::vector<Recompute> levels;
    for (const std::string& r : split(o.recompute)) {
      const ConfigField& field = config_field("recompute");
      TrainConfig probe;
      field.set(probe, r, "--recompute");
      levels.push_back(probe.execution.recompute);
    }
    std::vector<int> stages;
    for (const std::string& z : split(o.zero)) {
      TL_CHECK(z == "0" || z == "1", "memory_study: --zero: " + quote_value(z) + " is not a stage DDP runs (0 or 1)");
      stages.push_back(z[0] - '0');
    }
    TL_CHECK(!batches.empty() && !levels.empty() && !stages.empty(),
             "memory_study: --batches, --recompute and --zero each need at least one value");
    TL_CHECK(levels.front() == Recompute::none && stages.front() == 0,
             "memory_study: the first --recompute must be none and the first --zero 0 (the controls)");
    TL_CHECK(P >= 2 || std::find(stages.begin(), stages.end(), 1) == stages.end(),
             "memory_study: zero 1 shards over the ranks: launch at least 2 (scripts/mpirun -np 2 ...)");
    std::vector<Arm> arms;
    const std::int64_t control_batch = batches[batches.size() / 2];
    for (std::int64_t batch : batches) {
      for (Recompute level : levels) {
        for (int zero : stages) {
          const std::string name = fmt::format("b{} {} z{}", batch, recompute_name(level), zero);
          arms.push_back({name, batch, level, zero});
          if (batch == control_batch && level == Recompute::none && zero == 0)
            arms.push_back({name + " again", batch, level, zero});
        }
      }
    }

    Backend& host = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
    json env = current_environment(host).to_json();
    env["versions"]["mpi"] = comm::mpi_library_version();
    env["timer"] = "steady_clock (the slowest rank's median measured step)";
    env["threads"] = o.threads;
    const std::string run_id = new_run_id();
    const Ledger ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
    if (rank == 0) {
      std::cout << fmt::format(
          "# memory_study: {} arms x {} repeats interleaved over {} ranks, {} warm-up + {} measured steps each, {} "
          "thread(s) per rank, backend {}, {}, optimizer {}; control {} (twice: the calibration pair)\n",
          arms.size(), o.repeats, P, o.warmup, o.steps, o.threads, host.name(), o.dtype, o.optimizer,
          fmt::format("b{} none z0", control_batch));
      std::cout.flush();
    }
    std::vector<json> rows;
    for (int repeat = 0; repeat < o.repeats; ++repeat) {
      for (const Arm& arm : arms) {
        TrainConfig config;
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
        config.parallel.zero = arm.zero;
        comm::Replica replica(*world);
        auto trainer = replica.trainer(config, smallcnn_task(config));
        comm::Ddp& ddp = *replica.ddp();
        const TrainResult trained = trainer->train(nullptr);
        std::vector<double> steps = trained.step_seconds;
        std::sort(steps.begin(), steps.end());
        const double median = steps.empty() ? 0 : steps[steps.size() / 2];
        const auto medians = ddp.gather(median);
        // The largest rank's memory: its breakdown at the peak; each category's peak over the ranks.
        const MemoryUsage& m = trained.memory;
        const auto totals = ddp.gather(m.total_peak);
        const auto largest = static_cast<std::size_t>(std::max_element(totals.begin(), totals.end()) - totals.begin());
        json peak = json::object(), at_peak = json::object();
        for (int c = 0; c < kMemoryCategories; ++c) {
          const auto category = static_cast<MemoryCategory>(c);
          const auto peaks = ddp.gather(m.peak_of(category));
          const auto ats = ddp.gather(m.at_peak[static_cast<std::size_t>(c)]);
          peak[memory_category_name(category)] = *std::max_element(peaks.begin(), peaks.end());
          at_peak[memory_category_name(category)] = ats[largest];
        }
        const auto phases = ddp.gather(static_cast<std::int64_t>(m.peak_phase));
        const auto held = ddp.gather(m.activations_after_forward);
        if (rank == 0) {
          json row = env;
          row["run_id"] = run_id;
          row["kind"] = "memory_repeat";
          row["status"] = "ok";
          row["arm"] = arm.name;
          row["repeat"] = repeat;
          row["config"] = {{"batch", arm.batch},
                           {"per_rank_batch", arm.batch / P},
                           {"recompute", recompute_name(arm.recompute)},
                           {"zero", arm.zero},
                           {"world", P},
                           {"dtype", o.dtype},
                           {"optimizer", o.optimizer},
                           {"steps", config.steps},
                           {"warmup_steps_excluded", o.warmup},
                           {"allreduce", "native"}};
          row["step_s_median"] = *std::max_element(medians.begin(), medians.end());
          row["step_s_median_per_rank"] = medians;
          row["step_seconds_rank0"] = trained.step_seconds;
          row["samples_per_s"] = trained.samples_per_s;
          row["memory_per_rank"] = {
              {"peak_bytes", peak},
              {"at_peak_bytes", at_peak},
              {"total_peak_bytes", totals[largest]},
              {"peak_rank", largest},
              {"peak_phase", memory_phase_name(static_cast<MemoryPhase>(phases[largest]))},
              {"activations_after_forward_bytes", *std::max_element(held.begin(), held.end())},
              {"note",
               "tensor bytes by category (engine accounting), the largest rank's; backend scratch not counted"}};
          if (!o.no_ledger) ledger.append(row);
          rows.push_back(row);
          std::cout << fmt::format("# repeat {}/{} {:<20} step {:.1f} ms, peak {:.2f} MiB per rank\n", repeat + 1,
                                   o.repeats, arm.name, 1e3 * row["step_s_median"].get<double>(),
                                   static_cast<double>(totals[largest]) / (1 << 20));
          std::cout.flush();
        }
        world->sleeping_barrier(2e-3);
      }
    }
    if (rank == 0) {
      const MemoryAnalysis analysis = analyse_memory(memory_arms_from_rows(rows));
      std::cout << "\n" << memory_table(analysis, true) << "\n" << memory_findings(analysis);
      if (!o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
    }
    return 0;
  } catch (const Error& e) {
    world->abort(std::string("memory_study: error: ") + e.what(), 2);
  }
}
