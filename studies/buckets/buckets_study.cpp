// bench_buckets: a gradient buffer all-reduced in buckets, for each bucket size of a sweep,
// measured beside the alpha-beta model fitted in the same run (seed 001, part f).
//   scripts/mpirun -np 2 build/bin/bench_buckets                 # SmallCNN's gradient (~4.3 MB)
//   scripts/mpirun -np 4 build/bin/bench_buckets --params 25e6   # a larger model
// First the fit: single all-reduces at every bucket size and at the whole buffer, fitted with
// T(S) = 2(P-1) alpha + 2(P-1)/P S/B (one line, or two regimes when one line fits poorly). Then the
// sweep: the buffer cut into ceil(S/b) buckets, all-reduced one after another. (The single
// all-reduces walk through the buffer, so their data is as cold as the sweep's.) All configurations
// are timed round-robin (so drift hits them alike), each sample the slowest rank's, warm-up
// excluded. The ideal is the fitted bandwidth term of the whole buffer (no latency at all); the
// seed's rule picks the smallest bucket within 15% of it.
#include "studies/buckets/buckets_study.h"
#include "bench/measure/comm_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <vector>
#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "comm/cost_model.h"
#include "comm/mpi_communicator.h"
#include "engine/nn.h"
#include "engine/rng.h"
#include "engine/smallcnn.h"

using namespace trainlab;
using namespace trainlab::comm;
using clock_type = std::chrono::steady_clock;

namespace {

std::int64_t smallcnn_parameters() {
  Generator gen(0);
  InitOptions init{&gen};
  init.backend = &get_backend("reference");
  return SmallCNN(init).num_parameters();
}

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

}  // namespace

int trainlab::bench::run_buckets_study(const BucketsOptions& options) {
  const auto& buckets_spec = options.buckets_spec;
  const auto& dtype_name = options.dtype_name;
  const auto& algorithm_name_ = options.algorithm_name_;
  const auto& ledger_path = options.ledger_path;
  const auto& params = options.params;
  const auto& seconds_per_config = options.seconds_per_config;
  const auto& timeout = options.timeout;
  const auto& warmup = options.warmup;
  const auto& min_iters = options.min_iters;
  const auto& max_iters = options.max_iters;
  const auto& no_ledger = options.no_ledger;
  auto world = MpiCommunicator::world();
  const int P = world->size(), rank = world->rank();
  try {
    TL_CHECK(P >= 2, "bench_buckets: needs at least 2 ranks, got " + std::to_string(P) +
                         " (run it as scripts/mpirun -np 2 build/bin/bench_buckets)");
    TL_CHECK(min_iters <= max_iters, "bench_buckets: --min-iters (" + std::to_string(min_iters) +
                                         ") must be <= --max-iters (" + std::to_string(max_iters) + ")");
    world->set_timeout(timeout);
    const DType dtype = parse_dtype(dtype_name);
    const Algorithm algorithm = parse_algorithm(algorithm_name_);
    const auto elem = static_cast<std::int64_t>(dtype_size(dtype));
    const bool smallcnn = params == 0;
    const std::int64_t count = smallcnn ? smallcnn_parameters() : static_cast<std::int64_t>(params);
    const std::int64_t total_bytes = count * elem;
    std::vector<std::int64_t> bucket_counts;  // elements per bucket
    const auto bucket_sizes = bench::parse_byte_sizes(buckets_spec, "bench_buckets: --buckets");
    bench::check_message_sizes(bucket_sizes, elem, dtype_name, 0, "bench_buckets: --buckets");
    // The gradient buffer, its copy and the reference result.
    bench::check_message_sizes({total_bytes}, elem, dtype_name, 3, "bench_buckets: --params");
    for (const std::int64_t bytes : bucket_sizes) {
      const std::int64_t n = std::clamp<std::int64_t>(bytes / elem, 1, count);
      if (std::find(bucket_counts.begin(), bucket_counts.end(), n) == bucket_counts.end()) bucket_counts.push_back(n);
    }
    std::sort(bucket_counts.begin(), bucket_counts.end());

    bench::CommStudyBase base = bench::comm_study_base(*world);
    const double copy_rate = base.copy_rate_gbps;
    bench::json& env = base.env;
    env["timer"] = "steady_clock (slowest rank per sample)";
    const std::string run_id = bench::new_run_id();
    const bench::Ledger ledger(ledger_path.empty() ? bench::default_ledger_path("cpu") : ledger_path);

    // Correctness first: bucketed and one-shot native all-reduces of the same integer-valued data
    // agree bit for bit, for every bucket size.
    std::vector<unsigned char> buffer(static_cast<std::size_t>(total_bytes));
    auto fill_integers = [&](std::vector<unsigned char>& data) {
      Generator gen(static_cast<std::uint64_t>(rank) * 131 + 7);
      const int bound = dtype == DType::f32 ? 1000 : dtype == DType::bf16 ? 256 / (2 * P) : 2048 / (2 * P);
      for (std::int64_t i = 0; i < count; ++i) {
        const float v =
            static_cast<float>(static_cast<int>(gen.below(static_cast<std::uint64_t>(2 * bound + 1))) - bound);
        if (dtype == DType::f32)
          reinterpret_cast<float*>(data.data())[i] = v;
        else if (dtype == DType::bf16)
          reinterpret_cast<bf16*>(data.data())[i] = bf16(v);
        else
          reinterpret_cast<f16*>(data.data())[i] = f16(v);
      }
    };
    auto bucketed = [&](std::int64_t bucket) {
      for (const auto& [offset, n] : cut(count, bucket))
        allreduce(*world, buffer.data() + offset * elem, n, dtype, ReduceOp::sum, algorithm);
    };
    std::vector<unsigned char> expected(buffer.size());
    fill_integers(expected);
    world->allreduce_native(expected.data(), count, dtype, ReduceOp::sum);
    std::map<std::int64_t, bool> correct;
    for (const std::int64_t bucket : bucket_counts) {
      fill_integers(buffer);
      bucketed(bucket);
      double mismatch = buffer == expected ? 0 : 1;
      world->allreduce_native(&mismatch, 1, DType::f64, ReduceOp::sum);
      correct[bucket] = mismatch == 0;
    }
    std::fill(buffer.begin(), buffer.end(), 0);  // timed runs sum zeros (stays finite)

    // The configurations: single all-reduces (the fit) and bucketed sweeps, timed round-robin.
    struct Config {
      bool sweep;             // bucketed sweep, or a single all-reduce for the fit
      std::int64_t elements;  // bucket size, or message size
      int iters = 0;
      std::vector<double> samples;
    };
    std::vector<Config> configs;
    std::vector<std::int64_t> fit_sizes = bucket_counts;
    if (fit_sizes.back() != count) fit_sizes.push_back(count);
    for (const std::int64_t n : fit_sizes) configs.push_back({false, n, 0, {}});
    for (const std::int64_t n : bucket_counts) configs.push_back({true, n, 0, {}});
    // A single all-reduce walks through the buffer from sample to sample, so that its data is as
    // cold as a bucket's in a sweep (the same few KiB again and again would sit in cache and fit a
    // latency and bandwidth no sweep over the whole buffer sees).
    auto sample = [&](Config& c) {
      const std::int64_t slots = count / c.elements;
      const std::int64_t offset =
          (static_cast<std::int64_t>(c.samples.size()) % std::max<std::int64_t>(slots, 1)) * c.elements;
      world->barrier();
      const auto t = clock_type::now();
      if (c.sweep)
        bucketed(c.elements);
      else
        allreduce(*world, buffer.data() + offset * elem, c.elements, dtype, ReduceOp::sum, algorithm);
      return world->max_over_ranks(std::chrono::duration<double>(clock_type::now() - t).count());
    };
    for (auto& c : configs) {
      double warm = 0;
      for (int i = 0; i < std::max(warmup, 1); ++i) warm = std::max(warm, sample(c));
      c.iters = std::clamp(static_cast<int>(seconds_per_config / std::max(warm, 1e-6)), min_iters, max_iters);
    }
    if (rank == 0) {
      std::cout << fmt::format(
          "# bench_buckets: {} ranks, {} all-reduce, {} gradient of {} elements = {:.2f} MB ({}), {}; memcpy {:.2f} "
          "GB/s\n",
          P, algorithm_name(algorithm), dtype_name, count, static_cast<double>(total_bytes) / 1e6,
          smallcnn ? "SmallCNN's parameters" : "--params", mpi_library_version(), copy_rate);
      std::cout << fmt::format("# {} configurations timed round-robin; each sample the slowest rank's\n",
                               configs.size());
      std::cout.flush();
    }
    int most = 0;
    for (const auto& c : configs) most = std::max(most, c.iters);
    for (int round = 0; round < most; ++round) {
      for (auto& c : configs)
        if (round < c.iters) c.samples.push_back(sample(c));
      if (rank == 0 && (round + 1) % std::max(1, most / 4) == 0 && round + 1 < most) {
        std::cout << fmt::format("# round {}/{}\n", round + 1, most);
        std::cout.flush();
      }
    }

    // The fit, from this run's single all-reduces.
    std::vector<std::pair<double, double>> points;
    for (const auto& c : configs)
      if (!c.sweep) points.emplace_back(static_cast<double>(c.elements * elem), bench::summarize(c.samples).median);
    const FitAnalysis fit = analyse_fit(P, points);
    const RingModel& whole = fit.one_line_fits || !fit.split                       ? fit.one_line.model
                             : static_cast<double>(total_bytes) >= fit.split_bytes ? fit.upper.model
                                                                                   : fit.lower.model;
    const double ideal = whole.bandwidth_term_s(static_cast<double>(total_bytes));
    if (rank == 0) {
      std::cout << "\n" << fit_report(fit, points);
      std::cout << fmt::format(
          "\nideal = the fitted bandwidth term of the whole buffer, no latency: {:.3f} ms\n"
          "{:>8} {:>7} | {:>30} | {:>12} {:>7} | {:>10} | {}\n",
          ideal * 1e3, "bucket", "count", "measured ms median (min-max)", "predicted ms", "error", "over ideal",
          "correct");
    }
    std::int64_t smallest_measured = -1, smallest_model = -1;
    bool all_correct = true;
    for (const auto& c : configs) {
      if (!c.sweep) continue;
      const auto s = bench::summarize(c.samples);
      const auto pieces = cut(count, c.elements);
      double predicted = 0;
      for (const auto& piece : pieces) predicted += fitted_time(fit, static_cast<double>(piece.second * elem));
      if (smallest_measured < 0 && s.median <= 1.15 * ideal) smallest_measured = c.elements;
      if (smallest_model < 0 && predicted <= 1.15 * ideal) smallest_model = c.elements;
      all_correct = all_correct && correct[c.elements];
      if (rank != 0) continue;
      std::cout << fmt::format("{:>8} {:>7} | {:>9.3f} ({:>8.3f}-{:>9.3f}) | {:>12.3f} {:>+6.0f}% | {:>+9.0f}% | {}\n",
                               bench::human_bytes(c.elements * elem), pieces.size(), s.median * 1e3, s.min * 1e3,
                               s.max * 1e3, predicted * 1e3, 100 * (predicted - s.median) / s.median,
                               100 * (s.median / ideal - 1), correct[c.elements] ? "ok" : "MISMATCH");
      if (!no_ledger) {
        bench::json row = env;
        row["run_id"] = run_id;
        row["kind"] = "allreduce_buckets";
        row["status"] = "ok";
        row["config"] = {{"ranks", P},
                         {"total_bytes", total_bytes},
                         {"bucket_bytes", c.elements * elem},
                         {"buckets", pieces.size()},
                         {"dtype", dtype_name},
                         {"algorithm", algorithm_name(algorithm)},
                         {"gradient", smallcnn ? "SmallCNN" : "--params"}};
        row["repeats"] = c.samples;
        row["stats"] = {{"median", s.median}, {"mean", s.mean}, {"std", s.std},
                        {"min", s.min},       {"max", s.max},   {"n", s.n}};
        row["warmup_iterations_excluded"] = std::max(warmup, 1);
        row["predicted_s"] = predicted;
        row["ideal_s"] = ideal;
        row["fit"] = {{"one_line_fits", fit.one_line_fits},
                      {"alpha_s", whole.alpha_s},
                      {"bandwidth_Bps", whole.bandwidth_Bps},
                      {"split_bytes", fit.split ? fit.split_bytes : 0.0}};
        row["correct"] = correct[c.elements];
        ledger.append(row);
      }
    }
    if (rank == 0) {
      // The fit's points go to the ledger too, as all-reduce rows of this run (collective-cost --fit reads them).
      if (!no_ledger) {
        for (const auto& c : configs) {
          if (c.sweep) continue;
          const auto s = bench::summarize(c.samples);
          bench::json row = env;
          row["run_id"] = run_id;
          row["kind"] = "allreduce";
          row["tool"] = "bench_buckets";
          row["status"] = "ok";
          row["config"] = {{"ranks", P},
                           {"bytes", c.elements * elem},
                           {"count", c.elements},
                           {"dtype", dtype_name},
                           {"algorithm", algorithm_name(algorithm)}};
          row["repeats"] = c.samples;
          row["stats"] = {{"median", s.median}, {"mean", s.mean}, {"std", s.std},
                          {"min", s.min},       {"max", s.max},   {"n", s.n}};
          row["warmup_iterations_excluded"] = std::max(warmup, 1);
          row["memcpy_gbps"] = copy_rate;
          ledger.append(row);
        }
      }
      auto name = [&](std::int64_t n) {
        return n < 0 ? std::string("none of the sweep") : bench::human_bytes(n * elem);
      };
      std::cout << fmt::format(
          "\nthe seed's rule, smallest bucket within 15% of the ideal: measured {}, fitted model {}\n"
          "error = (predicted - measured) / measured; over ideal = measured / ideal - 1; results {}\n",
          name(smallest_measured), name(smallest_model), all_correct ? "all correct" : "MISMATCHED");
      if (!no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
    }
    return all_correct ? 0 : 1;
  } catch (const Error& e) {
    world->abort(std::string("error: ") + e.what(), 2);
  }
}
