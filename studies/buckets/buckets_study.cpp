// bench_buckets: a gradient buffer all-reduced in buckets, for each bucket size of a sweep,
// measured beside the alpha-beta model fitted in the same run (seed 001, part f).
//   scripts/mpirun -np 2 build/bin/bench_buckets                 # SmallCNN's gradient (~4.3 MB)
//   scripts/mpirun -np 2 build/bin/bench_buckets --model mlp     # a registered model's gradient
//   scripts/mpirun -np 4 build/bin/bench_buckets --params 25e6   # a larger model
// First the fit: single all-reduces at every bucket size and at the whole buffer, fitted with
// T(S) = 2(P-1) alpha + 2(P-1)/P S/B (one line, or two regimes when one line fits poorly). Then the
// sweep: the buffer cut into ceil(S/b) buckets, all-reduced one after another. (The single
// all-reduces walk through the buffer, so their data is as cold as the sweep's.) All configurations
// are timed round-robin by the comm-bench harness (so drift hits them alike), each sample the
// slowest rank's, warm-up excluded. The ideal is the fitted bandwidth term of the whole buffer (no
// latency at all); the seed's rule picks the smallest bucket within 15% of it.
#include "studies/buckets/buckets_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <iostream>
#include <map>
#include <utility>
#include <vector>
#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "comm/cost_model.h"
#include "comm/mpi_communicator.h"
#include "engine/nn/model_registry.h"
#include "studies/allreduce/rows.h"
#include "studies/buckets/rows.h"

namespace trainlab::bench {

namespace {

using comm::Algorithm;
using comm::FitAnalysis;
using comm::ReduceOp;

// The buffer [0, total) cut into buckets of `bucket` elements (the last one shorter).
std::vector<std::pair<std::int64_t, std::int64_t>> cut(std::int64_t total, std::int64_t bucket) {
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  for (std::int64_t offset = 0; offset < total; offset += bucket)
    pieces.emplace_back(offset, std::min(bucket, total - offset));
  return pieces;
}

// The fitted time of one all-reduce of `bytes`: the regime the size falls in.
double fitted_time(const FitAnalysis& fit, double bytes) {
  if (fit.one_line_fits || !fit.split) return fit.one_line.model.time_s(bytes);
  return (bytes < fit.split_bytes ? fit.lower : fit.upper).model.time_s(bytes);
}

// One run: the gradient, its buckets, where the rows go.
struct BucketsRun {
  BucketsRun(const BucketsOptions& options, comm::MpiCommunicator& world_) : o(options), world(world_) {}
  const BucketsOptions& o;
  comm::MpiCommunicator& world;
  DType dtype = DType::f32;
  Algorithm algorithm = Algorithm::ring;
  std::int64_t elem = 4, count = 0, total_bytes = 0;
  std::string gradient;                     // whose: the model's label ("SmallCNN"), or "--params"
  std::vector<std::int64_t> bucket_counts;  // elements per bucket, ascending
  std::vector<unsigned char> buffer;        // the gradient (zeros while timed: the sums stay finite)
  double copy_rate = 0;
  Environment env;
  std::string run_id;
  Ledger ledger{""};

  void bucketed(std::int64_t bucket) {
    for (const auto& [offset, n] : cut(count, bucket))
      comm::allreduce(world, buffer.data() + offset * elem, n, dtype, ReduceOp::sum, algorithm);
  }
};

// The command line checked and turned into a run (every rank).
void plan(BucketsRun& run) {
  const BucketsOptions& o = run.o;
  const int P = run.world.size();
  TL_CHECK(P >= 2, "bench_buckets: needs at least 2 ranks, got " + std::to_string(P) +
                       " (run it as scripts/mpirun -np 2 build/bin/bench_buckets)");
  TL_CHECK(o.min_iters <= o.max_iters, "bench_buckets: --min-iters (" + std::to_string(o.min_iters) +
                                           ") must be <= --max-iters (" + std::to_string(o.max_iters) + ")");
  run.world.set_timeout(o.timeout);
  run.dtype = parse_dtype(o.dtype_name);
  run.algorithm = comm::parse_algorithm(o.algorithm_name_);
  TL_CHECK(run.algorithm != comm::Algorithm::single_copy,
           "bench_buckets: --algorithm single_copy reduces DDP's buckets in a shared window, not this sweep's own "
           "buffers (allowed: ring, recursive_doubling, halving_doubling, auto, native; bench_scaling --allreduce "
           "ring,single_copy times it in training)");
  run.elem = static_cast<std::int64_t>(dtype_size(run.dtype));
  // The model's gradient: its parameter count at its default input (the gradient DDP all-reduces).
  run.gradient = o.params == 0 ? model_label(o.model) : "--params";
  run.count = o.params == 0 ? model_parameter_count(find_model(o.model.name), o.model.options)
                            : static_cast<std::int64_t>(o.params);
  run.total_bytes = run.count * run.elem;
  const auto bucket_sizes = parse_byte_sizes(o.buckets_spec, "bench_buckets: --buckets");
  check_message_sizes(bucket_sizes, run.elem, o.dtype_name, 0, "bench_buckets: --buckets");
  // The gradient buffer, its copy and the reference result.
  check_message_sizes({run.total_bytes}, run.elem, o.dtype_name, 3, "bench_buckets: --params");
  for (const std::int64_t bytes : bucket_sizes) {
    const std::int64_t n = std::clamp<std::int64_t>(bytes / run.elem, 1, run.count);
    if (std::find(run.bucket_counts.begin(), run.bucket_counts.end(), n) == run.bucket_counts.end())
      run.bucket_counts.push_back(n);
  }
  std::sort(run.bucket_counts.begin(), run.bucket_counts.end());
  const CommSetup setup = comm_setup(run.world);
  run.copy_rate = setup.memcpy_gbps;
  run.env = setup.env;
  run.env.timer = "steady_clock (slowest rank per sample)";
  run.run_id = new_run_id();
  run.ledger = Ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
}

// Correctness first: bucketed and one-shot native all-reduces of the same integer-valued data
// agree bit for bit, for every bucket size. Leaves the buffer zeroed.
std::map<std::int64_t, bool> check_buckets(BucketsRun& run, CommHarness& harness) {
  const int P = run.world.size();
  auto fill_integers = [&](std::vector<unsigned char>& data) {
    Generator gen(static_cast<std::uint64_t>(run.world.rank()) * 131 + 7);
    const int bound = run.dtype == DType::f32 ? 1000 : run.dtype == DType::bf16 ? 256 / (2 * P) : 2048 / (2 * P);
    for (std::int64_t i = 0; i < run.count; ++i) {
      const float v =
          static_cast<float>(static_cast<int>(gen.below(static_cast<std::uint64_t>(2 * bound + 1))) - bound);
      if (run.dtype == DType::f32)
        reinterpret_cast<float*>(data.data())[i] = v;
      else if (run.dtype == DType::bf16)
        reinterpret_cast<bf16*>(data.data())[i] = bf16(v);
      else
        reinterpret_cast<f16*>(data.data())[i] = f16(v);
    }
  };
  run.buffer.assign(static_cast<std::size_t>(run.total_bytes), 0);
  std::vector<unsigned char> expected(run.buffer.size());
  fill_integers(expected);
  run.world.allreduce_native(expected.data(), run.count, run.dtype, ReduceOp::sum);
  std::map<std::int64_t, bool> correct;
  for (const std::int64_t bucket : run.bucket_counts) {
    fill_integers(run.buffer);
    run.bucketed(bucket);
    correct[bucket] = harness.on_every_rank(run.buffer == expected);
  }
  std::fill(run.buffer.begin(), run.buffer.end(), 0);  // timed runs sum zeros (stays finite)
  return correct;
}

// What is timed: single all-reduces (the fit) at every bucket size and the whole buffer, then the
// bucketed sweeps. A single all-reduce walks through the buffer from sample to sample, so that its
// data is as cold as a bucket's in a sweep (the same few KiB again and again would sit in cache and
// fit a latency and bandwidth no sweep over the whole buffer sees).
struct Config {
  bool sweep;             // bucketed sweep, or a single all-reduce for the fit
  std::int64_t elements;  // bucket size, or message size
};
std::vector<Config> configs_of(const BucketsRun& run) {
  std::vector<Config> configs;
  std::vector<std::int64_t> fit_sizes = run.bucket_counts;
  if (fit_sizes.back() != run.count) fit_sizes.push_back(run.count);
  for (const std::int64_t n : fit_sizes) configs.push_back({false, n});
  for (const std::int64_t n : run.bucket_counts) configs.push_back({true, n});
  return configs;
}
std::vector<CommArm> arms_of(BucketsRun& run, const std::vector<Config>& configs) {
  std::vector<CommArm> arms;
  for (const Config& c : configs) {
    if (c.sweep) {
      arms.push_back({"sweep", run.total_bytes, [&run, c](int) { run.bucketed(c.elements); }});
    } else {
      arms.push_back({"single", c.elements * run.elem, [&run, c](int sample) {
                        const std::int64_t slots = run.count / c.elements;
                        const std::int64_t offset = (sample % std::max<std::int64_t>(slots, 1)) * c.elements;
                        comm::allreduce(run.world, run.buffer.data() + offset * run.elem, c.elements, run.dtype,
                                        ReduceOp::sum, run.algorithm);
                      }});
    }
  }
  return arms;
}

RowHeader header_of(const BucketsRun& run, const char* kind) {
  RowHeader header;
  header.env = run.env;
  header.kind = kind;
  header.run_id = run.run_id;
  header.status = "ok";
  return header;
}

// The fit's points go to the ledger too, as all-reduce rows of this run (collective-cost --fit reads them).
void append_single(const BucketsRun& run, const Config& c, const ArmTiming& t) {
  AllreduceRow row;
  row.header = header_of(run, AllreduceRow::kKind);
  row.tool = "bench_buckets";
  row.config.ranks = run.world.size();
  row.config.bytes = c.elements * run.elem;
  row.config.count = c.elements;
  row.config.dtype = run.o.dtype_name;
  row.config.algorithm = comm::algorithm_name(run.algorithm);
  row.repeats = t.seconds;
  row.stats = t.stats;
  row.warmup_iterations_excluded = t.warmup_calls;
  row.memcpy_gbps = run.copy_rate;
  run.ledger.append(row);
}

// The sweep against the model: a line per bucket size (and its row), then the seed's rule.
bool report_sweep(const BucketsRun& run, const std::vector<Config>& configs, const std::vector<ArmTiming>& timings,
                  std::map<std::int64_t, bool>& correct) {
  const int P = run.world.size(), rank = run.world.rank();
  std::vector<std::pair<double, double>> points;
  for (std::size_t i = 0; i < configs.size(); ++i)
    if (!configs[i].sweep) points.emplace_back(static_cast<double>(timings[i].bytes), timings[i].stats.median);
  const FitAnalysis fit = comm::analyse_fit(P, points);
  const auto total = static_cast<double>(run.total_bytes);
  const comm::RingModel& whole = fit.one_line_fits || !fit.split ? fit.one_line.model
                                 : total >= fit.split_bytes      ? fit.upper.model
                                                                 : fit.lower.model;
  const double ideal = whole.bandwidth_term_s(total);
  if (rank == 0) {
    std::cout << "\n" << comm::fit_report(fit, points);
    std::cout << fmt::format(
        "\nideal = the fitted bandwidth term of the whole buffer, no latency: {:.3f} ms\n"
        "{:>8} {:>7} | {:>30} | {:>12} {:>7} | {:>10} | {}\n",
        ideal * 1e3, "bucket", "count", "measured ms median (min-max)", "predicted ms", "error", "over ideal",
        "correct");
  }
  std::int64_t smallest_measured = -1, smallest_model = -1;
  bool all_correct = true;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    if (!c.sweep) continue;
    const Summary& s = timings[i].stats;
    const auto pieces = cut(run.count, c.elements);
    double predicted = 0;
    for (const auto& piece : pieces) predicted += fitted_time(fit, static_cast<double>(piece.second * run.elem));
    if (smallest_measured < 0 && s.median <= 1.15 * ideal) smallest_measured = c.elements;
    if (smallest_model < 0 && predicted <= 1.15 * ideal) smallest_model = c.elements;
    all_correct = all_correct && correct[c.elements];
    if (rank != 0) continue;
    std::cout << fmt::format("{:>8} {:>7} | {:>9.3f} ({:>8.3f}-{:>9.3f}) | {:>12.3f} {:>+6.0f}% | {:>+9.0f}% | {}\n",
                             human_bytes(c.elements * run.elem), pieces.size(), s.median * 1e3, s.min * 1e3,
                             s.max * 1e3, predicted * 1e3, 100 * (predicted - s.median) / s.median,
                             100 * (s.median / ideal - 1), correct[c.elements] ? "ok" : "MISMATCH");
    if (run.o.no_ledger) continue;
    AllreduceBucketsRow row;
    row.header = header_of(run, AllreduceBucketsRow::kKind);
    row.config = {P,
                  run.total_bytes,
                  c.elements * run.elem,
                  static_cast<std::int64_t>(pieces.size()),
                  run.o.dtype_name,
                  comm::algorithm_name(run.algorithm),
                  run.gradient};
    row.repeats = timings[i].seconds;
    row.stats = s;
    row.warmup_iterations_excluded = timings[i].warmup_calls;
    row.predicted_s = predicted;
    row.ideal_s = ideal;
    row.fit = {fit.one_line_fits, whole.alpha_s, whole.bandwidth_Bps, fit.split ? fit.split_bytes : 0.0};
    row.correct = correct[c.elements];
    run.ledger.append(row);
  }
  if (rank == 0) {
    if (!run.o.no_ledger)
      for (std::size_t i = 0; i < configs.size(); ++i)
        if (!configs[i].sweep) append_single(run, configs[i], timings[i]);
    auto name = [&](std::int64_t n) { return n < 0 ? std::string("none of the sweep") : human_bytes(n * run.elem); };
    std::cout << fmt::format(
        "\nthe seed's rule, smallest bucket within 15% of the ideal: measured {}, fitted model {}\n"
        "error = (predicted - measured) / measured; over ideal = measured / ideal - 1; results {}\n",
        name(smallest_measured), name(smallest_model), all_correct ? "all correct" : "MISMATCHED");
    if (!run.o.no_ledger) std::cout << "ledger: " << run.ledger.path() << " (run " << run.run_id << ")\n";
  }
  return all_correct;
}

int run_sweep(const BucketsOptions& o, comm::MpiCommunicator& world) {
  BucketsRun run(o, world);
  plan(run);
  CommHarness harness(world, Collective::allreduce);
  std::map<std::int64_t, bool> correct = check_buckets(run, harness);
  const std::vector<Config> configs = configs_of(run);
  const int rank = world.rank();
  if (rank == 0) {
    std::cout << fmt::format(
        "# bench_buckets: {} ranks, {} all-reduce, {} gradient of {} elements = {:.2f} MB ({}), {}; memcpy {:.2f} "
        "GB/s\n",
        world.size(), comm::algorithm_name(run.algorithm), o.dtype_name, run.count,
        static_cast<double>(run.total_bytes) / 1e6, o.params == 0 ? run.gradient + "'s parameters" : run.gradient,
        comm::mpi_library_version(), run.copy_rate);
    std::cout << fmt::format("# {} configurations timed round-robin; each sample the slowest rank's\n", configs.size());
    std::cout.flush();
  }
  CommSchedule schedule;
  schedule.warmup = o.warmup;
  schedule.seconds_per_arm = o.seconds_per_config;
  schedule.min_iters = o.min_iters;
  schedule.max_iters = o.max_iters;
  schedule.after_round = [rank](int round, int rounds) {
    if (rank == 0 && (round + 1) % std::max(1, rounds / 4) == 0 && round + 1 < rounds) {
      std::cout << fmt::format("# round {}/{}\n", round + 1, rounds);
      std::cout.flush();
    }
  };
  const std::vector<ArmTiming> timings = harness.time(arms_of(run, configs), schedule);
  return report_sweep(run, configs, timings, correct) ? 0 : 1;
}

}  // namespace

int run_buckets_study(const BucketsOptions& options) {
  auto world = comm::MpiCommunicator::world();
  try {
    return run_sweep(options, *world);
  } catch (const Error& e) {
    world->abort(std::string("error: ") + e.what(), 2);
  }
}

}  // namespace trainlab::bench
