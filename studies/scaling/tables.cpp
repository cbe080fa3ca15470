// bench_scaling's scaling tables: weak and strong scaling at every world (and the decode-cost-0
// ablation), every configuration once per round with the PyTorch DDP peer in the same round; the
// communication fraction by paired no_sync trials; DDP's overlap; the step time per rank naming the
// slowest; the peer beside trainlab; the targets.
#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include "bench/measure/knobs.h"
#include "bench/measure/stats.h"
#include "studies/scaling/launch.h"
#include "studies/scaling/rows.h"

namespace trainlab::bench::scaling {

namespace {

struct Config {
  std::string mode;  // weak | strong
  int world;
  std::int64_t global_batch, decode_cost;
};

// The PyTorch DDP peer: per world, per variant (torch_ddp.py measures every variant each round), in
// the peer's own order; the best by median is the peer (bench::best_by_median).
struct Peer {
  bool wanted = false;    // PyTorch DDP over gloo on the CPU: beside a GPU run it would compare other things
  bool possible = false;  // its interpreter and script are there (rank 0)
  std::vector<int> worlds;
  std::map<int, std::map<std::string, std::vector<double>>> samples;
  std::vector<std::string> variants;
  std::string note;
};

struct Tables {
  std::vector<Config> configs;
  std::vector<std::int64_t> decode_costs;
  std::vector<std::vector<Trained>> runs;  // per configuration, per round
  Peer peer;
  std::map<int, std::vector<double>> fractions;  // the communication fraction per world, per trial

  bool at_decode0() const { return std::find(decode_costs.begin(), decode_costs.end(), 0) != decode_costs.end(); }
  std::vector<double> samples_of(std::size_t c) const {
    std::vector<double> v;
    for (const Trained& r : runs[c]) v.push_back(r.samples_per_s);
    return v;
  }
};

Tables plan_tables(const Launch& l) {
  const ScalingOptions& o = l.o;
  Tables t;
  t.decode_costs = {o.decode_cost};
  if (o.ablation && o.decode_cost != 0) t.decode_costs.push_back(0);
  for (std::int64_t decode : t.decode_costs) {
    for (int w : l.plan.worlds) t.configs.push_back({"weak", w, o.batch * w, decode});
    for (int w : l.plan.worlds) t.configs.push_back({"strong", w, o.global_batch, decode});
  }
  t.runs.resize(t.configs.size());
  Peer& peer = t.peer;
  // torch_ddp.py trains SmallCNN's and ResNet's twins: beside another model its numbers would compare
  // two models.
  const std::string other_model = ddp_peer_mismatch(o.model);
  peer.wanted = o.peer && o.comm == "mpi" && other_model.empty();
  peer.possible =
      peer.wanted && l.rank == 0 && access(o.python.c_str(), X_OK) == 0 && access(o.peer_script.c_str(), R_OK) == 0;
  // The peer is compared at decode cost 0 only: without a trainlab run there (--no-ablation with a
  // decode cost), there is nothing to set beside it.
  for (int w : l.plan.worlds)
    if (w <= 2 && t.at_decode0()) peer.worlds.push_back(w);
  peer.note = !o.peer                ? "skipped (--no-peer)"
              : o.comm != "mpi"      ? "not run: the peer is PyTorch DDP over gloo on the CPU, this run is over nccl"
              : !other_model.empty() ? "not run: " + other_model + " (torch_ddp.py)"
              : t.at_decode0()       ? ""
                                     : fmt::format(
                                           "not measured: the comparison is at decode cost 0, and --no-ablation "
                                                 "with --decode-cost {} runs trainlab at {} only",
                                           o.decode_cost, o.decode_cost);
  return t;
}

// One run of the peer at world w (rank 0): its samples/s per variant, and its row.
void run_peer(const Launch& l, Peer& peer, int w) {
  const ScalingOptions& o = l.o;
  const std::string command = fmt::format(
      "{} {}{} --world {} --batch {} --lr {} --threads {} --steps {} --warmup {} --dtype {} --variant all 2>&1",
      o.python, o.peer_script, ddp_peer_model_args(o.model), w, o.batch, lr_for(o, o.batch * w), o.threads, o.steps,
      o.warmup, o.dtype);
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    std::array<char, 4096> buffer{};
    while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
    pclose(pipe);
  }
  const auto line_start = output.rfind("{\"tool\"");
  try {
    const auto parsed = json::parse(output.substr(line_start == std::string::npos ? 0 : line_start));
    const PeerOutput result = from_json<PeerOutput>(parsed);
    if (result.error) {
      peer.note = "skipped: " + *result.error;
      return;
    }
    if (!result.variants) throw RowError("no variants");
    if (result.variant_errors)
      for (const auto& [variant, why] : *result.variant_errors)
        std::cout << fmt::format("# PyTorch DDP at world {}: {} did not run: {}\n", w, variant, why);
    for (const auto& [variant, measured] : *result.variants) {
      if (std::find(peer.variants.begin(), peer.variants.end(), variant) == peer.variants.end())
        peer.variants.push_back(variant);
      peer.samples[w][variant].push_back(measured.samples_per_s);
    }
    if (o.no_ledger) return;
    ScalingPeerRow row;
    row.header = l.row_header(ScalingPeerRow::kKind);
    row.communicator = l.ddp_world().backend();
    row.interconnect = l.ddp_world().interconnect();
    row.peer = parsed;
    row.config = {"weak", w, o.batch * w, 0, o.dtype};
    l.ledger.append(row);
  } catch (const std::exception&) {
    peer.note = "failed: " + output.substr(0, 300);
  }
}

// Every configuration once per round, the peer in the same round (the weak configuration at decode
// cost 0: its batches are made in memory; world 1 and 2).
void measure_rounds(Launch& l, Tables& t) {
  const ScalingOptions& o = l.o;
  for (int round = 0; round < o.repeats; ++round) {
    for (std::size_t c = 0; c < t.configs.size(); ++c) {
      const Config& config = t.configs[c];
      const Arm arm = l.arm(config.world, config.global_batch, config.decode_cost, true, o.steps);
      t.runs[c].push_back(l.train(arm));
      l.record(config.mode, arm, t.runs[c].back());
    }
    if (t.peer.wanted) {
      if (l.rank == 0 && t.peer.possible) {
        for (int w : t.peer.worlds) run_peer(l, t.peer, w);
      } else if (l.rank == 0) {
        t.peer.note = "skipped: " + o.python + " is not executable or " + o.peer_script + " is missing";
      }
      l.quiet_barrier();
    }
    if (l.rank == 0) {
      std::cout << fmt::format("# round {}/{} done\n", round + 1, o.repeats);
      std::cout.flush();
    }
  }
}

// The communication fraction: paired runs with and without communication, T times per world.
void measure_trials(Launch& l, Tables& t) {
  const ScalingOptions& o = l.o;
  for (int trial = 0; trial < o.trials; ++trial) {
    for (int w : l.plan.worlds) {
      if (w == 1) continue;
      const Arm with_arm = l.arm(w, o.batch * w, o.decode_cost, true, o.trial_steps);
      const Arm without_arm = l.arm(w, o.batch * w, o.decode_cost, false, o.trial_steps);
      const Trained with = l.train(with_arm);
      const Trained without = l.train(without_arm);
      l.record("weak", with_arm, with);
      l.record("weak", without_arm, without);
      if (l.rank == 0) t.fractions[w].push_back(100.0 * (1.0 - with.samples_per_s / without.samples_per_s));
    }
  }
}

void print_scaling(const Launch& l, const Tables& t, const std::string& mode, std::int64_t decode) {
  const bool weak = mode == "weak";
  std::cout << fmt::format("\n{} scaling ({}), decode cost {}:\n", weak ? "Weak" : "Strong",
                           weak ? "per-worker batch fixed - \"more data in the same time\""
                                : "global batch fixed - \"the same job, faster\"",
                           decode);
  std::cout << fmt::format("| world | {} | lr | samples/s (mean ± std) | speedup | efficiency | ranks/core |\n",
                           weak ? "global batch" : "per-worker batch");
  std::cout << "|---|---|---|---|---|---|---|\n";
  double base = 0;
  for (std::size_t c = 0; c < t.configs.size(); ++c) {
    const Config& config = t.configs[c];
    if (config.mode != mode || config.decode_cost != decode) continue;
    const auto s = summarize(t.samples_of(c));
    if (config.world == 1) base = s.mean;
    const double speedup = base > 0 ? s.mean / base : 0;
    // Weak: the ideal is w times world 1; strong: the same.
    std::cout << fmt::format("| {} | {} | {:.4f} | {:.1f} ± {:.1f} | {:.2f}x | {:.0f}% | {} |\n", config.world,
                             weak ? config.global_batch : config.global_batch / config.world,
                             lr_for(l.o, config.global_batch), s.mean, s.std, speedup, 100 * speedup / config.world,
                             ranks_per_core_text(config.world, l.cores));
  }
}

void print_fraction(const Launch& l, const Tables& t) {
  const ScalingOptions& o = l.o;
  std::cout << fmt::format(
      "\nCommunication fraction (weak, decode cost {}), paired no_sync comparison, {} "
      "trials of {} steps: 1 - (samples/s with communication) / (without):\n",
      o.decode_cost, o.trials, o.trial_steps);
  std::cout << "| world | comm fraction (median) | spread across trials (half of max-min) | verdict |\n";
  std::cout << "|---|---|---|---|\n";
  for (const auto& [w, values] : t.fractions) {
    const auto s = summarize(values);
    const double spread = (s.max - s.min) / 2;
    std::cout << fmt::format("| {} | {:.1f}% | ±{:.1f} points | {} |\n", w, s.median, spread,
                             spread > std::abs(s.median)
                                 ? "UNUSABLE: the spread exceeds the median (a coin flip on this machine)"
                                 : "usable");
  }
}

// DDP's own accounting; whether the overlap is real (exposed < total) and any run had two buckets.
std::pair<bool, bool> print_ddp(const Launch& l, const Tables& t) {
  const ScalingOptions& o = l.o;
  std::cout << "\nDDP per step (weak, decode cost " << o.decode_cost
            << ", means over repeats; overlap = communication inside backward):\n";
  std::cout << "| world | buckets (MiB) | backward compute ms | communication ms | overlapped ms | exposed ms |\n";
  std::cout << "|---|---|---|---|---|---|\n";
  bool overlap_real = true, two_buckets = false;
  for (std::size_t c = 0; c < t.configs.size(); ++c) {
    const Config& config = t.configs[c];
    if (config.mode != "weak" || config.decode_cost != o.decode_cost || config.world == 1) continue;
    double backward = 0, comm = 0, overlapped = 0, exposed = 0;
    for (const Trained& r : t.runs[c]) {
      backward += r.ddp.backward_compute_s;
      comm += r.ddp.comm_s;
      overlapped += r.ddp.overlap_s;
      exposed += r.ddp.exposed_s;
    }
    const double n = static_cast<double>(t.runs[c].size());
    std::string buckets;
    for (auto b : t.runs[c].front().ddp.bucket_bytes)
      buckets += fmt::format("{}{:.2f}", buckets.empty() ? "" : ", ", static_cast<double>(b) / (1 << 20));
    two_buckets = two_buckets || t.runs[c].front().ddp.bucket_bytes.size() >= 2;
    overlap_real = overlap_real && exposed < comm;
    std::cout << fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", config.world, buckets,
                             1e3 * backward / n, 1e3 * comm / n, 1e3 * overlapped / n, 1e3 * exposed / n);
  }
  return {overlap_real, two_buckets};
}

void print_rank_steps(const Launch& l, const Tables& t) {
  const ScalingOptions& o = l.o;
  std::cout << "\nStep time per rank (weak, decode cost " << o.decode_cost << ", largest world, every repeat):\n";
  std::cout << "| rank | p50 ms | p99 ms | max ms |\n|---|---|---|---|\n";
  for (std::size_t c = 0; c < t.configs.size(); ++c) {
    const Config& config = t.configs[c];
    if (config.mode != "weak" || config.decode_cost != o.decode_cost || config.world != l.plan.worlds.back()) continue;
    std::vector<std::array<double, 3>> worst(static_cast<std::size_t>(config.world), {0, 0, 0});
    for (const Trained& r : t.runs[c])
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
    std::cout << fmt::format("slowest rank: {} (median step {:.1f} ms, {:+.0f}% over the fastest rank's)\n", slowest,
                             1e3 * worst[slowest][0], 100 * (worst[slowest][0] / fastest - 1));
  }
}

// The peer beside trainlab at decode cost 0 (both make their batches without decode work); returns
// the ratio at world 2 (0: not measured).
double print_peer(const Launch& l, const Tables& t) {
  const ScalingOptions& o = l.o;
  const Peer& peer = t.peer;
  std::cout << "\nAgainst PyTorch DDP (gloo), weak scaling, per-worker batch " << o.batch << ", decode cost 0, "
            << o.threads << " thread(s) per rank, " << o.dtype << ":\n";
  double ratio_w2 = 0;
  if (peer.samples.empty()) {
    std::cout << "PyTorch DDP: " << (peer.note.empty() ? "no result" : peer.note) << "\n";
    return ratio_w2;
  }
  std::cout << "Every PyTorch variant is measured each round; the peer is the best by median at each world "
               "(ties: the higher minimum, then the peer's own order). Ratio: median (min-max) of the "
               "per-round ratios.\n";
  std::cout << "| world | trainlab samples/s | best PyTorch DDP variant | samples/s | ratio | every variant "
               "(median) |\n|---|---|---|---|---|---|\n";
  for (const auto& [w, by_variant] : peer.samples) {
    std::vector<double> ours;
    for (std::size_t c = 0; c < t.configs.size(); ++c) {
      if (t.configs[c].mode == "weak" && t.configs[c].decode_cost == 0 && t.configs[c].world == w) {
        for (const Trained& r : t.runs[c]) ours.push_back(r.samples_per_s);
      }
    }
    std::vector<std::vector<double>> values;
    std::string every;
    for (const auto& v : peer.variants) {
      const auto it = by_variant.find(v);
      values.push_back(it == by_variant.end() ? std::vector<double>{} : it->second);
      if (!values.back().empty())
        every += fmt::format("{}{} {:.0f}", every.empty() ? "" : ", ", v, summarize(values.back()).median);
    }
    const std::size_t best = best_by_median(peer.variants, values);
    const auto theirs = summarize(values[best]);
    std::vector<double> ratios;
    for (std::size_t i = 0; i < std::min(ours.size(), values[best].size()); ++i)
      ratios.push_back(ours[i] / values[best][i]);
    const auto ratio = summarize(ratios);
    if (w == 2) ratio_w2 = ratio.median;
    std::cout << fmt::format("| {} | {:.1f} | {} | {:.1f} ({:.1f}-{:.1f}) | {:.2f}x ({:.2f}-{:.2f}) | {} |\n", w,
                             summarize(ours).median, peer.variants[best], theirs.median, theirs.min, theirs.max,
                             ratio.median, ratio.min, ratio.max, every);
  }
  if (!peer.note.empty()) std::cout << "note: " << peer.note << "\n";
  return ratio_w2;
}

// The targets, at decode cost 0 (the ablation tables) where present.
void print_targets(const Launch& l, const Tables& t, double ratio_w2, bool overlap_real, bool two_buckets) {
  const ScalingOptions& o = l.o;
  const std::int64_t decode = t.at_decode0() ? 0 : o.decode_cost;
  auto efficiency = [&](const std::string& mode, int w) {
    double base = 0, at = -1;
    for (std::size_t c = 0; c < t.configs.size(); ++c) {
      if (t.configs[c].mode != mode || t.configs[c].decode_cost != decode) continue;
      const double mean = summarize(t.samples_of(c)).mean;
      if (t.configs[c].world == 1) base = mean;
      if (t.configs[c].world == w) at = mean;
    }
    return at < 0 || base <= 0 ? -1.0 : at / base / w;
  };
  const double weak2 = efficiency("weak", 2), strong2 = efficiency("strong", 2);
  std::cout << fmt::format(
      "\ntargets (world 2, decode cost {}): weak efficiency >= 90%: {:.0f}% {}; strong >= 80%: {:.0f}% {}; "
      "trainlab/PyTorch >= 1.5x: {}; exposed < total communication with >= 2 buckets: {}\n",
      decode, 100 * weak2, weak2 >= 0.9 ? "met" : "MISSED", 100 * strong2, strong2 >= 0.8 ? "met" : "MISSED",
      ratio_w2 > 0 ? fmt::format("{:.2f}x {}", ratio_w2, ratio_w2 >= 1.5 ? "met" : "MISSED")
                   : std::string("not measured"),
      !two_buckets   ? std::string("n/a (one bucket)")
      : overlap_real ? "met"
                     : "MISSED");
}

}  // namespace

int scaling_tables(Launch& l) {
  Tables t = plan_tables(l);
  measure_rounds(l, t);
  measure_trials(l, t);
  if (l.rank != 0) return 0;
  for (std::int64_t decode : t.decode_costs) {
    print_scaling(l, t, "weak", decode);
    print_scaling(l, t, "strong", decode);
  }
  print_fraction(l, t);
  const auto [overlap_real, two_buckets] = print_ddp(l, t);
  print_rank_steps(l, t);
  const double ratio_w2 = print_peer(l, t);
  const auto& worlds = l.plan.worlds;
  if (std::find(worlds.begin(), worlds.end(), 2) != worlds.end())
    print_targets(l, t, ratio_w2, overlap_real, two_buckets);
  l.print_ledger_line();
  return 0;
}

}  // namespace trainlab::bench::scaling
