// bench_tensor_parallel: Megatron's split against the unsplit model and its all-reduces against the
// alpha-beta model (studies/tensor_parallel/tensor_parallel_study.h).
#include "studies/tensor_parallel/tensor_parallel_study.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>

#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "comm/cost_model.h"
#include "comm/mpi_communicator.h"
#include "comm/tensor_parallel.h"
#include "engine/nn/model_registry.h"
#include "engine/optim/optim.h"
#include "studies/tensor_parallel/rows.h"

namespace trainlab::bench {

namespace {

using Clock = std::chrono::steady_clock;
// The all-reduces alone that alpha and B are fitted to: 16K to 16M by fours, above the transport's
// eager pieces (one line does not fit across both protocols).
constexpr std::int64_t kFitFrom = 16 << 10, kFitTo = 16 << 20;

struct TpRecord {
  std::vector<double> step_s, one_thread_s, all_threads_s, comm_s, wait_s, transfer_s;
  std::vector<comm::TensorParallelCall> calls;  // the last measured step's
  double loss = 0;
};

// Per sum, every rank's call and return times (one clock on one host): the last arrival, each
// rank's wait for it and the transfer after it; summed over the step's sums, meaned over the ranks.
void split_waits(comm::MpiCommunicator& world, const std::vector<comm::TensorParallelCall>& calls, double& wait,
                 double& transfer) {
  const int p = world.size(), r = world.rank();
  const std::size_t n = calls.size();
  std::vector<double> times(2 * n * static_cast<std::size_t>(p), 0.0);  // [rank][call][begin, end]
  for (std::size_t c = 0; c < n; ++c) {
    times[(static_cast<std::size_t>(r) * n + c) * 2] = calls[c].begin_s;
    times[(static_cast<std::size_t>(r) * n + c) * 2 + 1] = calls[c].begin_s + calls[c].seconds;
  }
  world.allreduce_native(times.data(), static_cast<std::int64_t>(times.size()), DType::f64, comm::ReduceOp::sum);
  wait = transfer = 0;
  for (std::size_t c = 0; c < n; ++c) {
    double last = 0;
    for (std::size_t q = 0; q < static_cast<std::size_t>(p); ++q) last = std::max(last, times[(q * n + c) * 2]);
    for (std::size_t q = 0; q < static_cast<std::size_t>(p); ++q) {
      wait += last - times[(q * n + c) * 2];
      transfer += times[(q * n + c) * 2 + 1] - last;
    }
  }
  wait /= p;
  transfer /= p;
}

// The split step on every rank: the slowest rank's seconds, and the mean over the ranks of the
// seconds each spent in the group's sums (waiting and transferring).
void measure_split_step(comm::MpiCommunicator& world, comm::TensorParallel& tp, Module& model, Optimizer& optimizer,
                        const Batch& b, TpRecord* record) {
  const int p = world.size(), r = world.rank();
  world.barrier();
  const auto start = Clock::now();
  const double loss = plain_train_step(model, optimizer, b);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<comm::TensorParallelCall> calls = tp.take_calls();
  if (record == nullptr) return;
  double in_sums = 0;
  for (const auto& call : calls) in_sums += call.seconds;
  std::vector<double> all(static_cast<std::size_t>(2 * p), 0.0);
  all[static_cast<std::size_t>(r)] = seconds;
  all[static_cast<std::size_t>(p + r)] = in_sums;
  world.allreduce_native(all.data(), 2 * p, DType::f64, comm::ReduceOp::sum);
  record->step_s.push_back(*std::max_element(all.begin(), all.begin() + p));
  double comm_sum = 0;
  for (int i = 0; i < p; ++i) comm_sum += all[static_cast<std::size_t>(p + i)];
  record->comm_s.push_back(comm_sum / p);
  double wait = 0, transfer = 0;
  split_waits(world, calls, wait, transfer);
  record->wait_s.push_back(wait);
  record->transfer_s.push_back(transfer);
  record->calls = std::move(calls);
  record->loss = loss;
}

// The unsplit model on rank 0 at `threads` threads, free to run on every core of the job; the
// others wait asleep, off its cores.
void measure_unsplit_step(comm::MpiCommunicator& world, const JobCpus& cpus, Backend& be, int threads, int rank_threads,
                          Module& model, Optimizer& optimizer, const Batch& b, std::vector<double>* into) {
  double seconds = 0;
  if (world.rank() == 0) {
    cpus.on_every_cpu([&] {
      be.set_num_threads(threads);
      const auto start = Clock::now();
      plain_train_step(model, optimizer, b);
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
      be.set_num_threads(rank_threads);
    });
  }
  world.rendezvous();
  if (into != nullptr && world.rank() == 0) into->push_back(seconds);
}

// Each distinct size of the step's sums, and the sizes for the fit, all-reduced alone
// with the same algorithm, bytes -> median seconds (every rank), two ways in one round-robin: warm
// (one buffer, in cache from the call before: what bench_allreduce measures) and cold (walking
// through 64 MiB of buffers, as a step's sums find their activations after the layers between).
struct AloneTimes {
  std::map<std::int64_t, double> warm, cold;
};
AloneTimes time_allreduces(comm::MpiCommunicator& world, const std::vector<std::int64_t>& sizes,
                           comm::Algorithm algorithm) {
  constexpr std::int64_t kColdBytes = 64 << 20;
  CommHarness harness(world, Collective::allreduce);
  std::vector<std::vector<std::vector<float>>> pools;  // [size][buffer]
  std::vector<CommArm> arms;
  for (std::int64_t bytes : sizes) {
    const std::size_t buffers = static_cast<std::size_t>(std::max<std::int64_t>(2, kColdBytes / bytes));
    pools.emplace_back(buffers, std::vector<float>(static_cast<std::size_t>(bytes / 4), 1.0f));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto* pool = &pools[i];
    const std::int64_t count = sizes[i] / 4;
    arms.push_back({"warm " + human_bytes(sizes[i]), sizes[i], [&world, pool, count, algorithm](int) {
                      comm::allreduce(world, pool->front().data(), count, DType::f32, comm::ReduceOp::sum, algorithm);
                    }});
    arms.push_back({"cold " + human_bytes(sizes[i]), sizes[i], [&world, pool, count, algorithm](int sample) {
                      float* data = (*pool)[1 + static_cast<std::size_t>(sample) % (pool->size() - 1)].data();
                      comm::allreduce(world, data, count, DType::f32, comm::ReduceOp::sum, algorithm);
                    }});
  }
  CommSchedule schedule;
  schedule.seconds_per_arm = 0.2;
  AloneTimes out;
  for (const ArmTiming& t : harness.time(arms, schedule))
    (t.name.rfind("warm", 0) == 0 ? out.warm : out.cold)[t.bytes] = t.stats.median;
  return out;
}

// The row's communication columns: the step's sums alone, the fit, the prediction.
void fill_comm_columns(TensorParallelRow& row, const TpRecord& record, const AloneTimes& alone,
                       comm::Algorithm algorithm, int p) {
  std::vector<comm::AllreducePoint> points;
  for (const auto& [bytes, seconds] : alone.cold)
    if (bytes >= kFitFrom)
      points.push_back(
          {comm::allreduce_cost(comm::choose_algorithm(algorithm, bytes, {}), p), static_cast<double>(bytes), seconds});
  const comm::AllreduceFit fit = comm::fit_allreduce(points);
  row.alpha_s = fit.alpha_s;
  row.bandwidth_Bps = fit.bandwidth_Bps;
  row.fit_max_residual = fit.max_abs_relative_residual;
  std::map<std::string, int> by_algorithm;
  for (const auto& call : record.calls) {
    ++row.allreduces;
    row.allreduce_bytes += call.bytes;
    row.standalone_comm_s += alone.cold.at(call.bytes);
    row.standalone_warm_comm_s += alone.warm.at(call.bytes);
    row.predicted_comm_s +=
        comm::allreduce_cost(call.algorithm, p).time_s(fit.alpha_s, fit.bandwidth_Bps, static_cast<double>(call.bytes));
    ++by_algorithm[comm::algorithm_name(call.algorithm)];
  }
  for (const auto& [name, n] : by_algorithm)
    row.algorithms += fmt::format("{}{} x{}", row.algorithms.empty() ? "" : ", ", name, n);
}

void print_tensor_parallel_row(const TensorParallelRow& row, int all_threads) {
  const auto ms = [](const Summary& x) {
    return fmt::format("{:.2f} ({:.2f}-{:.2f})", 1e3 * x.median, 1e3 * x.min, 1e3 * x.max);
  };
  std::cout << fmt::format(
      "| split step ms median (min-max) | unsplit, 1 thread | unsplit, {} threads | speedup | all-reduces | MiB | "
      "in the step ms (share) | waiting ms | transfer ms | alone, cold ms | alone, warm ms | predicted ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
      "| {} | {} | {} | {:.2f}x (against {} thread(s)) | {} ({}) | {:.2f} | {:.2f} ({:.1f}%) | {:.2f} | {:.2f} | "
      "{:.2f} | "
      "{:.2f} | {:.2f} |\n",
      all_threads, ms(row.stats), ms(row.unsplit_one_thread), ms(row.unsplit_all_threads), row.speedup,
      row.baseline_threads, row.allreduces, row.algorithms, static_cast<double>(row.allreduce_bytes) / (1 << 20),
      1e3 * row.comm_s.median, 100 * row.comm_share, 1e3 * row.comm_wait_s.median, 1e3 * row.comm_transfer_s.median,
      1e3 * row.standalone_comm_s, 1e3 * row.standalone_warm_comm_s, 1e3 * row.predicted_comm_s);
  std::cout << fmt::format(
      "cost model: alpha {:.2f} us, B {:.2f} GB/s (fitted to this run's all-reduces alone and cold, 16K-16M, max "
      "residual "
      "{:.0f}%); predicted / transfer in the step: {:.2f}, predicted / alone and cold: {:.2f}\n",
      1e6 * row.alpha_s, row.bandwidth_Bps * 1e-9, 100 * row.fit_max_residual,
      row.predicted_comm_s / row.comm_transfer_s.median, row.predicted_comm_s / row.standalone_comm_s);
}

int run_tensor_parallel(const TensorParallelStudyOptions& o, comm::MpiCommunicator* world) {
  world->set_timeout(o.timeout);
  const int p = world->size();
  TL_CHECK(p >= 2, "needs at least 2 ranks, got " + std::to_string(p) + " (launch it as scripts/mpirun -np 2 or more)");
  TL_CHECK(o.steps >= 1 && o.warmup >= 0, "--steps must be >= 1 and --warmup >= 0");
  TL_CHECK(o.batch >= 1, "--batch must be >= 1, got " + std::to_string(o.batch));
  const comm::Algorithm algorithm = comm::parse_algorithm(o.algorithm);
  const ModelDef& def = find_model(o.model.name);
  Backend& be = get_backend(o.backend);
  be.set_num_threads(o.threads);
  const ModelInput input = default_input_for(def, o.model.options);
  auto build = [&] {
    Generator gen(7);
    auto model = build_model(def, InitOptions{&gen, DType::f32, &be}, input, o.model.options);
    model->set_fused(o.fuse);
    return model;
  };
  comm::TensorParallel tp(*world, algorithm);
  auto split = build();
  split->split_tensor_parallel(tp.group());
  auto whole = build(), whole_one = build();
  SgdOptions sgd;
  sgd.lr = 0.01;
  SGD split_sgd(split->named_parameters(), sgd), whole_sgd(whole->named_parameters(), sgd),
      whole_one_sgd(whole_one->named_parameters(), sgd);
  const Batch batch = synthetic_batches(input, static_cast<bool>(def.context), o.batch, be, 29)();
  if (world->rank() == 0)
    std::cout << "bench_tensor_parallel: " << model_label(o.model) << " split over " << p << " ranks ("
              << whole->num_parameters() << " parameters, " << split->num_parameters() << " on each rank), batch "
              << o.batch << " on every rank" << (o.fuse ? ", fused" : "") << ", " << o.backend << " at " << o.threads
              << " thread(s) a rank; the unsplit model at " << p * o.threads << " threads in one process\n"
              << std::flush;
  const JobCpus job_cpus(*world);
  TpRecord record;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const bool measured = step >= o.warmup;
    measure_unsplit_step(*world, job_cpus, be, 1, o.threads, *whole_one, whole_one_sgd, batch,
                         measured ? &record.one_thread_s : nullptr);
    measure_unsplit_step(*world, job_cpus, be, p * o.threads, o.threads, *whole, whole_sgd, batch,
                         measured ? &record.all_threads_s : nullptr);
    measure_split_step(*world, tp, *split, split_sgd, batch, measured ? &record : nullptr);
  }
  std::vector<std::int64_t> sizes;
  for (std::int64_t s = kFitFrom; s <= kFitTo; s *= 4) sizes.push_back(s);
  for (const auto& call : record.calls) sizes.push_back(call.bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const AloneTimes alone = time_allreduces(*world, sizes, algorithm);
  if (world->rank() != 0) return 0;

  TensorParallelRow row;
  row.config = {model_label(o.model), p, o.batch, o.threads, o.algorithm, o.fuse};
  row.repeats = record.step_s;
  row.stats = summarize(record.step_s);
  row.warmup_steps_excluded = o.warmup;
  row.samples_per_s = static_cast<double>(o.batch) / row.stats.median;
  row.unsplit_one_thread = summarize(record.one_thread_s);
  row.unsplit_all_threads = summarize(record.all_threads_s);
  const bool one_faster = row.unsplit_one_thread.median <= row.unsplit_all_threads.median;
  row.baseline_repeats = one_faster ? record.one_thread_s : record.all_threads_s;
  row.baseline = one_faster ? row.unsplit_one_thread : row.unsplit_all_threads;
  row.baseline_threads = one_faster ? 1 : p * o.threads;
  row.speedup = row.baseline.median / row.stats.median;
  row.comm_s = summarize(record.comm_s);
  row.comm_wait_s = summarize(record.wait_s);
  row.comm_transfer_s = summarize(record.transfer_s);
  row.comm_share = row.comm_s.median / row.stats.median;
  fill_comm_columns(row, record, alone, algorithm, p);
  row.loss = record.loss;
  row.header.env = mpi_environment(be);
  row.header.env.timer = "steady_clock (the slowest rank's step; each sum from its call to its return)";
  row.header.kind = TensorParallelRow::kKind;
  row.header.run_id = new_run_id();
  row.header.status = "ok";
  print_tensor_parallel_row(row, p * o.threads);
  if (!o.no_ledger) {
    const Ledger ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
    ledger.append(row);
    std::cout << "ledger: " << ledger.path() << " (run " << row.header.run_id << ")\n";
  }
  return 0;
}

}  // namespace

int run_tensor_parallel_study(const TensorParallelStudyOptions& options) {
  auto world = comm::MpiCommunicator::world();
  try {
    return run_tensor_parallel(options, world.get());
  } catch (const Error& e) {
    world->abort(std::string("bench_tensor_parallel: error: ") + e.what(), 2);
  }
}

}  // namespace trainlab::bench
