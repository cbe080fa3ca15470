// bench_scaling's comparisons side by side, instead of the scaling tables: ZeRO stages or DDP's
// communication hooks (--zero 0,1, --grad-compress none,bf16), and rank-per-core binding
// (--bind-compare). Each arm once per round, interleaved; the first arm twice, its second run the
// calibration pair (the noise floor every verdict is in units of).
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include "backends/error.h"
#include "bench/measure/stats.h"
#include "studies/scaling/launch.h"

namespace trainlab::bench::scaling {

namespace {

struct CompareArm {
  std::string name;
  int zero;
  GradCompression compression;
  AllreduceAlgorithm allreduce;
};

// ZeRO stages, or communication hooks, side by side: weak scaling at each world of 2 or more,
// every arm once per round, the first arm twice (its second run is the calibration pair: the
// noise floor). Hooks are also timed at world 1 in every round (weak-scaling efficiency per round
// against the targets), and trained on paired seeds for their held-out accuracy.
struct Comparison {
  bool hooks = false;
  bool allreduces = false;    // --allreduce ring,single_copy: DDP's all-reduces side by side
  std::vector<int> compared;  // the worlds of 2 or more
  std::vector<CompareArm> arms;
  std::string mode;  // compress_compare | zero_compare | allreduce_compare
  std::map<std::pair<int, std::size_t>, std::vector<Trained>> results;  // (world, arm) -> per round
  std::vector<double> world1;                                           // samples/s at world 1, per round (hooks)
  std::vector<double> world1_compute;                                   // its compute ms per step

  std::vector<double> samples(int w, std::size_t a) {
    std::vector<double> v;
    for (const Trained& r : results[{w, a}]) v.push_back(r.samples_per_s);
    return v;
  }
};

Comparison plan_comparison(const Launch& l) {
  const ScalingOptions& o = l.o;
  const Plan& plan = l.plan;
  Comparison c;
  c.hooks = plan.compressions.size() > 1;
  for (int w : plan.worlds)
    if (w >= 2) c.compared.push_back(w);
  TL_CHECK(!c.compared.empty(),
           std::string("bench_scaling: --") +
               (c.hooks                      ? "grad-compress " + o.grad_compress
                : plan.allreduces.size() > 1 ? "allreduce " + o.allreduce
                                             : "zero " + o.zero) +
               " compares at world 2 or more: give --worlds with one (and launch that many ranks)");
  TL_CHECK(!c.hooks || std::find(plan.worlds.begin(), plan.worlds.end(), 1) != plan.worlds.end(),
           "bench_scaling: --grad-compress " + o.grad_compress +
               " measures weak-scaling efficiency against world 1: give --worlds 1,2");
  c.allreduces = plan.allreduces.size() > 1;
  const std::size_t kinds = c.hooks        ? plan.compressions.size()
                            : c.allreduces ? plan.allreduces.size()
                                           : plan.zeros.size();
  for (std::size_t i = 0; i < kinds; ++i) {
    const int zero = c.hooks || c.allreduces ? plan.zeros.front() : plan.zeros[i];
    const GradCompression compression = c.hooks ? plan.compressions[i] : l.compression0();
    const AllreduceAlgorithm allreduce = c.allreduces ? plan.allreduces[i] : l.allreduce0();
    const std::string name = c.hooks        ? std::string("compress ") + compression_name(compression)
                             : c.allreduces ? std::string(comm::algorithm_name(allreduce))
                                            : fmt::format("zero {}", zero);
    c.arms.push_back({name, zero, compression, allreduce});
    if (i == 0) c.arms.push_back({name + " again", zero, compression, allreduce});
  }
  c.mode = c.hooks ? "compress_compare" : c.allreduces ? "allreduce_compare" : "zero_compare";
  return c;
}

void time_rounds(Launch& l, Comparison& c) {
  const ScalingOptions& o = l.o;
  for (int round = 0; round < o.repeats; ++round) {
    if (c.hooks) {
      const Arm arm = l.arm(1, o.batch, o.decode_cost, true, o.steps);
      const Trained one = l.train(arm);
      l.record(c.mode, arm, one);
      c.world1.push_back(one.samples_per_s);
      c.world1_compute.push_back(one.compute_s);
      if (l.rank == 0)
        std::cout << fmt::format("# round {}/{} world 1 {:.1f} samples/s\n", round + 1, o.repeats, one.samples_per_s);
    }
    for (int w : c.compared) {
      for (std::size_t a = 0; a < c.arms.size(); ++a) {
        Arm arm = l.arm(w, o.batch * w, o.decode_cost, true, o.steps);
        arm.zero = c.arms[a].zero;
        arm.compression = c.arms[a].compression;
        arm.allreduce = c.arms[a].allreduce;
        const Trained r = l.train(arm);
        l.record(c.mode, arm, r);
        c.results[{w, a}].push_back(r);
        if (l.rank == 0) {
          std::cout << fmt::format(
              "# round {}/{} world {} {:<20} {:.1f} samples/s, comm wait {:.2f} ms/step, exposed {:.2f} ms/step\n",
              round + 1, o.repeats, w, c.arms[a].name, r.samples_per_s, 1e3 * r.comm_wait_s, 1e3 * r.ddp.exposed_s);
          std::cout.flush();
        }
      }
    }
  }
}

// World w's lines of the table: every arm against the control, in units of the calibration pair's
// gap; the median weak efficiency per arm at world 2 goes to `median_efficiency` (hooks).
void print_world(const Launch& l, Comparison& c, int w, std::map<std::size_t, double>& median_efficiency) {
  const ScalingOptions& o = l.o;
  const auto calibration = calibrate(c.samples(w, 0), c.samples(w, 1));
  const bool valid = calibration.valid && o.repeats >= 2;
  const auto control = summarize(c.samples(w, 0));
  for (std::size_t a = 0; a < c.arms.size(); ++a) {
    const auto s = summarize(c.samples(w, a));
    const std::vector<Trained>& runs = c.results[{w, a}];
    double comm = 0, exposed = 0, compute = 0;
    for (const Trained& r : runs) {
      comm += r.comm_wait_s + r.ddp.gather_wait_s;  // ZeRO-3's gathers are waited for inside forward and backward
      exposed += r.ddp.exposed_s;
      compute += r.compute_s;
    }
    compute /= static_cast<double>(runs.size());
    comm /= static_cast<double>(runs.size());
    exposed /= static_cast<double>(runs.size());
    const Trained& last = runs.back();
    std::int64_t wire = 0;
    for (std::int64_t bytes : last.ddp.bucket_bytes) wire += bytes;
    const std::string wire_cell =
        last.ddp.gather_bytes == 0
            ? fmt::format("{:.2f} MiB", static_cast<double>(wire) / (1 << 20))
            : fmt::format("{:.2f} MiB reduced + {:.2f} MiB gathered", static_cast<double>(wire) / (1 << 20),
                          static_cast<double>(last.ddp.gather_bytes) / (1 << 20));
    std::string efficiency = "-";
    if (c.hooks) {
      std::vector<double> per_round;
      for (std::size_t i = 0; i < runs.size(); ++i) per_round.push_back(runs[i].samples_per_s / (w * c.world1[i]));
      const auto e = summarize(per_round);
      if (w == 2) median_efficiency[a] = e.median;
      efficiency = fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * e.median, 100 * e.min, 100 * e.max);
    }
    std::string against = a == 0 ? "control" : a == 1 ? "calibration pair" : "";
    if (a >= 2) {
      const auto v = verdict(s, control, valid ? std::optional(calibration) : std::nullopt);
      against = effect_words(effect_percent(s, control), calibration, valid ? v : Verdict::no_conclusion);
    }
    std::cout << fmt::format(
        "| {} | {} | {:.1f} ({:.1f}-{:.1f}) | {} | {:.2f} | {:.2f} | {:.2f} | {} | {:.2f} MiB | {:.2f} MiB | "
        "{} |\n",
        w, c.arms[a].name, s.median, s.min, s.max, efficiency, 1e3 * comm, 1e3 * exposed, 1e3 * compute, wire_cell,
        static_cast<double>(last.optimizer_state_bytes) / (1 << 20), static_cast<double>(last.peak_bytes) / (1 << 20),
        against);
  }
  std::cout << fmt::format("world {}: noise floor {:.1f}% between the two {} arms; separability_test_valid: {}\n", w,
                           calibration.noise_floor_percent, c.arms.front().name, valid ? "true" : "false");
}

// The targets (issue 14), at world 2 and decode cost 0: >= 92% uncompressed, >= 95% with bf16.
void print_hook_targets(const Launch& l, const Comparison& c, std::map<std::size_t, double>& median_efficiency) {
  std::string targets;
  for (std::size_t a = 0; a < c.arms.size(); ++a) {
    if (a == 1) continue;
    const double target = c.arms[a].compression == GradCompression::none   ? 0.92
                          : c.arms[a].compression == GradCompression::bf16 ? 0.95
                                                                           : 0.0;
    if (target == 0.0) continue;
    targets += fmt::format("{}{} weak efficiency {:.1f}% >= {:.0f}%: {}", targets.empty() ? "" : "; ", c.arms[a].name,
                           100 * median_efficiency[a], 100 * target, median_efficiency[a] >= target ? "met" : "MISSED");
  }
  std::cout << "targets at world 2" << (l.o.decode_cost == 0 ? "" : " (they are set for decode cost 0)") << ": "
            << targets << "\n";
  const auto c1 = summarize(c.world1_compute);
  std::cout << fmt::format(
      "world 1 for reference: compute {:.2f} ms/step (median; forward + backward + optimizer, no waits): "
      "compute above it at world 2 is the ranks slowing each other (shared cores, caches, memory, and the "
      "communication thread's CPU), not communication the step waits for\n",
      1e3 * c1.median);
}

void print_comparison(const Launch& l, Comparison& c) {
  const ScalingOptions& o = l.o;
  std::cout << fmt::format(
      "\n{}, weak scaling (per-worker batch {}, decode cost {}, {}, {} all-reduce, gradients {}), {} rounds "
      "interleaved; memory is the largest rank's peak:\n",
      c.hooks        ? "Communication hooks"
      : c.allreduces ? "All-reduces"
                     : "ZeRO stages",
      o.batch, o.decode_cost, o.dtype, c.allreduces ? std::string("each arm's") : o.allreduce,
      o.bucket_view ? "as bucket views" : "copied into the buckets", o.repeats);
  std::cout << "| world | arm | samples/s median (min-max) | weak efficiency median (min-max) | comm wait "
               "ms/step | exposed comm ms/step | compute ms/step | bytes on the wire per step | optimizer state "
               "per rank | "
               "tensor peak per rank | vs " +
                   c.arms.front().name + " |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::map<std::size_t, double> median_efficiency;  // at world 2, per arm (hooks)
  for (int w : c.compared) print_world(l, c, w, median_efficiency);
  if (!c.hooks)
    std::cout << "comm wait: the step's waits for the reductions and the optimiser's all-gather, and ZeRO-3's waits "
                 "inside forward and backward for each part's all-gather (taken out of compute); bytes: the "
                 "gradients reduced and the parameters all-gathered per step\n";
  if (c.hooks && median_efficiency.count(0) > 0) print_hook_targets(l, c, median_efficiency);
}

// What a hook costs in accuracy: every arm trained on the same seeds (the same data and initial
// weights), paired; the uncompressed arm's seed-to-seed spread is the noise.
void accuracy_runs(Launch& l, const Comparison& c) {
  const ScalingOptions& o = l.o;
  const int w = c.compared.front();
  std::map<std::size_t, std::vector<double>> accuracy;
  for (int seed = 1; seed <= o.accuracy_seeds; ++seed) {
    for (std::size_t a = 0; a < c.arms.size(); ++a) {
      if (a == 1) continue;  // the calibration pair is the same hook
      Arm arm = l.arm(w, o.batch * w, o.decode_cost, true, o.accuracy_steps);
      arm.zero = c.arms[a].zero;
      arm.compression = c.arms[a].compression;
      arm.seed = static_cast<std::uint64_t>(seed);
      const Trained r = l.train(arm);
      l.record("compress_accuracy", arm, r);
      accuracy[a].push_back(r.accuracy);
      if (l.rank == 0) {
        std::cout << fmt::format("# accuracy seed {}/{} world {} {:<20} held-out {:.2f}% (final loss {:.4f})\n", seed,
                                 o.accuracy_seeds, w, c.arms[a].name, 100 * r.accuracy, r.final_loss);
        std::cout.flush();
      }
    }
  }
  if (l.rank != 0) return;
  const auto control = summarize(accuracy[0]);
  const double noise = 100 * (control.max - control.min);
  std::cout << fmt::format(
      "\nHeld-out accuracy at world {} after {} steps ({} paired seeds; the noise is {}'s seed-to-seed "
      "spread, {:.2f} pp):\n| arm | accuracy median (min-max) | paired difference median (min-max) | within "
      "the noise |\n|---|---|---|---|\n",
      w, o.accuracy_steps, o.accuracy_seeds, c.arms.front().name, noise);
  for (std::size_t a = 0; a < c.arms.size(); ++a) {
    if (a == 1) continue;
    const auto s = summarize(accuracy[a]);
    std::string paired = "-", within = "control";
    if (a >= 2) {
      std::vector<double> d;
      for (std::size_t i = 0; i < accuracy[a].size(); ++i) d.push_back(100 * (accuracy[a][i] - accuracy[0][i]));
      const auto ds = summarize(d);
      paired = fmt::format("{:+.2f} pp ({:+.2f} to {:+.2f})", ds.median, ds.min, ds.max);
      within = std::abs(ds.median) <= noise ? "yes" : "NO: compression costs accuracy here";
    }
    std::cout << fmt::format("| {} | {:.2f}% ({:.2f}-{:.2f}) | {} | {} |\n", c.arms[a].name, 100 * s.median,
                             100 * s.min, 100 * s.max, paired, within);
  }
}

// The binding table: efficiency per arm, core against none in points of efficiency.
void print_binding(const Launch& l, const std::vector<std::string>& arms,
                   std::map<std::string, std::vector<double>>& efficiency,
                   std::map<std::string, std::vector<double>>& sps1, std::map<std::string, std::vector<double>>& sps2) {
  const ScalingOptions& o = l.o;
  std::cout << fmt::format(
      "\nRank-per-core binding, weak scaling at world 2 (per-worker batch {}, decode cost "
      "{}), {} rounds interleaved:\n",
      o.batch, o.decode_cost, o.repeats);
  std::cout << "| bind | world 1 samples/s | world 2 samples/s | efficiency median (min-max) | vs none |\n"
               "|---|---|---|---|---|\n";
  const auto calibration = calibrate(efficiency["none"], efficiency["none_b"]);
  const bool valid = calibration.valid && o.repeats >= 2;
  for (const auto& arm : arms) {
    const auto e = summarize(efficiency[arm]);
    std::string against = arm == "none" ? "control" : arm == "none_b" ? "calibration pair" : "";
    if (arm == "core") {
      const auto v = verdict(e, summarize(efficiency["none"]), valid ? std::optional(calibration) : std::nullopt);
      const double points = 100 * (e.median - summarize(efficiency["none"]).median);
      // The floor here is in points of efficiency (the unbound arms' gap), so is the effect.
      const double floor_points = 100 * std::abs(calibration.a.median - calibration.b.median);
      const double m = floor_multiple(points, floor_points);
      against = fmt::format("{:+.1f} points ({} the noise floor), {}", points,
                            std::isinf(m) ? std::string("inf") : fmt::format("{:.1f}x", m),
                            valid ? verdict_words(v) : "NO CONCLUSION");
    }
    std::cout << fmt::format("| {} | {:.1f} | {:.1f} | {:.1f}% ({:.1f}-{:.1f}) | {} |\n", arm,
                             summarize(sps1[arm]).median, summarize(sps2[arm]).median, 100 * e.median, 100 * e.min,
                             100 * e.max, against);
  }
  std::cout << fmt::format(
      "noise floor: {:.1f} points of efficiency between the two unbound arms; separability_test_valid: {}\n",
      100 * std::abs(calibration.a.median - calibration.b.median), valid ? "true" : "false");
  if (!valid)
    std::cout << "NO CONCLUSION: the two unbound arms (identical configurations) do not overlap, or there is "
                 "one round: no verdict on binding is issued\n";
}

}  // namespace

int compare_arms(Launch& l) {
  Comparison c = plan_comparison(l);
  time_rounds(l, c);
  if (l.rank == 0) print_comparison(l, c);
  if (c.hooks && l.o.accuracy_seeds > 0) accuracy_runs(l, c);
  l.print_ledger_line();
  return 0;
}

int compare_binding(Launch& l) {
  // Weak scaling at worlds 1 and 2 under each binding arm, interleaved; efficiency per round.
  const ScalingOptions& o = l.o;
  TL_CHECK(l.launched >= 2,
           "bench_scaling: --bind-compare measures world 2: launch at least 2 ranks (scripts/mpirun -np 2)");
  TL_CHECK(std::find(l.plan.worlds.begin(), l.plan.worlds.end(), 2) != l.plan.worlds.end(),
           "bench_scaling: --bind-compare measures worlds 1 and 2: --worlds " + quote_value(o.worlds) +
               " lacks 2 (give --worlds 1,2)");
  const std::vector<std::string> arms = {"none", "none_b", "core"};
  std::map<std::string, std::vector<double>> efficiency, sps1, sps2;
  for (int round = 0; round < o.repeats; ++round) {
    for (const auto& arm : arms) {
      l.bind_arm = arm;
      l.bound_cpus = l.bind(arm == "core" ? "core" : "none");
      const Arm at1 = l.arm(1, o.batch, o.decode_cost, true, o.steps);
      const Trained one = l.train(at1);
      l.record("weak", at1, one);
      const Arm at2 = l.arm(2, o.batch * 2, o.decode_cost, true, o.steps);
      const Trained two = l.train(at2);
      l.record("weak", at2, two);
      if (l.rank == 0) {
        sps1[arm].push_back(one.samples_per_s);
        sps2[arm].push_back(two.samples_per_s);
        efficiency[arm].push_back(two.samples_per_s / (2 * one.samples_per_s));
        std::cout << fmt::format(
            "# round {}/{} bind {:<6} world 1 {:.1f} samples/s, world 2 {:.1f}: efficiency "
            "{:.1f}% (rank 0 on CPUs {})\n",
            round + 1, o.repeats, arm, one.samples_per_s, two.samples_per_s, 100 * efficiency[arm].back(),
            l.bound_cpus);
        std::cout.flush();
      }
    }
  }
  l.bind(o.bind);
  if (l.rank == 0) {
    print_binding(l, arms, efficiency, sps1, sps2);
    l.print_ledger_line();
  }
  return 0;
}

}  // namespace trainlab::bench::scaling
