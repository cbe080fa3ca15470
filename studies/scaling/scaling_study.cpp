// bench_scaling: weak and strong scaling of DDP training, world sizes 1, 2 and 4 inside one launch.
//   scripts/mpirun -np 4 build/bin/bench_scaling
// World size W runs on a sub-communicator of the first W launched ranks; the others wait without
// spinning. Repeats are interleaved (every configuration once per round), warm-up steps excluded,
// each run's time the slowest rank's. Prints seed 000's two tables, the communication fraction by
// the paired no_sync comparison (repeated, with its spread, flagged when unusable), the
// decode-cost-0 ablation, DDP's overlap, the per-rank step-time distribution naming the slowest
// rank, and PyTorch DDP (gloo) at world 1 and 2 beside trainlab's. Every run is a ledger row.
#include "studies/scaling/scaling_study.h"

#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/affinity.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "comm/ddp.h"
#include "comm/mpi_communicator.h"
#include "comm/run_training.h"
#include "engine/trainer.h"

using namespace trainlab;
using namespace trainlab::comm;

namespace {

// A run's result, as rank 0 sees it.
struct Run {
  double samples_per_s = 0;
  double comm_wait_s = 0;  // per step, rank 0's: the exposed all-reduce (and ZeRO-1's all-gather)
  std::int64_t optimizer_state_bytes = 0, peak_bytes = 0;  // per rank, the largest over the ranks
  std::vector<std::array<double, 3>> rank_p50_p99_max;     // per rank, seconds
  DdpStepStats ddp;                                        // per step (means), rank 0's
  std::int64_t steps = 0;
  double accuracy = 0, final_loss = 0;  // accuracy runs: held-out accuracy at the end, the last loss
  double compute_s = 0;  // per step, the slowest rank's forward + backward + optimizer (no data wait, no comm wait)
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double index = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(index));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (index - static_cast<double>(lo));
}

// A barrier over the whole launch that sleeps instead of spinning: ranks outside the world being
// measured must not take cores from the ranks inside it.
void quiet_barrier(MpiCommunicator& world) { world.sleeping_barrier(2e-3); }

double lr_for(const trainlab::bench::ScalingOptions& o, std::int64_t global_batch) {
  // The linear rule against a fixed base batch: the LR follows the global batch, never the
  // per-worker one (the seed's bug).
  return o.base_lr * static_cast<double>(global_batch) / static_cast<double>(o.base_batch);
}

std::string ranks_per_core_text(int ranks, int cores) {
  return fmt::format("{:.1f}{}", static_cast<double>(ranks) / cores, ranks > cores ? " (oversubscribed)" : "");
}

}  // namespace

int trainlab::bench::run_scaling_study(const ScalingOptions& options) {
  const ScalingOptions& o = options;
  auto world = MpiCommunicator::world();
  const int P = world->size(), rank = world->rank();
  try {
    world->set_timeout(o.timeout);
    check_backend_name(o.backend);
    std::vector<int> worlds;
    {
      std::stringstream list(o.worlds);
      std::string item;
      while (std::getline(list, item, ',')) {
        int w = 0;
        std::size_t used = 0;
        try {
          w = std::stoi(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        TL_CHECK(used == item.size() && used > 0,
                 "bench_scaling: --worlds: " + quote_value(item) + " is not a whole number (e.g. --worlds 1,2,4)");
        TL_CHECK(std::find(worlds.begin(), worlds.end(), w) == worlds.end(),
                 fmt::format("bench_scaling: --worlds {}: world size {} is listed twice", quote_value(o.worlds), w));
        TL_CHECK(w >= 1 && w <= P, fmt::format("bench_scaling: --worlds: world size {} needs {} ranks, and {} were "
                                               "launched (scripts/mpirun -np {} ...)",
                                               w, w, P, std::max(w, 1)));
        worlds.push_back(w);
      }
      TL_CHECK(!worlds.empty() && worlds.front() == 1,
               "bench_scaling: --worlds must start at 1 (speedup and efficiency are against world 1)");
    }
    for (int w : worlds) {
      TL_CHECK(o.global_batch % w == 0,
               fmt::format("bench_scaling: --global-batch {} does not split over world {}", o.global_batch, w));
    }
    // --zero: one stage for every run, or several compared side by side.
    std::vector<int> zeros;
    {
      std::stringstream list(o.zero);
      std::string item;
      while (std::getline(list, item, ',')) {
        TL_CHECK(item == "0" || item == "1",
                 "bench_scaling: --zero: " + quote_value(item) + " is not a stage DDP runs (0 or 1, e.g. --zero 0,1)");
        TL_CHECK(std::find(zeros.begin(), zeros.end(), item[0] - '0') == zeros.end(),
                 "bench_scaling: --zero " + quote_value(o.zero) + ": stage " + item + " is listed twice");
        zeros.push_back(item[0] - '0');
      }
      TL_CHECK(!zeros.empty(), "bench_scaling: --zero is empty (0, 1 or 0,1)");
      TL_CHECK(zeros.size() == 1 || !o.bind_compare,
               "bench_scaling: --bind-compare and --zero 0,1 are separate studies");
    }
    // --grad-compress: one hook for every run, or several compared side by side.
    std::vector<GradCompression> compressions;
    {
      const std::map<std::string, GradCompression> names = {
          {"none", GradCompression::none}, {"bf16", GradCompression::bf16}, {"fp16", GradCompression::f16}};
      std::stringstream list(o.grad_compress);
      std::string item;
      while (std::getline(list, item, ',')) {
        auto it = names.find(item);
        TL_CHECK(it != names.end(), "bench_scaling: --grad-compress: " + quote_value(item) +
                                        " is not a hook (none, bf16, fp16; e.g. --grad-compress none,bf16)");
        TL_CHECK(std::find(compressions.begin(), compressions.end(), it->second) == compressions.end(),
                 "bench_scaling: --grad-compress " + quote_value(o.grad_compress) + ": " + item + " is listed twice");
        compressions.push_back(it->second);
      }
      TL_CHECK(!compressions.empty(), "bench_scaling: --grad-compress is empty (none, bf16, fp16 or a list)");
      TL_CHECK(compressions.size() == 1 || (zeros.size() == 1 && !o.bind_compare),
               "bench_scaling: --grad-compress with a list is a study of its own: not with --zero 0,1 or "
               "--bind-compare");
    }
    auto compression_name = [](GradCompression c) {
      return c == GradCompression::bf16 ? "bf16" : c == GradCompression::f16 ? "fp16" : "none";
    };
    const GradCompression compression0 = compressions.front();

    // One sub-communicator per world size: the first w ranks.
    // Over NCCL, the sub-communicators are split from the NCCL world (one GPU per rank; a host with
    // fewer GPUs than ranks is refused there, with the counts).
    std::unique_ptr<Communicator> nccl;
    if (o.comm == "nccl") {
      TL_CHECK(o.backend == "cuda", "bench_scaling: --comm nccl works on GPU memory: give --backend cuda (got '" +
                                        (o.backend.empty() ? default_backend_name() : o.backend) + "')");
      nccl = make_world("nccl");
      nccl->set_timeout(o.timeout);
    }
    Communicator& ddp_world = nccl ? *nccl : static_cast<Communicator&>(*world);
    std::map<int, std::unique_ptr<Communicator>> subs;
    for (int w : worlds) {
      if (subs.count(w) == 0) subs[w] = ddp_world.split(rank < w ? 0 : -1, rank);
    }
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const bench::Topology topology = bench::machine_topology();
    // What the launcher applied (OpenMPI binds each rank to a core by default at 2 ranks or fewer);
    // --bind replaces it for every thread this rank has (MPI's included) and every one it starts.
    const std::string launcher_cpus = bench::cpu_list(bench::thread_affinity(0));
    const bench::CpuSet unbound = topology.all();
    auto bind = [&](const std::string& how) {
      bench::set_process_affinity(how == "core" ? topology.core(rank) : unbound);
      return bench::cpu_list(bench::thread_affinity(0));
    };
    std::string bound_cpus = bind(o.bind);

    Backend& host = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
    bench::json env = bench::current_environment(host).to_json();
    env["versions"]["mpi"] = mpi_library_version();
    env["timer"] = "steady_clock (the slowest rank's measured steps)";
    env["communicator"] = ddp_world.backend();
    env["interconnect"] = ddp_world.interconnect();
    env["threads"] = o.threads;
    const std::string run_id = bench::new_run_id();
    const bench::Ledger ledger(o.ledger_path.empty() ? bench::default_ledger_path(device_type_name(host.device_type()))
                                                     : o.ledger_path);

    // One training run of world w; every launched rank calls this (ranks outside the world wait).
    // `seed` > 0: an accuracy run (that seed, evaluated on held-out data at the end) instead of a
    // timed one.
    auto run = [&](int w, std::int64_t global_batch, std::int64_t decode_cost, bool communicate, int measured, int zero,
                   GradCompression compression, std::uint64_t seed = 0) -> Run {
      Run result;
      if (rank < w) {
        TrainConfig config;
        config.execution.backend = o.backend;
        config.execution.dtype = parse_dtype(o.dtype);
        config.execution.threads = o.threads;
        config.batch = global_batch;
        config.optimizer.lr = lr_for(o, global_batch);
        config.data.decode_cost = decode_cost;
        config.reporting.warmup = o.warmup;
        config.steps = o.warmup + measured;
        config.reporting.eval_at_end = false;
        config.reporting.log_every = 1 << 30;
        config.data.train_samples = std::max<std::int64_t>(50000, global_batch * 2);
        config.data.eval_samples = 10;
        config.data.eval_batch = 10;
        if (seed > 0) {
          config.seed = seed;
          config.reporting.eval_at_end = true;
          config.data.eval_samples = 2000;
          config.data.eval_batch = 500;
        }
        config.parallel.bucket_cap_mb = o.bucket_cap_mb;
        config.parallel.allreduce = parse_algorithm(o.allreduce);
        config.parallel.rendezvous = o.rendezvous;
        config.parallel.first_bucket_mb = o.first_bucket_mb;
        config.parallel.zero = zero;
        config.parallel.grad_compress = compression;
        config.parallel.gradient_as_bucket_view = o.bucket_view;
        Replica replica(*subs[w]);
        auto trainer = replica.trainer(config, smallcnn_task(config));
        Ddp& ddp = *replica.ddp();
        ddp.set_communication(communicate);
        const TrainResult trained = trainer->train(nullptr);
        double total = 0;
        for (double s : trained.step_seconds) total += s;
        const double slowest = ddp.max_over_ranks(total);
        result.samples_per_s = static_cast<double>(global_batch * trained.measured_steps) / slowest;
        result.steps = trained.measured_steps;
        const auto p50 = ddp.gather(quantile(trained.step_seconds, 0.5));
        const auto p99 = ddp.gather(quantile(trained.step_seconds, 0.99));
        const auto mx = ddp.gather(*std::max_element(trained.step_seconds.begin(), trained.step_seconds.end()));
        for (int q = 0; q < w; ++q) {
          const auto i = static_cast<std::size_t>(q);
          result.rank_p50_p99_max.push_back({p50[i], p99[i], mx[i]});
        }
        const double n = static_cast<double>(std::max<std::int64_t>(1, trained.measured_steps));
        result.ddp = trained.ddp;
        result.ddp.backward_compute_s /= n;
        result.ddp.comm_s /= n;
        result.ddp.overlap_s /= n;
        result.ddp.exposed_s /= n;
        result.comm_wait_s = trained.measured.comm_s / n;
        result.compute_s = ddp.max_over_ranks(
            (trained.measured.forward_s + trained.measured.backward_s + trained.measured.optimizer_s) / n);
        for (std::int64_t b : ddp.gather(trained.memory.peak_of(MemoryCategory::optimizer_state)))
          result.optimizer_state_bytes = std::max(result.optimizer_state_bytes, b);
        for (std::int64_t b : ddp.gather(trained.memory.total_peak)) result.peak_bytes = std::max(result.peak_bytes, b);
        result.accuracy = trained.final_eval.accuracy;
        result.final_loss = trained.losses.empty() ? 0.0 : trained.losses.back();
      }
      quiet_barrier(*world);
      return result;
    };
    std::string bind_arm = o.bind;  // the binding of the run being recorded
    auto append_row = [&](const std::string& mode, int w, std::int64_t global_batch, std::int64_t decode_cost,
                          bool communicate, const Run& r, int zero, GradCompression compression) {
      if (rank != 0 || o.no_ledger) return;
      bench::json row = env;
      row["run_id"] = run_id;
      row["kind"] = "scaling";
      row["status"] = "ok";
      row["config"] = {{"mode", mode},
                       {"world", w},
                       {"global_batch", global_batch},
                       {"per_worker_batch", global_batch / w},
                       {"lr", lr_for(o, global_batch)},
                       {"decode_cost", decode_cost},
                       {"no_sync", !communicate},
                       {"allreduce", o.allreduce},
                       {"rendezvous", o.rendezvous},
                       {"bucket_cap_mb", o.bucket_cap_mb},
                       {"first_bucket_mb", o.first_bucket_mb},
                       {"dtype", o.dtype},
                       {"launched_ranks", P},
                       {"ranks_per_core", static_cast<double>(P) / cores},
                       {"bind", bind_arm},
                       {"bind_compare", o.bind_compare},
                       {"rank0_cpus", bound_cpus},
                       {"zero", zero},
                       {"grad_compress", compression_name(compression)},
                       {"bucket_view", o.bucket_view}};
      row["samples_per_s"] = r.samples_per_s;
      if (mode == "compress_accuracy") {
        row["held_out_accuracy"] = r.accuracy;
        row["final_loss"] = r.final_loss;
      }
      row["comm_wait_s_per_step"] = r.comm_wait_s;
      row["memory_per_rank"] = {{"optimizer_state_peak_bytes", r.optimizer_state_bytes},
                                {"total_peak_bytes", r.peak_bytes},
                                {"note", "the largest over the ranks"}};
      row["warmup_steps_excluded"] = o.warmup;
      row["measured_steps"] = r.steps;
      bench::json per_rank = bench::json::array();
      for (const auto& v : r.rank_p50_p99_max) per_rank.push_back({{"p50_s", v[0]}, {"p99_s", v[1]}, {"max_s", v[2]}});
      row["per_rank_step"] = per_rank;
      row["ddp_per_step"] = {{"backward_compute_s", r.ddp.backward_compute_s},
                             {"comm_s", r.ddp.comm_s},
                             {"overlap_s", r.ddp.overlap_s},
                             {"exposed_s", r.ddp.exposed_s},
                             {"bucket_bytes", r.ddp.bucket_bytes},
                             {"clock", r.ddp.device_clock ? "device events" : "host steady_clock"}};
      ledger.append(row);
    };

    if (rank == 0) {
      std::cout << fmt::format(
          "# bench_scaling: {} launched ranks on {} cores ({} ranks per core), worlds {}, {} repeats interleaved, {} "
          "warm-up + {} measured steps, {} thread(s) per rank, backend {}, {}, {} all-reduce{}, buckets {} MiB (first "
          "{}); "
          "decode cost {}{}; binding {} (rank 0 on CPUs {}; the launcher had given it {})\n",
          P, cores, ranks_per_core_text(P, cores), o.worlds, o.repeats, o.warmup, o.steps, o.threads, host.name(),
          o.dtype, o.allreduce, o.rendezvous ? " (sleeping rendezvous before each bucket)" : "", o.bucket_cap_mb,
          o.first_bucket_mb, o.decode_cost, o.ablation && !o.bind_compare ? " (and the 0 ablation)" : "",
          o.bind_compare ? "compared (none, none again, core)" : o.bind, bound_cpus, launcher_cpus);
      std::cout << "# LR rule: lr = " << o.base_lr << " x global batch / " << o.base_batch << "\n";
      std::cout << "# communicator " << ddp_world.backend() << ": " << ddp_world.interconnect() << "\n";
      std::cout.flush();
    }

    if (zeros.size() > 1 || compressions.size() > 1) {
      // ZeRO stages, or communication hooks, side by side: weak scaling at each world of 2 or more,
      // every arm once per round, the first arm twice (its second run is the calibration pair: the
      // noise floor). Hooks are also timed at world 1 in every round (weak-scaling efficiency per
      // round against the targets), and trained on paired seeds for their held-out accuracy.
      const bool hooks = compressions.size() > 1;
      std::vector<int> compared;
      for (int w : worlds)
        if (w >= 2) compared.push_back(w);
      TL_CHECK(!compared.empty(),
               std::string("bench_scaling: --") + (hooks ? "grad-compress " + o.grad_compress : "zero " + o.zero) +
                   " compares at world 2 or more: give --worlds with one (and launch that many ranks)");
      TL_CHECK(!hooks || std::find(worlds.begin(), worlds.end(), 1) != worlds.end(),
               "bench_scaling: --grad-compress " + o.grad_compress +
                   " measures weak-scaling efficiency against world 1: give --worlds 1,2");
      struct Arm {
        std::string name;
        int zero;
        GradCompression compression;
      };
      std::vector<Arm> arms;
      const std::size_t kinds = hooks ? compressions.size() : zeros.size();
      for (std::size_t i = 0; i < kinds; ++i) {
        const int zero = hooks ? zeros.front() : zeros[i];
        const GradCompression compression = hooks ? compressions[i] : compression0;
        const std::string name =
            hooks ? std::string("compress ") + compression_name(compression) : fmt::format("zero {}", zero);
        arms.push_back({name, zero, compression});
        if (i == 0) arms.push_back({name + " again", zero, compression});
      }
      const std::string mode = hooks ? "compress_compare" : "zero_compare";
      std::map<std::pair<int, std::size_t>, std::vector<Run>> results;
      std::vector<double> world1;          // samples/s at world 1, per round (hooks)
      std::vector<double> world1_compute;  // its compute ms per step
      for (int round = 0; round < o.repeats; ++round) {
        if (hooks) {
          const Run one = run(1, o.batch, o.decode_cost, true, o.steps, zeros.front(), compression0);
          append_row(mode, 1, o.batch, o.decode_cost, true, one, zeros.front(), compression0);
          world1.push_back(one.samples_per_s);
          world1_compute.push_back(one.compute_s);
          if (rank == 0)
            std::cout << fmt::format("# round {}/{} world 1 {:.1f} samples/s\n", round + 1, o.repeats,
                                     one.samples_per_s);
        }
        for (int w : compared) {
          for (std::size_t a = 0; a < arms.size(); ++a) {
            const Run r = run(w, o.batch * w, o.decode_cost, true, o.steps, arms[a].zero, arms[a].compression);
            append_row(mode, w, o.batch * w, o.decode_cost, true, r, arms[a].zero, arms[a].compression);
            results[{w, a}].push_back(r);
            if (rank == 0) {
              std::cout << fmt::format(
                  "# round {}/{} world {} {:<20} {:.1f} samples/s, comm wait {:.2f} ms/step, exposed {:.2f} ms/step\n",
                  round + 1, o.repeats, w, arms[a].name, r.samples_per_s, 1e3 * r.comm_wait_s, 1e3 * r.ddp.exposed_s);
              std::cout.flush();
            }
          }
        }
      }
      if (rank == 0) {
        std::cout << fmt::format(
            "\n{}, weak scaling (per-worker batch {}, decode cost {}, {}, {} all-reduce, gradients {}), {} rounds "
            "interleaved; memory is the largest rank's peak:\n",
            hooks ? "Communication hooks" : "ZeRO stages", o.batch, o.decode_cost, o.dtype, o.allreduce,
            o.bucket_view ? "as bucket views" : "copied into the buckets", o.repeats);
        std::cout << "| world | arm | samples/s median (min-max) | weak efficiency median (min-max) | comm wait "
                     "ms/step | exposed comm ms/step | compute ms/step | bytes on the wire per step | optimizer state "
                     "per rank | "
                     "tensor peak per rank | vs " +
                         arms.front().name + " |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
        auto samples = [&](int w, std::size_t a) {
          std::vector<double> v;
          for (const Run& r : results[{w, a}]) v.push_back(r.samples_per_s);
          return v;
        };
        std::map<std::size_t, double> median_efficiency;  // at world 2, per arm (hooks)
        for (int w : compared) {
          const auto calibration = bench::calibrate(samples(w, 0), samples(w, 1));
          const bool valid = calibration.valid && o.repeats >= 2;
          const auto control = bench::summarize(samples(w, 0));
          for (std::size_t a = 0; a < arms.size(); ++a) {
            const auto s = bench::summarize(samples(w, a));
            double comm = 0, exposed = 0, compute = 0;
            for (const Run& r : results[{w, a}]) {
              comm += r.comm_wait_s;
              exposed += r.ddp.exposed_s;
              compute += r.compute_s;
            }
            compute /= static_cast<double>(results[{w, a}].size());
            comm /= static_cast<double>(results[{w, a}].size());
            exposed /= static_cast<double>(results[{w, a}].size());
            const Run& last = results[{w, a}].back();
            std::int64_t wire = 0;
            for (std::int64_t bytes : last.ddp.bucket_bytes) wire += bytes;
            std::string efficiency = "-";
            if (hooks) {
              std::vector<double> per_round;
              for (std::size_t i = 0; i < results[{w, a}].size(); ++i)
                per_round.push_back(results[{w, a}][i].samples_per_s / (w * world1[i]));
              const auto e = bench::summarize(per_round);
              if (w == 2) median_efficiency[a] = e.median;
              efficiency = fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * e.median, 100 * e.min, 100 * e.max);
            }
            std::string against = a == 0 ? "control" : a == 1 ? "calibration pair" : "";
            if (a >= 2) {
              const auto v = bench::verdict(s, control, valid ? std::optional(calibration) : std::nullopt);
              against = bench::effect_words(bench::effect_percent(s, control), calibration,
                                            valid ? v : bench::Verdict::no_conclusion);
            }
            std::cout << fmt::format(
                "| {} | {} | {:.1f} ({:.1f}-{:.1f}) | {} | {:.2f} | {:.2f} | {:.2f} | {} | {:.2f} MiB | {:.2f} MiB | "
                "{} |\n",
                w, arms[a].name, s.median, s.min, s.max, efficiency, 1e3 * comm, 1e3 * exposed, 1e3 * compute,
                fmt::format("{:.2f} MiB", static_cast<double>(wire) / (1 << 20)),
                static_cast<double>(last.optimizer_state_bytes) / (1 << 20),
                static_cast<double>(last.peak_bytes) / (1 << 20), against);
          }
          std::cout << fmt::format(
              "world {}: noise floor {:.1f}% between the two {} arms; separability_test_valid: {}\n", w,
              calibration.noise_floor_percent, arms.front().name, valid ? "true" : "false");
        }
        if (hooks && median_efficiency.count(0) > 0) {
          // The targets (issue 14), at world 2 and decode cost 0: >= 92% uncompressed, >= 95% with bf16.
          std::string targets;
          for (std::size_t a = 0; a < arms.size(); ++a) {
            if (a == 1) continue;
            const double target = arms[a].compression == GradCompression::none   ? 0.92
                                  : arms[a].compression == GradCompression::bf16 ? 0.95
                                                                                 : 0.0;
            if (target == 0.0) continue;
            targets += fmt::format("{}{} weak efficiency {:.1f}% >= {:.0f}%: {}", targets.empty() ? "" : "; ",
                                   arms[a].name, 100 * median_efficiency[a], 100 * target,
                                   median_efficiency[a] >= target ? "met" : "MISSED");
          }
          std::cout << "targets at world 2" << (o.decode_cost == 0 ? "" : " (they are set for decode cost 0)") << ": "
                    << targets << "\n";
          const auto c1 = bench::summarize(world1_compute);
          std::cout << fmt::format(
              "world 1 for reference: compute {:.2f} ms/step (median; forward + backward + optimizer, no waits): "
              "compute above it at world 2 is the ranks slowing each other (shared cores, caches, memory, and the "
              "communication thread's CPU), not communication the step waits for\n",
              1e3 * c1.median);
        }
      }
      if (hooks && o.accuracy_seeds > 0) {
        // What a hook costs in accuracy: every arm trained on the same seeds (the same data and
        // initial weights), paired; the uncompressed arm's seed-to-seed spread is the noise.
        const int w = compared.front();
        std::map<std::size_t, std::vector<double>> accuracy;
        for (int seed = 1; seed <= o.accuracy_seeds; ++seed) {
          for (std::size_t a = 0; a < arms.size(); ++a) {
            if (a == 1) continue;  // the calibration pair is the same hook
            const Run r = run(w, o.batch * w, o.decode_cost, true, o.accuracy_steps, arms[a].zero, arms[a].compression,
                              static_cast<std::uint64_t>(seed));
            append_row("compress_accuracy", w, o.batch * w, o.decode_cost, true, r, arms[a].zero, arms[a].compression);
            accuracy[a].push_back(r.accuracy);
            if (rank == 0) {
              std::cout << fmt::format("# accuracy seed {}/{} world {} {:<20} held-out {:.2f}% (final loss {:.4f})\n",
                                       seed, o.accuracy_seeds, w, arms[a].name, 100 * r.accuracy, r.final_loss);
              std::cout.flush();
            }
          }
        }
        if (rank == 0) {
          const auto control = bench::summarize(accuracy[0]);
          const double noise = 100 * (control.max - control.min);
          std::cout << fmt::format(
              "\nHeld-out accuracy at world {} after {} steps ({} paired seeds; the noise is {}'s seed-to-seed "
              "spread, {:.2f} pp):\n| arm | accuracy median (min-max) | paired difference median (min-max) | within "
              "the noise |\n|---|---|---|---|\n",
              w, o.accuracy_steps, o.accuracy_seeds, arms.front().name, noise);
          for (std::size_t a = 0; a < arms.size(); ++a) {
            if (a == 1) continue;
            const auto s = bench::summarize(accuracy[a]);
            std::string paired = "-", within = "control";
            if (a >= 2) {
              std::vector<double> d;
              for (std::size_t i = 0; i < accuracy[a].size(); ++i) d.push_back(100 * (accuracy[a][i] - accuracy[0][i]));
              const auto ds = bench::summarize(d);
              paired = fmt::format("{:+.2f} pp ({:+.2f} to {:+.2f})", ds.median, ds.min, ds.max);
              within = std::abs(ds.median) <= noise ? "yes" : "NO: compression costs accuracy here";
            }
            std::cout << fmt::format("| {} | {:.2f}% ({:.2f}-{:.2f}) | {} | {} |\n", arms[a].name, 100 * s.median,
                                     100 * s.min, 100 * s.max, paired, within);
          }
        }
      }
      if (rank == 0 && !o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
      return 0;
    }

    if (o.bind_compare) {
      // Weak scaling at worlds 1 and 2 under each binding arm, interleaved; efficiency per round.
      TL_CHECK(P >= 2,
               "bench_scaling: --bind-compare measures world 2: launch at least 2 ranks (scripts/mpirun -np 2)");
      const std::vector<std::string> arms = {"none", "none_b", "core"};
      std::map<std::string, std::vector<double>> efficiency, sps1, sps2;
      for (int round = 0; round < o.repeats; ++round) {
        for (const auto& arm : arms) {
          bind_arm = arm;
          bound_cpus = bind(arm == "core" ? "core" : "none");
          const Run one = run(1, o.batch, o.decode_cost, true, o.steps, zeros.front(), compression0);
          append_row("weak", 1, o.batch, o.decode_cost, true, one, zeros.front(), compression0);
          const Run two = run(2, o.batch * 2, o.decode_cost, true, o.steps, zeros.front(), compression0);
          append_row("weak", 2, o.batch * 2, o.decode_cost, true, two, zeros.front(), compression0);
          if (rank == 0) {
            sps1[arm].push_back(one.samples_per_s);
            sps2[arm].push_back(two.samples_per_s);
            efficiency[arm].push_back(two.samples_per_s / (2 * one.samples_per_s));
            std::cout << fmt::format(
                "# round {}/{} bind {:<6} world 1 {:.1f} samples/s, world 2 {:.1f}: efficiency "
                "{:.1f}% (rank 0 on CPUs {})\n",
                round + 1, o.repeats, arm, one.samples_per_s, two.samples_per_s, 100 * efficiency[arm].back(),
                bound_cpus);
            std::cout.flush();
          }
        }
      }
      bind(o.bind);
      if (rank == 0) {
        std::cout << fmt::format(
            "\nRank-per-core binding, weak scaling at world 2 (per-worker batch {}, decode cost "
            "{}), {} rounds interleaved:\n",
            o.batch, o.decode_cost, o.repeats);
        std::cout << "| bind | world 1 samples/s | world 2 samples/s | efficiency median (min-max) | vs none |\n"
                     "|---|---|---|---|---|\n";
        const auto calibration = bench::calibrate(efficiency["none"], efficiency["none_b"]);
        const bool valid = calibration.valid && o.repeats >= 2;
        for (const auto& arm : arms) {
          const auto e = bench::summarize(efficiency[arm]);
          std::string against = arm == "none" ? "control" : arm == "none_b" ? "calibration pair" : "";
          if (arm == "core") {
            const auto v = bench::verdict(e, bench::summarize(efficiency["none"]),
                                          valid ? std::optional(calibration) : std::nullopt);
            const double points = 100 * (e.median - bench::summarize(efficiency["none"]).median);
            // The floor here is in points of efficiency (the unbound arms' gap), so is the effect.
            const double floor_points = 100 * std::abs(calibration.a.median - calibration.b.median);
            const double m = bench::floor_multiple(points, floor_points);
            against = fmt::format("{:+.1f} points ({} the noise floor), {}", points,
                                  std::isinf(m) ? std::string("inf") : fmt::format("{:.1f}x", m),
                                  valid ? bench::verdict_words(v) : "NO CONCLUSION");
          }
          std::cout << fmt::format("| {} | {:.1f} | {:.1f} | {:.1f}% ({:.1f}-{:.1f}) | {} |\n", arm,
                                   bench::summarize(sps1[arm]).median, bench::summarize(sps2[arm]).median,
                                   100 * e.median, 100 * e.min, 100 * e.max, against);
        }
        std::cout << fmt::format(
            "noise floor: {:.1f} points of efficiency between the two unbound arms; separability_test_valid: {}\n",
            100 * std::abs(calibration.a.median - calibration.b.median), valid ? "true" : "false");
        if (!valid)
          std::cout << "NO CONCLUSION: the two unbound arms (identical configurations) do not overlap, or there is "
                       "one round: no verdict on binding is issued\n";
        if (!o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
      }
      return 0;
    }

    // The scaling runs, interleaved: every configuration once per round.
    struct Config {
      std::string mode;  // weak | strong
      int world;
      std::int64_t global_batch, decode_cost;
    };
    std::vector<Config> configs;
    std::vector<std::int64_t> decode_costs = {o.decode_cost};
    if (o.ablation && o.decode_cost != 0) decode_costs.push_back(0);
    for (std::int64_t decode : decode_costs) {
      for (int w : worlds) configs.push_back({"weak", w, o.batch * w, decode});
      for (int w : worlds) configs.push_back({"strong", w, o.global_batch, decode});
    }
    std::vector<std::vector<Run>> runs(configs.size());
    // The peer is PyTorch DDP over gloo on the CPU: beside a GPU run it would compare other things.
    const bool peer_wanted = o.peer && o.comm == "mpi";
    const bool peer_possible =
        peer_wanted && rank == 0 && access(o.python.c_str(), X_OK) == 0 && access(o.peer_script.c_str(), R_OK) == 0;
    // The peer is compared at decode cost 0 only: without a trainlab run there (--no-ablation with a
    // decode cost), there is nothing to set beside it.
    const bool trainlab_at_decode0 = std::find(decode_costs.begin(), decode_costs.end(), 0) != decode_costs.end();
    std::vector<int> peer_worlds;
    for (int w : worlds)
      if (w <= 2 && trainlab_at_decode0) peer_worlds.push_back(w);
    // Per world, per PyTorch variant (torch_ddp.py measures every variant each round), in the peer's
    // own order; the best by median is the peer (bench::best_by_median).
    std::map<int, std::map<std::string, std::vector<double>>> peer_samples;
    std::vector<std::string> peer_variants;
    std::string peer_note =
        !o.peer               ? "skipped (--no-peer)"
        : o.comm != "mpi"     ? "not run: the peer is PyTorch DDP over gloo on the CPU, this run is over nccl"
        : trainlab_at_decode0 ? ""
                              : fmt::format(
                                    "not measured: the comparison is at decode cost 0, and --no-ablation "
                                    "with --decode-cost {} runs trainlab at {} only",
                                    o.decode_cost, o.decode_cost);
    const std::string& peer_script = o.peer_script;
    for (int round = 0; round < o.repeats; ++round) {
      for (std::size_t c = 0; c < configs.size(); ++c) {
        const Config& config = configs[c];
        runs[c].push_back(
            run(config.world, config.global_batch, config.decode_cost, true, o.steps, zeros.front(), compression0));
        append_row(config.mode, config.world, config.global_batch, config.decode_cost, true, runs[c].back(),
                   zeros.front(), compression0);
      }
      // The peer in the same round: PyTorch DDP over gloo, the weak configuration at decode cost 0
      // (its batches are made in memory), world 1 and 2.
      if (peer_wanted) {
        if (rank == 0 && peer_possible) {
          for (int w : peer_worlds) {
            const std::string command = fmt::format(
                "{} {} --world {} --batch {} --lr {} --threads {} --steps {} --warmup {} --dtype {} --variant all 2>&1",
                o.python, peer_script, w, o.batch, lr_for(o, o.batch * w), o.threads, o.steps, o.warmup, o.dtype);
            std::string output;
            if (FILE* pipe = popen(command.c_str(), "r")) {
              std::array<char, 4096> buffer{};
              while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
              pclose(pipe);
            }
            const auto line_start = output.rfind("{\"tool\"");
            try {
              const auto parsed = bench::json::parse(output.substr(line_start == std::string::npos ? 0 : line_start));
              if (parsed.contains("error")) {
                peer_note = "skipped: " + parsed["error"].get<std::string>();
              } else {
                for (const auto& [variant, result] : parsed.at("variants").items()) {
                  if (std::find(peer_variants.begin(), peer_variants.end(), variant) == peer_variants.end())
                    peer_variants.push_back(variant);
                  peer_samples[w][variant].push_back(result.at("samples_per_s").get<double>());
                }
                if (!o.no_ledger) {
                  bench::json row = env;
                  row["run_id"] = run_id;
                  row["kind"] = "scaling_peer";
                  row["status"] = "ok";
                  row["peer"] = parsed;
                  row["config"] = {{"mode", "weak"},
                                   {"world", w},
                                   {"global_batch", o.batch * w},
                                   {"decode_cost", 0},
                                   {"dtype", o.dtype}};
                  ledger.append(row);
                }
              }
            } catch (const std::exception& e) {
              peer_note = "failed: " + output.substr(0, 300);
            }
          }
        } else if (rank == 0) {
          peer_note = "skipped: " + o.python + " is not executable or " + o.peer_script + " is missing";
        }
        quiet_barrier(*world);
      }
      if (rank == 0) {
        std::cout << fmt::format("# round {}/{} done\n", round + 1, o.repeats);
        std::cout.flush();
      }
    }

    // The communication fraction: paired runs with and without communication, T times per world.
    std::map<int, std::vector<double>> fractions;
    for (int t = 0; t < o.trials; ++t) {
      for (int w : worlds) {
        if (w == 1) continue;
        const Run with = run(w, o.batch * w, o.decode_cost, true, o.trial_steps, zeros.front(), compression0);
        const Run without = run(w, o.batch * w, o.decode_cost, false, o.trial_steps, zeros.front(), compression0);
        append_row("weak", w, o.batch * w, o.decode_cost, true, with, zeros.front(), compression0);
        append_row("weak", w, o.batch * w, o.decode_cost, false, without, zeros.front(), compression0);
        if (rank == 0) fractions[w].push_back(100.0 * (1.0 - with.samples_per_s / without.samples_per_s));
      }
    }

    if (rank == 0) {
      auto table = [&](const std::string& mode, std::int64_t decode) {
        const bool weak = mode == "weak";
        std::cout << fmt::format("\n{} scaling ({}), decode cost {}:\n", weak ? "Weak" : "Strong",
                                 weak ? "per-worker batch fixed - \"more data in the same time\""
                                      : "global batch fixed - \"the same job, faster\"",
                                 decode);
        std::cout << fmt::format("| world | {} | lr | samples/s (mean ± std) | speedup | efficiency | ranks/core |\n",
                                 weak ? "global batch" : "per-worker batch");
        std::cout << "|---|---|---|---|---|---|---|\n";
        double base = 0;
        for (std::size_t c = 0; c < configs.size(); ++c) {
          const Config& config = configs[c];
          if (config.mode != mode || config.decode_cost != decode) continue;
          std::vector<double> values;
          for (const Run& r : runs[c]) values.push_back(r.samples_per_s);
          const auto s = bench::summarize(values);
          if (config.world == 1) base = s.mean;
          const double speedup = base > 0 ? s.mean / base : 0;
          // Weak: the ideal is w times world 1; strong: the same.
          std::cout << fmt::format("| {} | {} | {:.4f} | {:.1f} ± {:.1f} | {:.2f}x | {:.0f}% | {} |\n", config.world,
                                   weak ? config.global_batch : config.global_batch / config.world,
                                   lr_for(o, config.global_batch), s.mean, s.std, speedup, 100 * speedup / config.world,
                                   ranks_per_core_text(config.world, cores));
        }
      };
      for (std::int64_t decode : decode_costs) {
        table("weak", decode);
        table("strong", decode);
      }

      std::cout << fmt::format(
          "\nCommunication fraction (weak, decode cost {}), paired no_sync comparison, {} "
          "trials of {} steps: 1 - (samples/s with communication) / (without):\n",
          o.decode_cost, o.trials, o.trial_steps);
      std::cout << "| world | comm fraction (median) | spread across trials (half of max-min) | verdict |\n";
      std::cout << "|---|---|---|---|\n";
      for (const auto& [w, values] : fractions) {
        const auto s = bench::summarize(values);
        const double spread = (s.max - s.min) / 2;
        std::cout << fmt::format("| {} | {:.1f}% | ±{:.1f} points | {} |\n", w, s.median, spread,
                                 spread > std::abs(s.median)
                                     ? "UNUSABLE: the spread exceeds the median (a coin flip on this machine)"
                                     : "usable");
      }

      // DDP's own accounting, and the step-time distribution per rank.
      std::cout << "\nDDP per step (weak, decode cost " << o.decode_cost
                << ", means over repeats; overlap = communication inside backward):\n";
      std::cout << "| world | buckets (MiB) | backward compute ms | communication ms | overlapped ms | exposed ms |\n";
      std::cout << "|---|---|---|---|---|---|\n";
      bool overlap_real = true, two_buckets = false;
      for (std::size_t c = 0; c < configs.size(); ++c) {
        const Config& config = configs[c];
        if (config.mode != "weak" || config.decode_cost != o.decode_cost || config.world == 1) continue;
        double backward = 0, comm = 0, overlapped = 0, exposed = 0;
        for (const Run& r : runs[c]) {
          backward += r.ddp.backward_compute_s;
          comm += r.ddp.comm_s;
          overlapped += r.ddp.overlap_s;
          exposed += r.ddp.exposed_s;
        }
        const double n = static_cast<double>(runs[c].size());
        std::string buckets;
        for (auto b : runs[c].front().ddp.bucket_bytes)
          buckets += fmt::format("{}{:.2f}", buckets.empty() ? "" : ", ", static_cast<double>(b) / (1 << 20));
        two_buckets = two_buckets || runs[c].front().ddp.bucket_bytes.size() >= 2;
        overlap_real = overlap_real && exposed < comm;
        std::cout << fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", config.world, buckets,
                                 1e3 * backward / n, 1e3 * comm / n, 1e3 * overlapped / n, 1e3 * exposed / n);
      }

      std::cout << "\nStep time per rank (weak, decode cost " << o.decode_cost << ", largest world, every repeat):\n";
      std::cout << "| rank | p50 ms | p99 ms | max ms |\n|---|---|---|---|\n";
      for (std::size_t c = 0; c < configs.size(); ++c) {
        const Config& config = configs[c];
        if (config.mode != "weak" || config.decode_cost != o.decode_cost || config.world != worlds.back()) continue;
        std::vector<std::array<double, 3>> worst(static_cast<std::size_t>(config.world), {0, 0, 0});
        for (const Run& r : runs[c])
          for (std::size_t q = 0; q < r.rank_p50_p99_max.size(); ++q)
            for (int k = 0; k < 3; ++k) worst[q][k] = std::max(worst[q][k], r.rank_p50_p99_max[q][k]);
        std::size_t slowest = 0;
        for (std::size_t q = 0; q < worst.size(); ++q) {
          std::cout << fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} |\n", q, 1e3 * worst[q][0], 1e3 * worst[q][1],
                                   1e3 * worst[q][2]);
          if (worst[q][0] > worst[slowest][0]) slowest = q;
        }
        double fastest = worst[0][0];
        for (const auto& v : worst) fastest = std::min(fastest, v[0]);
        std::cout << fmt::format("slowest rank: {} (median step {:.1f} ms, {:+.0f}% over the fastest rank's)\n",
                                 slowest, 1e3 * worst[slowest][0], 100 * (worst[slowest][0] / fastest - 1));
      }

      // The peer beside trainlab at decode cost 0 (both make their batches without decode work).
      std::cout << "\nAgainst PyTorch DDP (gloo), weak scaling, per-worker batch " << o.batch << ", decode cost 0, "
                << o.threads << " thread(s) per rank, " << o.dtype << ":\n";
      double ratio_w2 = 0;
      if (peer_samples.empty()) {
        std::cout << "PyTorch DDP: " << (peer_note.empty() ? "no result" : peer_note) << "\n";
      } else {
        std::cout << "Every PyTorch variant is measured each round; the peer is the best by median at each world "
                     "(ties: the higher minimum, then the peer's own order). Ratio: median (min-max) of the "
                     "per-round ratios.\n";
        std::cout << "| world | trainlab samples/s | best PyTorch DDP variant | samples/s | ratio | every variant "
                     "(median) |\n|---|---|---|---|---|---|\n";
        for (const auto& [w, by_variant] : peer_samples) {
          std::vector<double> ours;
          for (std::size_t c = 0; c < configs.size(); ++c) {
            if (configs[c].mode == "weak" && configs[c].decode_cost == 0 && configs[c].world == w) {
              for (const Run& r : runs[c]) ours.push_back(r.samples_per_s);
            }
          }
          std::vector<std::vector<double>> values;
          std::string every;
          for (const auto& v : peer_variants) {
            const auto it = by_variant.find(v);
            values.push_back(it == by_variant.end() ? std::vector<double>{} : it->second);
            if (!values.back().empty())
              every += fmt::format("{}{} {:.0f}", every.empty() ? "" : ", ", v, bench::summarize(values.back()).median);
          }
          const std::size_t best = bench::best_by_median(peer_variants, values);
          const auto theirs = bench::summarize(values[best]);
          std::vector<double> ratios;
          for (std::size_t i = 0; i < std::min(ours.size(), values[best].size()); ++i)
            ratios.push_back(ours[i] / values[best][i]);
          const auto ratio = bench::summarize(ratios);
          if (w == 2) ratio_w2 = ratio.median;
          std::cout << fmt::format("| {} | {:.1f} | {} | {:.1f} ({:.1f}-{:.1f}) | {:.2f}x ({:.2f}-{:.2f}) | {} |\n", w,
                                   bench::summarize(ours).median, peer_variants[best], theirs.median, theirs.min,
                                   theirs.max, ratio.median, ratio.min, ratio.max, every);
        }
        if (!peer_note.empty()) std::cout << "note: " << peer_note << "\n";
      }

      // The targets, at decode cost 0 (the ablation tables) where present.
      auto efficiency = [&](const std::string& mode, int w) {
        const std::int64_t decode =
            std::find(decode_costs.begin(), decode_costs.end(), 0) != decode_costs.end() ? 0 : o.decode_cost;
        double base = 0, at = -1;
        for (std::size_t c = 0; c < configs.size(); ++c) {
          if (configs[c].mode != mode || configs[c].decode_cost != decode) continue;
          std::vector<double> v;
          for (const Run& r : runs[c]) v.push_back(r.samples_per_s);
          const double mean = bench::summarize(v).mean;
          if (configs[c].world == 1) base = mean;
          if (configs[c].world == w) at = mean;
        }
        return at < 0 || base <= 0 ? -1.0 : at / base / w;
      };
      if (std::find(worlds.begin(), worlds.end(), 2) != worlds.end()) {
        const double weak2 = efficiency("weak", 2), strong2 = efficiency("strong", 2);
        std::cout << fmt::format(
            "\ntargets (world 2, decode cost {}): weak efficiency >= 90%: {:.0f}% {}; strong >= 80%: {:.0f}% {}; "
            "trainlab/PyTorch >= 1.5x: {}; exposed < total communication with >= 2 buckets: {}\n",
            std::find(decode_costs.begin(), decode_costs.end(), 0) != decode_costs.end() ? 0 : o.decode_cost,
            100 * weak2, weak2 >= 0.9 ? "met" : "MISSED", 100 * strong2, strong2 >= 0.8 ? "met" : "MISSED",
            ratio_w2 > 0 ? fmt::format("{:.2f}x {}", ratio_w2, ratio_w2 >= 1.5 ? "met" : "MISSED")
                         : std::string("not measured"),
            !two_buckets   ? std::string("n/a (one bucket)")
            : overlap_real ? "met"
                           : "MISSED");
      }
      if (!o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
    }
    return 0;
  } catch (const Error& e) {
    world->abort(std::string("error: ") + e.what(), 2);
  }
}
