#include "engine/trainer.h"

#include <fmt/format.h>
#include <chrono>
#include <cmath>
#include <exception>
#include <ostream>

#include "backends/registry.h"
#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/checkpoint.h"
#include "engine/fileio.h"
#include "engine/profiler.h"
#include "engine/trace.h"
#include "engine/version.h"

namespace trainlab {

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& o) {
  data_wait_s += o.data_wait_s;
  forward_s += o.forward_s;
  backward_s += o.backward_s;
  optimizer_s += o.optimizer_s;
  comm_s += o.comm_s;
  return *this;
}

namespace {

Backend& choose_backend(const TrainConfig& config) {
  return get_backend(config.backend.empty() ? default_backend_name() : config.backend);
}

// Times one phase with the backend's own timer (CUDA events on the cuda backend, a steady clock
// on the CPU) and synchronises the device at its end, so that an asynchronous backend does not
// look faster than it is and the next phase starts on an idle device; records a profiler span.
class PhaseTimer {
 public:
  PhaseTimer(Backend& backend, Timer& timer, const char* name, double& total_s)
      : backend_(backend), timer_(timer), name_(name), total_s_(total_s), start_ns_(Profiler::now_ns()) {
    timer_.start();
  }
  // Ends the phase here (otherwise the destructor does).
  void finish() {
    if (finished_) return;
    finished_ = true;
    timer_.stop();
    backend_.synchronize();
    total_s_ += timer_.elapsed_s();
    if (Profiler::instance().enabled()) Profiler::instance().record(name_, start_ns_, Profiler::now_ns());
  }
  // A device error at the end of a phase is thrown, unless the phase is being left by an
  // exception already, which then carries the first error.
  ~PhaseTimer() noexcept(false) {
    try {
      finish();
    } catch (...) {
      if (std::uncaught_exceptions() == uncaught_) throw;
    }
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  Backend& backend_;
  Timer& timer_;
  const char* name_;
  double& total_s_;
  std::int64_t start_ns_;
  int uncaught_ = std::uncaught_exceptions();
  bool finished_ = false;
};

// cuda_graph: eager steps run before the capture, so that everything the step creates lazily
// (gradient buffers, optimiser state, convolution plans, workspaces) exists and the graph only
// reuses it.
constexpr std::int64_t kEagerStepsBeforeCapture = 2;

// Config keys that shape the trajectory: a resumed run must use the values it was trained with.
const char* const kMustMatchOnResume[] = {"batch",     "lr",       "momentum",      "weight_decay",
                                          "optimizer", "schedule", "warmup_steps",  "min_lr",
                                          "seed",      "dtype",    "train_samples", "accumulate"};

}  // namespace

Trainer::Trainer(const TrainConfig& config, DataParallel* parallel)
    : config_(config),
      backend_(choose_backend(config)),
      parallel_(parallel),
      dtype_(parse_dtype(config.dtype)),
      param_dtype_(dtype_ == DType::bf16 || dtype_ == DType::f16 ? DType::f32 : dtype_),
      layout_(parse_memory_format(config.layout)),
      generator_(config.seed) {
  validate_config(config_);
  TL_CHECK(backend_.supports(dtype_), "backend '" + backend_.name() + "' does not support dtype " + config.dtype);
  TL_CHECK(!config_.pin_memory || backend_.pinned_uploads() != nullptr,
           "pin_memory needs a CUDA backend (it page-locks loader buffers for host-to-device copies); backend '" +
               backend_.name() + "' runs on the CPU, where there is no copy");
  if (backend_.device_type() == DeviceType::cpu) {
    TL_CHECK(!config_.tf32, "tf32 needs a CUDA backend (TF32 is a tensor-core math mode); backend '" + backend_.name() +
                                "' runs on the CPU");
  }
  if (config_.cuda_graph) {
    require_graph_capture(backend_);
    TL_CHECK(dtype_ != DType::f16,
             "cuda_graph with dtype f16 is not supported: the loss scaler decides on the host, every step, whether "
             "to skip it (use bf16, which needs no scaler, or f32)");
    TL_CHECK(parallel == nullptr,
             "cuda_graph with data-parallel training is not supported yet: the all-reduce hooks run on the host "
             "while backward runs");
  }
  // Outputs are checked before the run, not after it: a directory given as --trace, or a --save
  // that holds other files, is refused now.
  if (!config_.trace.empty()) check_output_file(trace_path(), "--trace");
  if (!config_.save.empty()) check_checkpoint_dir(config_.save);
  if (config_.threads > 0) backend_.set_num_threads(config_.threads);
  if (MathModes* math = backend_.math_modes()) math->set_tf32(config_.tf32);

  model_ = std::make_unique<SmallCNN>(InitOptions{&generator_, param_dtype_, &backend_});
  model_->set_fused(config_.fuse);
  if (config_.optimizer == "sgd") {
    optimizer_ = std::make_unique<SGD>(model_->named_parameters(),
                                       SgdOptions{config_.lr, config_.momentum, 0.0, config_.weight_decay, false});
  } else {
    AdamWOptions options;
    options.lr = config_.lr;
    options.weight_decay = config_.weight_decay;
    optimizer_ = std::make_unique<AdamW>(model_->named_parameters(), options);
  }
  // Mixed precision: the optimiser writes bf16/f16 working copies of the weights in its step, and
  // autocast uses them instead of casting the f32 masters every forward.
  if (param_dtype_ != dtype_) optimizer_->keep_working_copies(dtype_);
  if (config_.schedule == "warmup_cosine") {
    scheduler_ =
        std::make_unique<WarmupCosineLR>(*optimizer_, config_.lr, config_.warmup_steps, config_.steps, config_.min_lr);
  } else {
    scheduler_ = std::make_unique<ConstantLR>(*optimizer_, config_.lr);
  }
  if (dtype_ == DType::f16) {
    GradScalerOptions scaler_options;
    scaler_options.init_scale = config_.loss_scale_init;
    scaler_options.growth_interval = config_.loss_scale_growth_interval;
    scaler_ = std::make_unique<GradScaler>(scaler_options);
  }
  train_data_ =
      std::make_shared<SyntheticImages>(config_.seed, Split::train, config_.train_samples, config_.decode_cost);
  held_out_data_ = std::make_shared<SyntheticImages>(config_.seed, Split::held_out, config_.eval_samples, 0);
  DataLoaderOptions loader_options;
  loader_options.batch_size = config_.batch;
  loader_options.num_workers = config_.workers;
  loader_options.prefetch = config_.prefetch;
  loader_options.persistent_workers = config_.persistent_workers;
  loader_options.pin_memory = config_.pin_memory;
  loader_options.seed = config_.seed;
  if (parallel_ != nullptr) {
    loader_options.shard_rank = parallel_->rank();
    loader_options.shard_count = parallel_->world_size();
  }
  loader_ = std::make_unique<DataLoader>(train_data_, loader_options, backend_);
  if (parallel_ != nullptr) parallel_->attach(model_->named_parameters());
  if (!config_.resume.empty()) resume(config_.resume);
}

Trainer::~Trainer() = default;

Timer& Trainer::phase_timer(const char* phase) {
  std::unique_ptr<Timer>& timer = phase_timers_[phase];
  if (!timer) timer = backend_.make_timer();
  return *timer;
}

// Copies a batch into the graphs' input. A replayed forward cannot read the label check back
// from the device, so the labels are checked here, on the host.
void Trainer::stage_for_graph(const Batch& batch) {
  TL_PROFILE_SCOPE("graph.stage_input");
  const std::vector<std::int64_t> labels = batch.labels.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    TL_CHECK(labels[i] >= 0 && labels[i] < SmallCNN::kClasses, "cross_entropy: label " + std::to_string(labels[i]) +
                                                                   " at row " + std::to_string(i) + " is outside [0, " +
                                                                   std::to_string(SmallCNN::kClasses) + ")");
  }
  graph_->inputs()[0].copy_(batch.images);
  graph_->inputs()[1].copy_(batch.labels);
}

// One micro-step (the loss scaled by 1/accumulate), captured on this batch.
void Trainer::capture_step(const Batch& staged) {
  graph_ = std::make_unique<StepGraph>(
      backend_, std::vector<Tensor>{staged.images, staged.labels},
      [this](const std::vector<Tensor>& in) { return forward_loss(in[0], in[1]); }, model_->named_parameters());
}

Tensor Trainer::prepare_input(const Tensor& images) const {
  // The reorder to channels_last is real work, done (and timed) inside the forward phase.
  Tensor x = images.contiguous(layout_);
  return param_dtype_ == DType::f32 ? x : x.to(param_dtype_);
}

Tensor Trainer::forward_loss(const Tensor& images, const Tensor& labels) {
  AutocastGuard autocast(param_dtype_ != dtype_ ? dtype_ : DType::f32, optimizer_.get());
  const Tensor loss = cross_entropy(model_->forward(prepare_input(images)), labels);
  // Micro-steps: each loss is scaled by 1/K, so the accumulated gradient is the step's mean.
  return config_.accumulate > 1 ? loss * (1.0 / static_cast<double>(config_.accumulate)) : loss;
}

EvalResult Trainer::evaluate() {
  TL_PROFILE_SCOPE("evaluate");
  NoGradGuard no_grad;
  model_->eval();
  EvalResult result;
  result.step = step_;
  const std::int64_t n = held_out_data_->size();
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::vector<float> images;
  std::vector<std::int64_t> labels;
  for (std::int64_t begin = 0; begin < n; begin += config_.eval_batch) {
    const std::int64_t count = std::min(config_.eval_batch, n - begin);
    images.resize(static_cast<std::size_t>(count * SyntheticImages::kSampleElements));
    labels.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      labels[static_cast<std::size_t>(i)] =
          held_out_data_->get(begin + i, images.data() + i * SyntheticImages::kSampleElements);
    }
    const Tensor x = Tensor::from_host(images.data(), {count, 3, 32, 32}, DType::f32, backend_);
    const Tensor y = Tensor::from_vector(labels, {count}, backend_);
    Tensor logits;
    {
      AutocastGuard autocast(param_dtype_ != dtype_ ? dtype_ : DType::f32, optimizer_.get());
      logits = model_->forward(prepare_input(x));
    }
    loss_sum += cross_entropy(logits.to(DType::f32), y).item() * static_cast<double>(count);
    const auto values = logits.to(DType::f64).to_vector<double>();
    for (std::int64_t i = 0; i < count; ++i) {
      const double* row = values.data() + i * SmallCNN::kClasses;
      const auto predicted = std::max_element(row, row + SmallCNN::kClasses) - row;
      correct += predicted == labels[static_cast<std::size_t>(i)] ? 1 : 0;
    }
  }
  model_->train();
  result.samples = n;
  result.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  result.loss = loss_sum / static_cast<double>(n);
  return result;
}

TrainResult Trainer::train(std::ostream* log) {
  TrainResult result;
  result.first_step = step_;
  const auto wall_start = std::chrono::steady_clock::now();
  if (log) {
    *log << fmt::format("trainlab {} ({}): SmallCNN, {} parameters, backend {} ({} threads), dtype {}, layout {}{}\n",
                        version(), git_describe(), model_->num_parameters(), backend_.name(), backend_.num_threads(),
                        config_.dtype, config_.layout, config_.fuse ? ", fused" : "");
    if (parallel_ != nullptr) {
      *log << fmt::format("data parallel: {}; global batch {} ({} per rank)\n", parallel_->describe(), config_.batch,
                          config_.batch / parallel_->world_size());
    }
    *log << fmt::format("backend: {}\n", backend_.describe());  // the ISA oneDNN chose, before any step
    *log << fmt::format("config: {}\n", config_summary(config_));
    if (step_ > 0) *log << fmt::format("resumed at step {} from {}\n", step_, config_.resume);
    log->flush();
  }

  Profiler& profiler = Profiler::instance();
  const bool tracing = !config_.trace.empty();
  if (tracing) {
    profiler.clear();
    profiler.name_this_thread("main (training)");
    profiler.set_enabled(true);
  }

  PhaseTimes window;  // since the last progress line
  std::int64_t window_steps = 0;
  std::int64_t run_steps = 0;
  const std::int64_t samples_per_step = config_.batch * config_.accumulate;  // over the whole world
  const std::int64_t target = config_.stop_at > 0 ? config_.stop_at : config_.steps;
  while (step_ < target) {
    PhaseTimes phases;
    Batch batch;
    Tensor loss;
    double step_s = 0;
    PhaseTimer step_span(backend_, phase_timer("step"), "step", step_s);
    // Micro-steps: gradients accumulate over `accumulate` batches (each loss scaled by 1/K, so the
    // step's gradient is the mean); data parallel runs communicate on the last one only.
    double loss_sum = 0;
    DdpStepStats ddp;
    // cuda_graph: eager for the first steps of the run, then captured once (untimed: the capture
    // is taken out of the step's time) and replayed.
    const bool replay = config_.cuda_graph && run_steps >= kEagerStepsBeforeCapture;
    double capture_s = 0;
    for (std::int64_t micro = 0; micro < config_.accumulate; ++micro) {
      {
        PhaseTimer t(backend_, phase_timer("data_wait"), "data_wait", phases.data_wait_s);
        batch = loader_->next();
        if (replay && graph_) stage_for_graph(batch);
      }
      if (replay && !graph_) {
        PhaseTimer t(backend_, phase_timer("graph_capture"), "graph_capture", capture_s);
        capture_step(batch);
        stage_for_graph(batch);  // the same batch: its labels checked like every later one
      }
      if (replay) {
        {
          PhaseTimer t(backend_, phase_timer("forward"), "forward", phases.forward_s);
          graph_->forward();
        }
        {
          PhaseTimer t(backend_, phase_timer("backward"), "backward", phases.backward_s);
          graph_->backward();
        }
        loss_sum += graph_->loss().item();
        continue;
      }
      {
        PhaseTimer t(backend_, phase_timer("forward"), "forward", phases.forward_s);
        loss = forward_loss(batch.images, batch.labels);
      }
      const bool sync = micro + 1 == config_.accumulate;
      if (parallel_ != nullptr) parallel_->begin_backward(sync);
      {
        PhaseTimer t(backend_, phase_timer("backward"), "backward", phases.backward_s);
        if (scaler_) {
          scaler_->scale(loss).backward();
        } else {
          loss.backward();
        }
      }
      if (parallel_ != nullptr && sync) {
        PhaseTimer t(backend_, phase_timer("comm_wait"), "comm_wait", phases.comm_s);
        ddp = parallel_->finish_backward();
      }
      loss_sum += loss.item();
    }
    {
      PhaseTimer t(backend_, phase_timer("optimizer"), "optimizer", phases.optimizer_s);
      if (scaler_) {
        if (!scaler_->step(*optimizer_)) ++result.skipped_steps;
      } else {
        optimizer_->step();
      }
      optimizer_->zero_grad();
      scheduler_->step();
    }
    step_span.finish();  // the step span ends with the optimiser phase
    step_s -= capture_s;
    ++step_;
    ++run_steps;
    const double loss_value = loss_sum;  // the mean over the micro-steps (each was scaled by 1/K)
    TL_CHECK(std::isfinite(loss_value), "training diverged: loss is " + std::to_string(loss_value) + " at step " +
                                            std::to_string(step_) + " (try a smaller --lr)");
    result.losses.push_back(loss_value);
    if (run_steps > config_.warmup) {
      result.measured += phases;
      result.step_seconds.push_back(step_s);
      result.ddp.backward_compute_s += ddp.backward_compute_s;
      result.ddp.comm_s += ddp.comm_s;
      result.ddp.overlap_s += ddp.overlap_s;
      result.ddp.exposed_s += ddp.exposed_s;
      result.ddp.bucket_bytes = ddp.bucket_bytes;
      ++result.measured_steps;
    } else {
      ++result.warmup_steps;
    }
    window += phases;
    ++window_steps;

    if (log && (step_ % config_.log_every == 0 || step_ == target)) {
      const double total = window.total();
      *log << fmt::format("step {:>6}/{}  loss {:.4f}  {:>8.1f} samples/s  data-wait {:>5.1f}%  lr {:.4g}{}\n", step_,
                          config_.steps, loss_value,
                          total > 0 ? static_cast<double>(window_steps * samples_per_step) / total : 0.0,
                          total > 0 ? 100.0 * window.data_wait_s / total : 0.0, optimizer_->lr(),
                          scaler_ ? fmt::format("  loss scale {:g}", scaler_->scale_value()) : std::string());
      log->flush();
      window = PhaseTimes{};
      window_steps = 0;
    }
    if (config_.eval_every > 0 && step_ % config_.eval_every == 0 && step_ != target) {
      const EvalResult eval = evaluate();
      result.evals.push_back(eval);
      if (log)
        *log << fmt::format("eval step {}: held-out accuracy {:.2f}% ({} samples), loss {:.4f}\n", eval.step,
                            100 * eval.accuracy, eval.samples, eval.loss);
    }
    if (config_.save_every > 0 && step_ % config_.save_every == 0 && step_ != target) save(config_.save);
  }
  result.last_step = step_;
  if (scaler_) result.loss_scale = scaler_->scale_value();
  if (tracing) {
    profiler.set_enabled(false);
    // One process track per rank, so the ranks' files can be loaded side by side.
    TraceProcess process;
    if (parallel_ != nullptr) {
      process.pid = parallel_->rank();
      process.name = "trainlab rank " + std::to_string(parallel_->rank());
    }
    write_chrome_trace(trace_path(), profiler.take(), profiler.thread_names(), process);
  }
  if (config_.eval_at_end) {
    result.final_eval = evaluate();
    result.evals.push_back(result.final_eval);
  }
  if (!config_.save.empty()) save(config_.save);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const double measured_total = result.measured.total();
  result.samples_per_s =
      measured_total > 0 ? static_cast<double>(result.measured_steps * samples_per_step) / measured_total : 0.0;
  if (log) {
    *log << fmt::format("done: {} steps in {:.1f} s; final loss {:.4f}", run_steps, result.wall_s,
                        result.losses.empty() ? NAN : result.losses.back());
    if (config_.eval_at_end) {
      *log << fmt::format("; held-out accuracy {:.2f}% ({} samples)", 100 * result.final_eval.accuracy,
                          result.final_eval.samples);
    }
    *log << "\n";
    if (scaler_) {
      *log << fmt::format("loss scaling (f16): {} of {} steps skipped for non-finite gradients; scale now {:g}\n",
                          result.skipped_steps, run_steps, scaler_->scale_value());
    }
    if (result.measured_steps > 0) {
      const PhaseTimes& m = result.measured;
      *log << fmt::format(
          "throughput: {:.1f} samples/s over {} steps ({} warm-up steps excluded); data-wait {:.1f}%, forward "
          "{:.1f}%, backward {:.1f}%, {}optimizer {:.1f}%\n",
          result.samples_per_s, result.measured_steps, result.warmup_steps, 100 * m.data_wait_s / measured_total,
          100 * m.forward_s / measured_total, 100 * m.backward_s / measured_total,
          parallel_ != nullptr ? fmt::format("comm wait {:.1f}%, ", 100 * m.comm_s / measured_total) : std::string(),
          100 * m.optimizer_s / measured_total);
      if (parallel_ != nullptr) {
        const DdpStepStats& d = result.ddp;
        const double n = static_cast<double>(result.measured_steps);
        *log << fmt::format(
            "ddp: {}; per step: backward compute {:.2f} ms, communication {:.2f} ms, overlapped {:.2f} ms, exposed "
            "{:.2f} ms\n",
            parallel_->describe(), 1e3 * d.backward_compute_s / n, 1e3 * d.comm_s / n, 1e3 * d.overlap_s / n,
            1e3 * d.exposed_s / n);
      }
    }
    *log << fmt::format("backend after the run: {}\n", backend_.describe());  // with the kernels it picked
    if (!config_.save.empty()) *log << fmt::format("checkpoint: {}\n", config_.save);
    if (tracing)
      *log << fmt::format(
          "trace: {}{} (open in https://ui.perfetto.dev or chrome://tracing)\n", config_.trace,
          parallel_ != nullptr && parallel_->world_size() > 1 ? " (rank 0; rank r writes .rank<r>)" : "");
    log->flush();
  }
  return result;
}

std::string Trainer::trace_path() const {
  // In a data-parallel run every rank traces its own process: rank r > 0 writes NAME.rank<r>.json.
  if (parallel_ == nullptr || parallel_->rank() == 0) return config_.trace;
  const std::string suffix = ".json";
  const std::string& path = config_.trace;
  const bool json =
      path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string stem = json ? path.substr(0, path.size() - suffix.size()) : path;
  return stem + ".rank" + std::to_string(parallel_->rank()) + (json ? suffix : "");
}

void Trainer::save(const std::string& dir) {
  TL_PROFILE_SCOPE("checkpoint.save");
  if (parallel_ != nullptr) {
    // The state is replicated: rank 0 writes once every rank has finished the step, and no rank
    // goes on (or reads it) before the write, completion marker last, is done.
    parallel_->barrier();
    if (parallel_->rank() == 0) save_local(dir);
    parallel_->barrier();
    return;
  }
  save_local(dir);
}

void Trainer::save_local(const std::string& dir) {
  Checkpoint checkpoint;
  checkpoint.model = model_->state_dict();
  checkpoint.optimizer = optimizer_->state_dict();
  checkpoint.scheduler = scheduler_->state_dict();
  checkpoint.loader = loader_->state_dict();
  checkpoint.trainer.integers["step"] = step_;
  checkpoint.trainer.strings["generator"] = generator_.state_string();
  checkpoint.trainer.strings["engine_version"] = git_describe();
  checkpoint.trainer.strings["backend"] = backend_.name();
  if (scaler_) {
    const StateDict scaler = scaler_->state_dict();
    for (const auto& [key, value] : scaler.numbers) checkpoint.trainer.numbers["scaler." + key] = value;
    for (const auto& [key, value] : scaler.integers) checkpoint.trainer.integers["scaler." + key] = value;
  }
  config_to_state(config_, checkpoint.trainer);
  save_checkpoint(dir, checkpoint);
}

void Trainer::resume(const std::string& dir) {
  TL_PROFILE_SCOPE("checkpoint.load");
  const Checkpoint checkpoint = load_checkpoint(dir, backend_);
  const std::string owner = "checkpoint '" + dir + "'";
  StateDict current;
  config_to_state(config_, current);
  for (const char* key : kMustMatchOnResume) {
    const std::string saved = checkpoint.trainer.string(std::string("config.") + key, owner);
    const std::string& now = current.strings.at(std::string("config.") + key);
    TL_CHECK(saved == now, owner + " was trained with " + key + " " + saved + "; this run asks for " + now +
                               " (resume with the same value, or start a new run)");
  }
  const std::int64_t step = checkpoint.trainer.integer("step", owner);
  TL_CHECK(step >= 0 && step <= config_.steps, owner + " is at step " + std::to_string(step) + ", beyond --steps " +
                                                   std::to_string(config_.steps) + " (ask for more steps to continue)");
  TL_CHECK(config_.stop_at == 0 || step <= config_.stop_at,
           owner + " is at step " + std::to_string(step) + ", beyond --stop-at " + std::to_string(config_.stop_at));
  try {
    model_->load_state_dict(checkpoint.model);
    optimizer_->load_state_dict(checkpoint.optimizer);
    scheduler_->load_state_dict(checkpoint.scheduler);
    loader_->load_state_dict(checkpoint.loader);
    generator_.set_state_string(checkpoint.trainer.string("generator", owner));
    if (scaler_) {
      StateDict scaler;
      scaler.numbers["scale"] = checkpoint.trainer.number("scaler.scale", owner);
      for (const char* key : {"growth_tracker", "skipped_steps", "growth_interval"})
        scaler.integers[key] = checkpoint.trainer.integer(std::string("scaler.") + key, owner);
      scaler_->load_state_dict(scaler);
    }
  } catch (const Error& e) {
    throw Error(owner + ": " + e.what());
  }
  // Every step consumes `accumulate` batches and advances the schedule once: the counters must agree.
  const LoaderPosition position = loader_->position();
  const std::int64_t batches = position.epoch * loader_->batches_per_epoch() + position.next_batch;
  TL_CHECK(batches == step * config_.accumulate && scheduler_->last_step() == step,
           owner + " is inconsistent: step " + std::to_string(step) + " of " + std::to_string(config_.accumulate) +
               " micro-steps, but the loader has consumed " + std::to_string(batches) +
               " batches and the schedule is at step " + std::to_string(scheduler_->last_step()));
  step_ = step;
}

}  // namespace trainlab
