#include "bench/measure/throughput.h"

#include <sys/resource.h>

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <optional>

#include <nlohmann/json.hpp>

#include "backends/host_memory.h"
#include "backends/registry.h"
#include "engine/data/loader.h"
#include "engine/instrument/profiler.h"
#include "engine/io/version.h"
#include "engine/train/run.h"
#include "engine/train/step.h"
#include "engine/train/task.h"

namespace trainlab::bench {

namespace {

std::map<std::string, std::int64_t> deltas(const std::map<std::string, std::int64_t>& before,
                                           const std::map<std::string, std::int64_t>& after) {
  std::map<std::string, std::int64_t> out;
  for (const auto& [key, value] : after) {
    if (key == "allocations" || key == "primitives_created" || key == "weight_reorders" || key == "kept_weight_reads") {
      auto it = before.find(key);
      out[key] = value - (it == before.end() ? 0 : it->second);
    }
  }
  return out;
}

}  // namespace

double peak_rss_mb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

namespace {

void check_throughput_config(const ThroughputConfig& config) {
  TL_CHECK(config.batch >= 1, "throughput: batch must be >= 1, got " + std::to_string(config.batch));
  TL_CHECK(config.seconds > 0, "throughput: seconds must be > 0");
  TL_CHECK(config.warmup >= 0 && config.min_steps >= 1, "throughput: warmup must be >= 0 and min_steps >= 1");
  const DType dtype = config.dtype;
  TL_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f64,
           "throughput: dtype must be f32, bf16 or f64, got " + std::string(dtype_name(dtype)));
  TL_CHECK(!config.cuda_graph || !config.forward_only,
           "throughput: cuda_graph times training steps, not --forward-only");
  TL_CHECK(!config.cuda_graph || config.warmup >= 2,
           "throughput: cuda_graph needs a warm-up of at least 2 eager steps before the capture");
}

// The trainer's run (engine/train/run.h) of the model with SGD at the defaults (a token model: its
// AdamW recipe); its data are the in-memory batches of throughput_batches.
TrainConfig throughput_run_config(const ThroughputConfig& config) {
  TrainConfig run_config;
  run_config.model.name = config.model;
  run_config.model.options = config.model_options;
  run_config.execution.backend = config.backend;
  run_config.execution.dtype = config.dtype;
  run_config.execution.layout = config.layout;
  run_config.execution.fuse = config.fuse;
  run_config.execution.cuda_graph = config.cuda_graph;
  run_config.execution.threads = config.threads;
  run_config.batch = config.batch;
  run_config.seed = config.seed;
  run_config.data.train_samples = 4 * config.batch;
  // A token model trains with a transformer's recipe, as its PyTorch peer does (torch_gpt.py):
  // AdamW (betas 0.9, 0.99, weight decay 0.1 on its decayed group) and the gradients' norm clipped at 1.
  if (find_model(config.model).context) {
    run_config.optimizer.kind = OptimizerKind::adamw;
    run_config.optimizer.lr = 1e-3;
    run_config.optimizer.beta2 = 0.99;
    run_config.optimizer.weight_decay = 0.1;
    run_config.optimizer.grad_clip = 1.0;
  }
  return run_config;
}

// A few distinct batches of the task's training data (SyntheticImages', or a token model's
// SyntheticTokens windows), made before any timing.
std::vector<Batch> throughput_batches(const std::shared_ptr<const Dataset>& data, std::int64_t batch,
                                      Backend& backend) {
  DataLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = false;
  DataLoader loader(data, o, backend);
  std::vector<Batch> batches;
  for (int b = 0; b < 4; ++b) batches.push_back(loader.next());
  return batches;
}

}  // namespace

ThroughputResult measure_throughput(const ThroughputConfig& config) {
  check_throughput_config(config);
  const DType dtype = config.dtype;
  const TrainConfig run_config = throughput_run_config(config);
  Generator generator(config.seed);
  // Captured on the last warm-up step (after at least one eager step) and replayed from there on,
  // so neither the capture nor the first replay is measured.
  const TrainTask task = model_task(run_config);
  RunParts run = make_run(run_config, task, generator, nullptr, std::max<std::int64_t>(1, config.warmup - 1));
  Backend& backend = *run.backend;
  StepRunner& runner = *run.runner;

  const std::vector<Batch> batches = throughput_batches(task.train_data, config.batch, backend);

  ThroughputResult result;
  result.config = config;
  result.plan = runner.plan();
  result.backend_name = backend.name();
  result.threads = backend.num_threads();
  result.model = find_model(config.model).name;
  if (task.train_data->sample_kind() == SampleKind::tokens)
    result.tokens_per_sample = task.train_data->sample_elements();
  result.flop_per_sample = run.model->flop_per_sample(config.forward_only);
  result.forward_flop_per_sample = run.model->flop_per_sample(true);

  std::int64_t next = 0;
  auto one_step = [&] {
    const Batch& batch = batches[static_cast<std::size_t>(next++ % 4)];
    return config.forward_only ? runner.infer(batch) : runner.step([&] { return batch; });
  };
  // Forward only is inference on a frozen model, as the PyTorch peer's frozen TorchScript is: the
  // backend may keep each weight in its primitive's layout from the first forward on.
  std::optional<FrozenWeightsScope> frozen;
  if (config.forward_only) {
    frozen.emplace(backend);
    run.model->eval();  // inference: batch norm reads its running statistics, dropout is off
  }
  for (std::int64_t i = 0; i < config.warmup; ++i) one_step();
  reset_memory_peaks(backend.device_type());
  Profiler& profiler = Profiler::instance();
  const bool was_profiling = profiler.enabled();
  if (config.profile) {
    profiler.clear();
    profiler.set_enabled(true);
  }
  using clock = std::chrono::steady_clock;
  const auto before = backend.counters();
  const auto start = clock::now();
  auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  while (result.steps < config.min_steps || seconds_since(start) < config.seconds) {
    const StepResult step = one_step();
    result.step_seconds.push_back(step.seconds);
    result.phases += step.phases;
    ++result.steps;
  }
  result.seconds = seconds_since(start);
  if (config.profile) {
    profiler.set_enabled(was_profiling);
    for (const auto& span : profiler.take()) {
      auto& [seconds, calls] = result.op_seconds[span.name];
      seconds += static_cast<double>(span.end_ns - span.start_ns) * 1e-9;
      ++calls;
    }
  }
  result.samples_per_s = static_cast<double>(result.steps * config.batch) / result.seconds;
  const auto after = backend.counters();
  result.counter_deltas = deltas(before, after);
  if (frozen && frozen->active()) {
    const auto kept = after.find("frozen_weights_kept");
    result.frozen_weights_kept = kept == after.end() ? 0 : kept->second;
  }
  result.backend_describe = backend.describe();
  frozen.reset();  // before the ceiling's products, whose weights are not the model's
  result.phase_timer = backend.make_timer()->kind();
  result.peak_rss_mb = peak_rss_mb();
  result.memory_device = backend.device_type();
  result.memory = memory_usage(result.memory_device);
  // After the steps, so that it disturbs none of them; in the dtype the step's products ran in.
  result.ceiling = measure_ceiling(backend, dtype, config.ceiling_seconds);
  return result;
}

double GemmCeiling::median() const {
  if (gflops.empty()) return 0;
  std::vector<double> sorted = gflops;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

GemmCeiling measure_ceiling(Backend& backend, DType dtype, double seconds) {
  GemmCeiling ceiling;
  ceiling.dtype = dtype;
  if (!(seconds > 0)) {
    ceiling.skipped = "not measured (ceiling seconds 0)";
    return ceiling;
  }
  const OpSupport support = backend.supports_op(BackendOp::linear, dtype, false);
  if (!support.runs()) {
    ceiling.skipped = "backend '" + backend.name() + "' has no " + dtype_name(dtype) + " linear: " + support.how;
    return ceiling;
  }
  Generator gen(0);
  using clock = std::chrono::steady_clock;
  // One product of n x n matrices, timed (after its warm-up call when `warm`).
  auto product_seconds = [&](std::int64_t n, bool warm) {
    const Tensor x = Tensor::uniform({n, n}, -1, 1, gen, dtype, backend);
    const Tensor w = Tensor::uniform({n, n}, -1, 1, gen, dtype, backend);
    Tensor y = Tensor::empty({n, n}, dtype, backend);
    auto call = [&] {
      backend.linear_forward(dtype, x.raw_data(), w.raw_data(), nullptr, false, y.raw_data(), n, n, n);
      backend.synchronize();
    };
    if (warm) call();
    const auto t = clock::now();
    call();
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  // The size: grow from 256 while the next size's product (8x the work) stays within a half.
  std::int64_t n = 256;
  double last = product_seconds(n, true);
  while (n < 2048 && last * 8 <= seconds / 2) {
    n *= 2;
    last = product_seconds(n, true);
  }
  ceiling.n = n;
  ceiling.gflops = measure_gemm_gflops(backend, dtype, n, std::max(seconds, 3 * last));
  return ceiling;
}

std::vector<double> measure_gemm_gflops(const std::string& backend_name, DType dtype, std::int64_t n, int threads,
                                        double seconds) {
  Backend& backend = get_backend(backend_name.empty() ? default_backend_name() : backend_name);
  const std::string dtype_name_ = dtype_name(dtype);
  require_op(backend, BackendOp::linear, dtype, false);
  TL_CHECK(n >= 1 && n <= 16384, "gemm: size must be in 1..16384, got " + std::to_string(n));
  // x, w and y: three n x n matrices.
  const std::uint64_t needed = 3 * static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n) * dtype_size(dtype);
  const std::uint64_t available = backend.memory_available_bytes();
  TL_CHECK(available == 0 || needed <= available, "gemm --size " + std::to_string(n) + " needs " + human_size(needed) +
                                                      " (three " + std::to_string(n) + "x" + std::to_string(n) + " " +
                                                      dtype_name_ + " matrices) on backend '" + backend.name() + "'; " +
                                                      human_size(available) + " is available (use a smaller --size)");
  if (threads > 0) backend.set_num_threads(threads);
  return measure_gemm_gflops(backend, dtype, n, seconds);
}

std::vector<double> measure_gemm_gflops(Backend& backend, DType dtype, std::int64_t n, double seconds) {
  Generator gen(0);
  const Tensor x = Tensor::uniform({n, n}, -1, 1, gen, dtype, backend);
  const Tensor w = Tensor::uniform({n, n}, -1, 1, gen, dtype, backend);
  Tensor y = Tensor::empty({n, n}, dtype, backend);
  auto call = [&] {
    backend.linear_forward(dtype, x.raw_data(), w.raw_data(), nullptr, false, y.raw_data(), n, n, n);
    backend.synchronize();
  };
  call();  // warm-up (primitive creation, first touch)
  std::vector<double> gflops;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  while (gflops.size() < 3 || std::chrono::duration<double>(clock::now() - start).count() < seconds) {
    const auto t = clock::now();
    call();
    const double s = std::chrono::duration<double>(clock::now() - t).count();
    gflops.push_back(2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s * 1e-9);
  }
  return gflops;
}

std::string gemm_json(Backend& backend, DType dtype_value, std::int64_t n, const std::vector<double>& gflops) {
  const std::string dtype = dtype_name(dtype_value);
  std::vector<double> sorted = gflops;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  nlohmann::json j = {
      {"tool", "trainlab gemm"},
      {"gflop_per_s", median},
      {"gflop_per_s_each", gflops},
      {"config", {{"backend", backend.name()}, {"dtype", dtype}, {"n", n}, {"threads", backend.num_threads()}}},
      {"versions", {{"trainlab", version()}, {"engine", git_describe()}, {"backend", backend.describe()}}},
      {"timer", "steady_clock"}};
  return j.dump();
}

namespace {
nlohmann::json compute_json(const StepPlan& plan) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [op, support] : plan.paths()) out[op] = support;
  return out;
}
}  // namespace

namespace {
// The step's GFLOP/s (over the wall clock) and each computing phase's (over its own time).
struct PhaseRates {
  double step = 0, forward = 0, backward = 0;
};
PhaseRates phase_rates(const ThroughputResult& r) {
  const double samples = static_cast<double>(r.steps * r.config.batch);
  const double backward_flop =
      r.flop_per_sample - (r.config.forward_only ? r.flop_per_sample : r.forward_flop_per_sample);
  const double forward_flop = r.flop_per_sample - backward_flop;
  auto rate = [&](double flop, double seconds) { return seconds > 0 ? flop * samples / seconds * 1e-9 : 0.0; };
  return {rate(r.flop_per_sample, r.seconds), rate(forward_flop, r.phases.forward_s),
          rate(backward_flop, r.phases.backward_s)};
}

nlohmann::json ceiling_json(const ThroughputResult& r) {
  const GemmCeiling& c = r.ceiling;
  if (!c.skipped.empty()) return {{"skipped", c.skipped}};
  const PhaseRates p = phase_rates(r);
  const double ceiling = c.median();
  auto share = [&](double rate) { return ceiling > 0 ? rate / ceiling : 0.0; };
  nlohmann::json shares = {{"step", share(p.step)}, {"forward", share(p.forward)}};
  if (!r.config.forward_only) shares["backward"] = share(p.backward);
  return {{"gemm_gflop_per_s", ceiling},
          {"gemm_gflop_per_s_each", c.gflops},
          {"gemm_n", c.n},
          {"dtype", dtype_name(c.dtype)},
          {"share", shares},
          {"what",
           "GEMM: n x n x n products through this backend's linear kernel in this process, after the "
           "steps (warm-up call excluded), median; share: GFLOP/s of the step (wall clock) and of each "
           "phase (its own time) over it"}};
}
}  // namespace

std::string throughput_summary(const ThroughputResult& r) {
  const PhaseRates p = phase_rates(r);
  std::string out = fmt::format("throughput: {:.0f} samples/s, step {:.1f} GFLOP/s (forward {:.1f}", r.samples_per_s,
                                p.step, p.forward);
  if (!r.config.forward_only) out += fmt::format(", backward {:.1f}", p.backward);
  out += ")";
  const double ceiling = r.ceiling.median();
  if (!r.ceiling.skipped.empty() || ceiling <= 0) return out + "; GEMM ceiling " + r.ceiling.skipped;
  out +=
      fmt::format(" = {:.0f}% of this process's {} GEMM ceiling, {:.1f} GFLOP/s at n={} (forward {:.0f}%",
                  100 * p.step / ceiling, dtype_name(r.ceiling.dtype), ceiling, r.ceiling.n, 100 * p.forward / ceiling);
  if (!r.config.forward_only) out += fmt::format(", backward {:.0f}%", 100 * p.backward / ceiling);
  return out + ")";
}

std::string throughput_json(const ThroughputResult& r) {
  const double total = r.phases.total();
  auto share = [&](double s) { return total > 0 ? s / total : 0.0; };
  const PhaseRates rates = phase_rates(r);
  nlohmann::json by_phase = {{"forward", rates.forward}};
  if (!r.config.forward_only) by_phase["backward"] = rates.backward;
  nlohmann::json j = {{"tool", "trainlab throughput"},
                      {"samples_per_s", r.samples_per_s},
                      {"gflop_per_s", r.samples_per_s * r.flop_per_sample * 1e-9},
                      {"flop_per_sample", r.flop_per_sample},
                      {"gflop_per_s_by_phase", by_phase},
                      {"ceiling", ceiling_json(r)},
                      {"steps", r.steps},
                      {"seconds", r.seconds},
                      {"warmup_steps_excluded", r.config.warmup},
                      {"step_seconds", r.step_seconds},
                      {"phase_seconds",
                       {{"data_wait", r.phases.data_wait_s},
                        {"forward", r.phases.forward_s},
                        {"backward", r.phases.backward_s},
                        {"optimizer", r.phases.optimizer_s}}},
                      {"phase_share",
                       {{"data_wait", share(r.phases.data_wait_s)},
                        {"forward", share(r.phases.forward_s)},
                        {"backward", share(r.phases.backward_s)},
                        {"optimizer", share(r.phases.optimizer_s)}}},
                      {"after_warmup", r.counter_deltas},
                      {"frozen_weights_kept", r.frozen_weights_kept},
                      {"peak_rss_mb", r.peak_rss_mb},
                      {"memory", nlohmann::json::parse(memory_usage_json(r.memory, r.memory_device))},
                      {"op_seconds", r.op_seconds},
                      {"config",
                       {{"model", r.model},
                        {"model_options", model_options_text(r.config.model_options)},
                        {"backend", r.backend_name},
                        {"dtype", dtype_name(r.config.dtype)},
                        {"layout", memory_format_name(r.config.layout)},
                        {"fuse", r.config.fuse},
                        {"forward_only", r.config.forward_only},
                        {"cuda_graph", r.config.cuda_graph},
                        {"batch", r.config.batch},
                        {"threads", r.threads},
                        {"seed", r.config.seed}}},
                      {"isa", r.plan.isa},
                      {"compute", compute_json(r.plan)},
                      {"versions",
                       {{"trainlab", version()},
                        {"engine", git_describe()},
                        {"compiler", compiler_version()},
                        {"backend", r.backend_describe}}},
                      {"timer", "steady_clock (samples/s, over the measured steps); " + r.phase_timer + " (phases)"}};
  if (r.tokens_per_sample > 0) {
    j["tokens_per_sample"] = r.tokens_per_sample;
    j["tokens_per_s"] = r.samples_per_s * static_cast<double>(r.tokens_per_sample);
  }
  return j.dump();
}

}  // namespace trainlab::bench
