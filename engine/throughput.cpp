#include "engine/throughput.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "backends/host_memory.h"
#include "backends/registry.h"
#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/data.h"
#include "engine/profiler.h"
#include "engine/step_graph.h"
#include "engine/version.h"

namespace trainlab {

namespace {

// Multiply-adds of SmallCNN per sample: forward, and for training the backward-data of every
// layer but the first plus the backward-weights of every layer.
double smallcnn_flop_per_sample(bool forward_only) {
  const double conv1 = 32.0 * 32 * 32 * 3 * 3 * 3, conv2 = 64.0 * 16 * 16 * 32 * 3 * 3;
  const double fc1 = 4096.0 * 256, fc2 = 256.0 * 10;
  const double forward = conv1 + conv2 + fc1 + fc2;
  return 2 * (forward_only ? forward : forward + (conv2 + fc1 + fc2) + forward);
}

std::map<std::string, std::int64_t> deltas(const std::map<std::string, std::int64_t>& before,
                                           const std::map<std::string, std::int64_t>& after) {
  std::map<std::string, std::int64_t> out;
  for (const auto& [key, value] : after) {
    if (key == "allocations" || key == "primitives_created") {
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

ThroughputResult measure_throughput(const ThroughputConfig& config) {
  TL_CHECK(config.batch >= 1, "throughput: batch must be >= 1, got " + std::to_string(config.batch));
  TL_CHECK(config.seconds > 0, "throughput: seconds must be > 0");
  TL_CHECK(config.warmup >= 0 && config.min_steps >= 1, "throughput: warmup must be >= 0 and min_steps >= 1");
  Backend& backend = get_backend(config.backend.empty() ? default_backend_name() : config.backend);
  const DType dtype = parse_dtype(config.dtype);
  TL_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f64,
           "throughput: dtype must be f32, bf16 or f64, got " + config.dtype);
  TL_CHECK(backend.supports(dtype), "backend '" + backend.name() + "' does not support dtype " + config.dtype);
  const MemoryFormat layout = parse_memory_format(config.layout);
  if (config.threads > 0) backend.set_num_threads(config.threads);
  const DType param_dtype = dtype == DType::bf16 ? DType::f32 : dtype;
  const DType autocast = dtype == DType::bf16 ? DType::bf16 : DType::f32;

  Generator generator(config.seed);
  SmallCNN model(InitOptions{&generator, param_dtype, &backend});
  model.set_fused(config.fuse);
  SGD optimizer(model.named_parameters(), SgdOptions{0.01, 0.9, 0.0, 0.0, false});
  if (autocast != DType::f32) optimizer.keep_working_copies(autocast);  // as the trainer does
  TL_CHECK(!config.cuda_graph || !config.forward_only,
           "throughput: cuda_graph times training steps, not --forward-only");
  TL_CHECK(!config.cuda_graph || config.warmup >= 2,
           "throughput: cuda_graph needs a warm-up of at least 2 eager steps before the capture");
  std::unique_ptr<StepGraph> graph;

  // A few distinct batches, made before any timing.
  const SyntheticImages data(config.seed, Split::train, 4 * config.batch);
  std::vector<Tensor> images, labels;
  for (std::int64_t b = 0; b < 4; ++b) {
    std::vector<float> pixels(static_cast<std::size_t>(config.batch * SyntheticImages::kSampleElements));
    std::vector<std::int64_t> y(static_cast<std::size_t>(config.batch));
    for (std::int64_t i = 0; i < config.batch; ++i) {
      y[static_cast<std::size_t>(i)] =
          data.get(b * config.batch + i, pixels.data() + i * SyntheticImages::kSampleElements);
    }
    images.push_back(Tensor::from_host(pixels.data(), {config.batch, 3, 32, 32}, DType::f32, backend));
    labels.push_back(Tensor::from_vector(y, {config.batch}, backend));
  }

  ThroughputResult result;
  result.config = config;
  result.backend_name = backend.name();
  result.threads = backend.num_threads();
  result.flop_per_sample = smallcnn_flop_per_sample(config.forward_only);

  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  auto one_step = [&](std::int64_t i, PhaseTimes& phases) {
    const Tensor& x_in = images[static_cast<std::size_t>(i % 4)];
    const Tensor& y = labels[static_cast<std::size_t>(i % 4)];
    auto t = clock::now();
    if (config.forward_only) {
      NoGradGuard no_grad;
      AutocastGuard cast(autocast);
      Tensor x = x_in.contiguous(layout);
      if (param_dtype != DType::f32) x = x.to(param_dtype);
      const Tensor logits = model.forward(x);
      backend.synchronize();
      phases.forward_s += seconds_since(t);
      return;
    }
    auto forward = [&](const std::vector<Tensor>& in) {
      AutocastGuard cast(autocast, &optimizer);
      Tensor x = in[0].contiguous(layout);
      if (param_dtype != DType::f32) x = x.to(param_dtype);
      return cross_entropy(model.forward(x), in[1]);
    };
    // cuda_graph: captured on the last warm-up step (after at least one eager step) and replayed
    // from there on, so neither the capture nor the first replay is measured.
    const bool replay = config.cuda_graph && i >= config.warmup - 1;
    if (replay && !graph) {
      graph = std::make_unique<StepGraph>(backend, std::vector<Tensor>{x_in, y}, forward, model.named_parameters());
      t = clock::now();
    }
    Tensor loss;
    if (replay) {
      graph->inputs()[0].copy_(x_in);
      graph->inputs()[1].copy_(y);
      graph->forward();
    } else {
      loss = forward({x_in, y});
    }
    backend.synchronize();
    phases.forward_s += seconds_since(t);
    t = clock::now();
    if (replay) {
      graph->backward();
    } else {
      loss.backward();
    }
    backend.synchronize();
    phases.backward_s += seconds_since(t);
    t = clock::now();
    optimizer.step();
    optimizer.zero_grad();
    backend.synchronize();
    phases.optimizer_s += seconds_since(t);
  };

  PhaseTimes ignored;
  for (std::int64_t i = 0; i < config.warmup; ++i) one_step(i, ignored);
  Profiler& profiler = Profiler::instance();
  const bool was_profiling = profiler.enabled();
  if (config.profile) {
    profiler.clear();
    profiler.set_enabled(true);
  }
  const auto before = backend.counters();
  const auto start = clock::now();
  for (std::int64_t i = 0; result.steps < config.min_steps || seconds_since(start) < config.seconds; ++i) {
    PhaseTimes phases;
    const auto step_start = clock::now();
    one_step(config.warmup + i, phases);
    result.step_seconds.push_back(seconds_since(step_start));
    result.phases += phases;
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
  result.counter_deltas = deltas(before, backend.counters());
  result.backend_describe = backend.describe();
  result.peak_rss_mb = peak_rss_mb();
  return result;
}

std::vector<double> measure_gemm_gflops(const std::string& backend_name, const std::string& dtype_name_, std::int64_t n,
                                        int threads, double seconds) {
  Backend& backend = get_backend(backend_name.empty() ? default_backend_name() : backend_name);
  const DType dtype = parse_dtype(dtype_name_);
  TL_CHECK(backend.supports(dtype), "backend '" + backend.name() + "' does not support dtype " + dtype_name_);
  TL_CHECK(n >= 1 && n <= 16384, "gemm: size must be in 1..16384, got " + std::to_string(n));
  // x, w and y: three n x n matrices.
  const std::uint64_t needed = 3 * static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n) * dtype_size(dtype);
  const std::uint64_t available = backend.memory_available_bytes();
  TL_CHECK(available == 0 || needed <= available, "gemm --size " + std::to_string(n) + " needs " + human_size(needed) +
                                                      " (three " + std::to_string(n) + "x" + std::to_string(n) + " " +
                                                      dtype_name_ + " matrices) on backend '" + backend.name() + "'; " +
                                                      human_size(available) + " is available (use a smaller --size)");
  if (threads > 0) backend.set_num_threads(threads);
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

std::string gemm_json(Backend& backend, const std::string& dtype, std::int64_t n, const std::vector<double>& gflops) {
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

std::string throughput_json(const ThroughputResult& r) {
  const double total = r.phases.total();
  auto share = [&](double s) { return total > 0 ? s / total : 0.0; };
  nlohmann::json j = {{"tool", "trainlab throughput"},
                      {"samples_per_s", r.samples_per_s},
                      {"gflop_per_s", r.samples_per_s * r.flop_per_sample * 1e-9},
                      {"flop_per_sample", r.flop_per_sample},
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
                      {"peak_rss_mb", r.peak_rss_mb},
                      {"op_seconds", r.op_seconds},
                      {"config",
                       {{"backend", r.backend_name},
                        {"dtype", r.config.dtype},
                        {"layout", r.config.layout},
                        {"fuse", r.config.fuse},
                        {"forward_only", r.config.forward_only},
                        {"cuda_graph", r.config.cuda_graph},
                        {"batch", r.config.batch},
                        {"threads", r.threads},
                        {"seed", r.config.seed}}},
                      {"versions",
                       {{"trainlab", version()},
                        {"engine", git_describe()},
                        {"compiler", compiler_version()},
                        {"backend", r.backend_describe}}},
                      {"timer", "steady_clock"}};
  return j.dump();
}

}  // namespace trainlab
