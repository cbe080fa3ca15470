// bench_scaling: weak and strong scaling of DDP training, world sizes 1, 2 and 4 inside one launch.
//   scripts/mpirun -np 4 build/bin/bench_scaling
// World size W runs on a sub-communicator of the first W launched ranks; the others wait without
// spinning. Repeats are interleaved (every configuration once per round), warm-up steps excluded,
// each run's time the slowest rank's. Prints seed 000's two tables, the communication fraction by
// the paired no_sync comparison (repeated, with its spread, flagged when unusable), the
// decode-cost-0 ablation, DDP's overlap, the per-rank step-time distribution naming the slowest
// rank, and PyTorch DDP (gloo) at world 1 and 2 beside trainlab's (when the model is SmallCNN, the
// peer's). Every run trains options.model and is a ledger row.
//
// This file: the command line's lists, the launch's set-up (shared with the other communication
// studies: bench/measure/comm_bench.h's environment), one training run and its row.
#include "studies/scaling/scaling_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>
#include <thread>
#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/knobs.h"
#include "comm/ddp.h"
#include "comm/run_training.h"
#include "engine/train/trainer.h"
#include "studies/scaling/launch.h"
#include "studies/scaling/rows.h"

namespace trainlab::bench {

namespace scaling {

namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double index = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(index));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (index - static_cast<double>(lo));
}

std::vector<int> parse_worlds(const ScalingOptions& o, int P) {
  std::vector<int> worlds;
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
  for (int w : worlds) {
    TL_CHECK(o.global_batch % w == 0,
             fmt::format("bench_scaling: --global-batch {} does not split over world {}", o.global_batch, w));
  }
  return worlds;
}

// --zero: one stage for every run, or several compared side by side.
std::vector<int> parse_zeros(const ScalingOptions& o) {
  std::vector<int> zeros;
  std::stringstream list(o.zero);
  std::string item;
  while (std::getline(list, item, ',')) {
    TL_CHECK(
        item == "0" || item == "1" || item == "2" || item == "3",
        "bench_scaling: --zero: " + quote_value(item) + " is not a stage DDP runs (0, 1, 2 or 3, e.g. --zero 1,3)");
    TL_CHECK(std::find(zeros.begin(), zeros.end(), item[0] - '0') == zeros.end(),
             "bench_scaling: --zero " + quote_value(o.zero) + ": stage " + item + " is listed twice");
    zeros.push_back(item[0] - '0');
  }
  TL_CHECK(!zeros.empty(), "bench_scaling: --zero is empty (a stage 0-3, or a list: 0,1,2,3)");
  TL_CHECK(zeros.size() == 1 || !o.bind_compare, "bench_scaling: --bind-compare and --zero 0,1 are separate studies");
  return zeros;
}

// --allreduce: one for every run, or several compared side by side (e.g. ring,single_copy).
std::vector<AllreduceAlgorithm> parse_allreduces(const ScalingOptions& o, const Plan& plan) {
  std::vector<AllreduceAlgorithm> allreduces;
  std::stringstream list(o.allreduce);
  std::string item;
  while (std::getline(list, item, ',')) {
    AllreduceAlgorithm algorithm{};
    try {
      algorithm = comm::parse_algorithm(item);
    } catch (const Error& e) {
      throw Error("bench_scaling: --allreduce: " + std::string(e.what()));
    }
    TL_CHECK(std::find(allreduces.begin(), allreduces.end(), algorithm) == allreduces.end(),
             "bench_scaling: --allreduce " + quote_value(o.allreduce) + ": " + item + " is listed twice");
    allreduces.push_back(algorithm);
  }
  TL_CHECK(!allreduces.empty(), "bench_scaling: --allreduce is empty (an all-reduce, or a list: ring,single_copy)");
  TL_CHECK(allreduces.size() == 1 || (plan.zeros.size() == 1 && plan.compressions.size() == 1 && !o.bind_compare),
           "bench_scaling: --allreduce with a list is a study of its own: not with --zero 0,1, --grad-compress "
           "none,bf16 or --bind-compare");
  return allreduces;
}

// --grad-compress: one hook for every run, or several compared side by side.
std::vector<GradCompression> parse_compressions(const ScalingOptions& o, const std::vector<int>& zeros) {
  std::vector<GradCompression> compressions;
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
  return compressions;
}

// The configuration of one training run of the launch.
TrainConfig train_config(const ScalingOptions& o, const Arm& arm) {
  TrainConfig config;
  config.model = o.model;
  config.execution.backend = o.backend;
  config.execution.dtype = parse_dtype(o.dtype);
  config.execution.threads = o.threads;
  config.batch = arm.global_batch;
  config.optimizer.lr = lr_for(o, arm.global_batch);
  config.data.decode_cost = arm.decode_cost;
  config.reporting.warmup = o.warmup;
  config.steps = o.warmup + arm.measured_steps;
  config.reporting.eval_at_end = false;
  config.reporting.log_every = 1 << 30;
  config.data.train_samples = std::max<std::int64_t>(50000, arm.global_batch * 2);
  config.data.eval_samples = 10;
  config.data.eval_batch = 10;
  if (arm.seed > 0) {
    config.seed = arm.seed;
    config.reporting.eval_at_end = true;
    config.data.eval_samples = 2000;
    config.data.eval_batch = 500;
  }
  config.parallel.bucket_cap_mb = o.bucket_cap_mb;
  config.parallel.allreduce = arm.allreduce;
  config.parallel.allreduce_tuning = o.allreduce_tuning;
  config.parallel.rendezvous = o.rendezvous;
  config.parallel.first_bucket_mb = o.first_bucket_mb;
  config.parallel.zero = arm.zero;
  config.parallel.grad_compress = arm.compression;
  config.parallel.gradient_as_bucket_view = o.bucket_view;
  return config;
}

}  // namespace

Plan plan_of(const ScalingOptions& o, int launched_ranks) {
  Plan plan;
  plan.worlds = parse_worlds(o, launched_ranks);
  plan.zeros = parse_zeros(o);
  plan.compressions = parse_compressions(o, plan.zeros);
  plan.allreduces = parse_allreduces(o, plan);
  return plan;
}

const char* compression_name(GradCompression c) {
  return c == GradCompression::bf16 ? "bf16" : c == GradCompression::f16 ? "fp16" : "none";
}

double lr_for(const ScalingOptions& o, std::int64_t global_batch) {
  return o.base_lr * static_cast<double>(global_batch) / static_cast<double>(o.base_batch);
}

std::string ranks_per_core_text(int ranks, int cores) {
  return fmt::format("{:.1f}{}", static_cast<double>(ranks) / cores, ranks > cores ? " (oversubscribed)" : "");
}

Launch::Launch(const ScalingOptions& options, comm::MpiCommunicator& world_, Plan plan_)
    : o(options),
      world(world_),
      plan(std::move(plan_)),
      launched(world_.size()),
      rank(world_.rank()),
      bind_arm(o.bind) {
  // One sub-communicator per world size: the first w ranks.
  // Over NCCL, the sub-communicators are split from the NCCL world (one GPU per rank; a host with
  // fewer GPUs than ranks is refused there, with the counts).
  if (o.comm == "nccl") {
    TL_CHECK(o.backend == "cuda", "bench_scaling: --comm nccl works on GPU memory: give --backend cuda (got '" +
                                      (o.backend.empty() ? default_backend_name() : o.backend) + "')");
    nccl_ = comm::make_world("nccl");
    nccl_->set_timeout(o.timeout);
  }
  ddp_world_ = nccl_ ? nccl_.get() : static_cast<comm::Communicator*>(&world);
  hosts_ = comm::hosts_summary(comm::gather_host_names(world));
  for (int w : plan.worlds) {
    if (subs_.count(w) == 0) subs_[w] = ddp_world_->split(rank < w ? 0 : -1, rank);
  }
  cores = static_cast<int>(std::thread::hardware_concurrency());
  topology_ = machine_topology();
  // What the launcher applied (OpenMPI binds each rank to a core by default at 2 ranks or fewer);
  // --bind replaces it for every thread this rank has (MPI's included) and every one it starts.
  launcher_cpus_ = cpu_list(thread_affinity(0));
  bound_cpus = bind(o.bind);

  host_ = &get_backend(o.backend.empty() ? default_backend_name() : o.backend);
  env_ = mpi_environment(*host_);
  env_.timer = "steady_clock (the slowest rank's measured steps)";
  env_.threads = o.threads;
  run_id = new_run_id();
  ledger = Ledger(o.ledger_path.empty() ? default_ledger_path(device_type_name(host_->device_type())) : o.ledger_path);
}

std::string Launch::bind(const std::string& how) {
  set_process_affinity(how == "core" ? topology_.core(rank) : topology_.all());
  return cpu_list(thread_affinity(0));
}

Arm Launch::arm(int w, std::int64_t global_batch, std::int64_t decode_cost, bool communicate, int measured) const {
  return {w, global_batch, decode_cost, communicate, measured, zero0(), compression0(), 0, allreduce0()};
}

Trained Launch::train(const Arm& arm) {
  Trained result;
  const int w = arm.world;
  if (rank < w) {
    const TrainConfig config = train_config(o, arm);
    const auto sub = subs_.find(w);
    TL_CHECK(sub != subs_.end(),
             fmt::format("bench_scaling: world {} is not in --worlds {}", w, quote_value(o.worlds)));
    comm::Replica replica(*sub->second);
    auto trainer = replica.trainer(config, model_task(config));
    comm::Ddp& ddp = *replica.ddp();
    ddp.set_communication(arm.communicate);
    const TrainResult trained = trainer->train(nullptr);
    double total = 0;
    for (double s : trained.step_seconds) total += s;
    const double slowest = ddp.max_over_ranks(total);
    result.samples_per_s = static_cast<double>(arm.global_batch * trained.measured_steps) / slowest;
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
    result.ddp.gather_wait_s /= n;
    result.comm_wait_s = trained.measured.comm_s / n;
    // ZeRO-3's waits for its gathers are inside forward and backward: communication, not compute.
    result.compute_s = ddp.max_over_ranks(
        (trained.measured.forward_s + trained.measured.backward_s + trained.measured.optimizer_s) / n -
        result.ddp.gather_wait_s);
    for (std::int64_t b : ddp.gather(trained.memory.peak_of(MemoryCategory::optimizer_state)))
      result.optimizer_state_bytes = std::max(result.optimizer_state_bytes, b);
    for (std::int64_t b : ddp.gather(trained.memory.total_peak)) result.peak_bytes = std::max(result.peak_bytes, b);
    result.accuracy = trained.final_eval.accuracy;
    result.final_loss = trained.losses.empty() ? 0.0 : trained.losses.back();
  }
  quiet_barrier();
  return result;
}

RowHeader Launch::row_header(const char* kind) const {
  RowHeader header;
  header.env = env_;
  header.kind = kind;
  header.run_id = run_id;
  header.status = "ok";
  return header;
}

void Launch::record(const std::string& mode, const Arm& arm, const Trained& r) const {
  if (rank != 0 || o.no_ledger) return;
  ScalingRow row;
  row.header = row_header(ScalingRow::kKind);
  row.communicator = ddp_world_->backend();
  row.interconnect = ddp_world_->interconnect();
  ScalingConfig& c = row.config;
  c.mode = mode;
  c.world = arm.world;
  c.global_batch = arm.global_batch;
  c.per_worker_batch = arm.global_batch / arm.world;
  c.lr = lr_for(o, arm.global_batch);
  c.decode_cost = arm.decode_cost;
  c.no_sync = !arm.communicate;
  c.allreduce = comm::algorithm_name(arm.allreduce);
  c.rendezvous = o.rendezvous;
  c.bucket_cap_mb = o.bucket_cap_mb;
  c.first_bucket_mb = o.first_bucket_mb;
  c.dtype = o.dtype;
  c.launched_ranks = launched;
  c.ranks_per_core = static_cast<double>(launched) / cores;
  c.bind = bind_arm;
  c.bind_compare = o.bind_compare;
  c.rank0_cpus = bound_cpus;
  c.zero = arm.zero;
  c.grad_compress = compression_name(arm.compression);
  c.bucket_view = o.bucket_view;
  c.model = o.model.name;
  c.model_options = model_options_text(o.model.options);
  row.samples_per_s = r.samples_per_s;
  if (mode == "compress_accuracy") {
    row.held_out_accuracy = r.accuracy;
    row.final_loss = r.final_loss;
  }
  row.comm_wait_s_per_step = r.comm_wait_s;
  row.memory_per_rank.optimizer_state_peak_bytes = r.optimizer_state_bytes;
  row.memory_per_rank.total_peak_bytes = r.peak_bytes;
  row.warmup_steps_excluded = o.warmup;
  row.measured_steps = r.steps;
  for (const auto& v : r.rank_p50_p99_max) row.per_rank_step.push_back({v[0], v[1], v[2]});
  DdpPerStep& d = row.ddp_per_step;
  d.backward_compute_s = r.ddp.backward_compute_s;
  d.comm_s = r.ddp.comm_s;
  d.overlap_s = r.ddp.overlap_s;
  d.exposed_s = r.ddp.exposed_s;
  d.bucket_bytes = r.ddp.bucket_bytes;
  d.clock = r.ddp.device_clock ? "device events" : "host steady_clock";
  if (r.ddp.gather_bytes > 0) {
    row.ddp_per_step.gather_bytes = r.ddp.gather_bytes;
    row.ddp_per_step.gather_wait_s = r.ddp.gather_wait_s;
  }
  ledger.append(row);
}

void Launch::print_header() const {
  std::cout << fmt::format(
      "# bench_scaling: {} on {} launched ranks on {} cores ({} ranks per core), worlds {}, {} repeats interleaved, "
      "{} warm-up + {} measured steps, {} thread(s) per rank, backend {}, {}, {} all-reduce{}, buckets {} MiB (first "
      "{}); "
      "decode cost {}{}; binding {} (rank 0 on CPUs {}; the launcher had given it {})\n",
      model_label(o.model), launched, cores, ranks_per_core_text(launched, cores), o.worlds, o.repeats, o.warmup,
      o.steps, o.threads, host_->name(), o.dtype, o.allreduce,
      o.rendezvous ? " (sleeping rendezvous before each bucket)" : "", o.bucket_cap_mb, o.first_bucket_mb,
      o.decode_cost, o.ablation && !o.bind_compare ? " (and the 0 ablation)" : "",
      o.bind_compare ? "compared (none, none again, core)" : o.bind, bound_cpus, launcher_cpus_);
  std::cout << "# LR rule: lr = " << o.base_lr << " x global batch / " << o.base_batch << "\n";
  std::cout << "# communicator " << ddp_world_->backend() << ": " << ddp_world_->interconnect() << "\n";
  std::cout << "# hosts: " << hosts_ << "\n";
  std::cout.flush();
}

void Launch::print_ledger_line() const {
  if (rank == 0 && !o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
}

}  // namespace scaling

int run_scaling_study(const ScalingOptions& options) {
  auto world = comm::MpiCommunicator::world();
  try {
    world->set_timeout(options.timeout);
    check_backend_name(options.backend);
    // The model takes SyntheticImages (its keys' values too): refused here, before any run.
    scaling::Plan plan = scaling::plan_of(options, world->size());
    scaling::Arm first;
    first.allreduce = plan.allreduces.front();
    (void)model_task(scaling::train_config(options, first));
    scaling::Launch launch(options, *world, std::move(plan));
    if (launch.rank == 0) launch.print_header();
    if (launch.plan.zeros.size() > 1 || launch.plan.compressions.size() > 1 || launch.plan.allreduces.size() > 1)
      return scaling::compare_arms(launch);
    if (options.bind_compare) return scaling::compare_binding(launch);
    return scaling::scaling_tables(launch);
  } catch (const Error& e) {
    world->abort(std::string("error: ") + e.what(), 2);
  }
}

}  // namespace trainlab::bench
