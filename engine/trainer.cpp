#include "engine/trainer.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>

#include "backends/device_selection.h"
#include "backends/registry.h"
#include "engine/autograd.h"
#include "engine/checkpoint.h"
#include "engine/fileio.h"
#include "engine/profiler.h"
#include "engine/trace.h"
#include "engine/version.h"

namespace trainlab {

namespace {

Backend& choose_backend(const TrainConfig& config) {
  return get_backend(config.backend.empty() ? default_backend_name() : config.backend);
}

// cuda_graph: eager steps run before the capture, so that everything the step creates lazily
// (gradient buffers, optimiser state, convolution plans, workspaces) exists and the graph only
// reuses it.
constexpr std::int64_t kEagerStepsBeforeCapture = 2;

// Config keys that shape the trajectory: a resumed run must use the values it was trained with.
const char* const kMustMatchOnResume[] = {"batch",         "lr",           "momentum", "weight_decay", "optimizer",
                                          "schedule",      "warmup_steps", "min_lr",   "seed",         "dtype",
                                          "train_samples", "accumulate",   "data",     "augment"};

// Keys each rank may set for itself (how it loads, logs, traces and waits); every other key shapes
// the trajectory or the collectives, and must be the same on every rank.
const char* const kPerRankKeys[] = {"threads",      "workers",    "prefetch",   "persistent_workers", "log_every",
                                    "trace",        "pin_memory", "eval_batch", "eval_every",         "eval_at_end",
                                    "comm_timeout", "ledger",     "cold_cache"};

std::int64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return static_cast<std::int64_t>(h);
}

// Data parallel: every rank must train the same configuration (an MPMD launch with different
// flags per rank would otherwise train, and rank 0 print its own view). One hash over the keys
// that must agree; on a mismatch, one per key, to name the key and the ranks.
void check_config_agrees(const TrainConfig& config, DataParallel& parallel) {
  std::vector<const ConfigField*> shared;
  for (const auto& field : config_fields()) {
    if (std::find(std::begin(kPerRankKeys), std::end(kPerRankKeys), field.key) == std::end(kPerRankKeys))
      shared.push_back(&field);
  }
  std::string all;
  for (const ConfigField* field : shared) all += field->key + "=" + field->get(config) + "\n";
  const std::vector<std::int64_t> everyone = parallel.gather(fnv1a(all));
  if (std::all_of(everyone.begin(), everyone.end(), [&](std::int64_t h) { return h == everyone.front(); })) return;
  std::string problems;
  for (const ConfigField* field : shared) {
    const std::string mine = field->get(config);
    const std::vector<std::int64_t> hashes = parallel.gather(fnv1a(mine));
    std::string same, different;
    for (std::size_t r = 0; r < hashes.size(); ++r) {
      std::string& list = hashes[r] == hashes[static_cast<std::size_t>(parallel.rank())] ? same : different;
      if (!list.empty()) list += ",";
      list += std::to_string(r);
    }
    if (different.empty()) continue;
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict, bug 105329) on a literal + string chain.
    if (!problems.empty()) problems += "; ";
    problems += field->key;
    problems += " is " + quote_value(mine);
    problems += same.find(',') != std::string::npos ? " on ranks " : " on rank ";
    problems += same;
    problems +=
        different.find(',') != std::string::npos ? " and something else on ranks " : " and something else on rank ";
    problems += different;
  }
  throw Error("the ranks disagree on the configuration: " + problems +
              " (every rank must train with the same values; only " + std::string(kPerRankKeys[0]) +
              ", workers, prefetch and the logging keys may differ)");
}

}  // namespace

StopRule accuracy_at_least(double target, int consecutive) {
  TL_CHECK(target > 0 && target <= 1, "stop rule: target accuracy must be in (0, 1], got " + std::to_string(target));
  TL_CHECK(consecutive >= 1, "stop rule: consecutive evaluations must be >= 1, got " + std::to_string(consecutive));
  StopRule rule;
  rule.description = fmt::format("held-out accuracy >= {:g} on {} consecutive evaluation{}", target, consecutive,
                                 consecutive == 1 ? "" : "s");
  rule.should_stop = [target, consecutive](const std::vector<EvalResult>& evals) {
    if (static_cast<int>(evals.size()) < consecutive) return false;
    for (std::size_t i = evals.size() - static_cast<std::size_t>(consecutive); i < evals.size(); ++i) {
      if (evals[i].accuracy < target) return false;
    }
    return true;
  };
  return rule;
}

Trainer::Trainer(const TrainConfig& config, DataParallel* parallel)
    : Trainer(config, smallcnn_task(config), parallel) {}

Trainer::Trainer(const TrainConfig& config, TrainTask task, DataParallel* parallel)
    : config_(config),
      task_(std::move(task)),
      backend_(choose_backend(config)),
      parallel_(parallel),
      generator_(config.seed) {
  validate_config(config_);
  if (parallel_ != nullptr) check_config_agrees(config_, *parallel_);
  TL_CHECK(task_.make_model != nullptr && task_.train_data != nullptr,
           "trainer: the task needs a model factory and training data");
  const DType dtype = config_.dtype;
  const DType param_dtype = dtype == DType::bf16 || dtype == DType::f16 ? DType::f32 : dtype;
  TL_CHECK(!config_.pin_memory || backend_.pinned_uploads() != nullptr,
           "pin_memory needs a CUDA backend (it page-locks loader buffers for host-to-device copies); backend '" +
               backend_.name() + "' runs on the CPU, where there is no copy");
  TL_CHECK(
      !config_.tf32 || backend_.math_modes() != nullptr,
      "tf32 needs a CUDA backend (TF32 is a tensor-core math mode); backend '" + backend_.name() + "' runs on the CPU");
  // Outputs are checked before the run, not after it: a directory given as --trace, or a --save
  // that holds other files, is refused now.
  if (!config_.trace.empty()) check_output_file(trace_path(), "--trace");
  if (!config_.save.empty()) check_checkpoint_dir(config_.save);
  if (!config_.audit_file.empty()) check_output_file(config_.audit_file, "--audit-file");
  if (config_.threads > 0) backend_.set_num_threads(config_.threads);
  if (MathModes* math = backend_.math_modes()) math->set_tf32(config_.tf32);

  model_ = task_.make_model(InitOptions{&generator_, param_dtype, &backend_});
  TL_CHECK(model_ != nullptr, "trainer: the task's model factory returned no model");
  model_->set_recompute(config_.recompute);
  // Data parallel: the replicas start from rank 0's parameters, and with sharded optimiser state
  // (zero: 1) this rank's optimiser is built over its pieces of them.
  if (parallel_ != nullptr) parallel_->attach(model_->named_parameters());
  const NamedTensors optimized = parallel_ != nullptr ? parallel_->optimizer_parameters() : model_->named_parameters();
  const bool sharded = parallel_ != nullptr && parallel_->shards_optimizer_state();
  if (config_.optimizer == OptimizerKind::sgd) {
    optimizer_ =
        std::make_unique<SGD>(optimized, SgdOptions{config_.lr, config_.momentum, 0.0, config_.weight_decay, false});
  } else {
    AdamWOptions options;
    options.lr = config_.lr;
    options.weight_decay = config_.weight_decay;
    optimizer_ = std::make_unique<AdamW>(optimized, options);
  }
  // Mixed precision: the optimiser writes bf16/f16 working copies of the weights in its step, and
  // autocast uses them instead of casting the f32 masters every forward. (Not with sharded state:
  // a rank's optimiser sees only its pieces, and autocast casts the gathered parameters.)
  if (param_dtype != dtype && !sharded) optimizer_->keep_working_copies(dtype);
  if (config_.schedule == ScheduleKind::warmup_cosine) {
    scheduler_ =
        std::make_unique<WarmupCosineLR>(*optimizer_, config_.lr, config_.warmup_steps, config_.steps, config_.min_lr);
  } else {
    scheduler_ = std::make_unique<ConstantLR>(*optimizer_, config_.lr);
  }
  if (dtype == DType::f16) {
    GradScalerOptions scaler_options;
    scaler_options.init_scale = config_.loss_scale_init;
    scaler_options.growth_interval = config_.loss_scale_growth_interval;
    scaler_ = std::make_unique<GradScaler>(scaler_options);
  }
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
  loader_ = std::make_unique<DataLoader>(task_.train_data, loader_options, backend_);
  StepOptions step_options;
  step_options.dtype = dtype;
  step_options.layout = config_.layout;
  step_options.accumulate = config_.accumulate;
  step_options.cuda_graph = config_.cuda_graph;
  step_options.eager_steps_before_capture = kEagerStepsBeforeCapture;
  step_options.num_classes = task_.train_data->num_classes();
  runner_ = std::make_unique<StepRunner>(backend_, *model_, *optimizer_, step_options, scaler_.get(), parallel_);
  if (!config_.resume.empty()) resume(config_.resume);
}

Trainer::~Trainer() = default;

const StepPlan& Trainer::step_plan() const { return runner_->plan(); }

void Trainer::set_callbacks(TrainCallbacks callbacks) {
  TL_CHECK(!callbacks.stop_rule || config_.eval_every > 0,
           "a stop rule (" + callbacks.stop_rule.description +
               ") is asked after each held-out evaluation: set eval_every > 0");
  TL_CHECK(!callbacks.stop_rule || task_.held_out_data != nullptr,
           "a stop rule needs held-out data to evaluate on (the task has none)");
  // Always forwarded, an empty one too: a hook from an earlier set_callbacks must not outlive what
  // it captured.
  if (callbacks.on_loader_worker_start || callbacks_.on_loader_worker_start)
    loader_->set_worker_init(callbacks.on_loader_worker_start);
  callbacks_ = std::move(callbacks);
}

EvalResult Trainer::evaluate() {
  TL_PROFILE_SCOPE("evaluate");
  TL_CHECK(task_.held_out_data != nullptr, "evaluate: the task has no held-out data");
  const Dataset& data = *task_.held_out_data;
  const std::int64_t elements = data.sample_elements(), classes = data.num_classes();
  NoGradGuard no_grad;
  MemoryPhaseScope phase(MemoryPhase::evaluation);
  MemoryCategoryScope category(MemoryCategory::activations);
  model_->eval();
  EvalResult result;
  result.step = step_;
  const std::int64_t n = data.size();
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::vector<float> images;
  std::vector<std::int64_t> labels;
  for (std::int64_t begin = 0; begin < n; begin += config_.eval_batch) {
    const std::int64_t count = std::min(config_.eval_batch, n - begin);
    images.resize(static_cast<std::size_t>(count * elements));
    labels.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      labels[static_cast<std::size_t>(i)] = data.get(begin + i, images.data() + i * elements);
    }
    Shape shape{count};
    for (std::int64_t d : data.sample_shape()) shape.push_back(d);
    Tensor x, y;
    {
      MemoryCategoryScope batch_category(MemoryCategory::data);
      x = Tensor::from_host(images.data(), shape, DType::f32, backend_);
      y = Tensor::from_vector(labels, {count}, backend_);
    }
    const Tensor logits = runner_->forward(x);
    TL_CHECK(logits.dim() == 2 && logits.size(0) == count && logits.size(1) == classes,
             "evaluate: the model's output " + shape_str(logits.shape()) + " does not match " + data.describe() +
                 " (expected [" + std::to_string(count) + ", " + std::to_string(classes) + "])");
    loss_sum += cross_entropy(logits.to(DType::f32), y).item() * static_cast<double>(count);
    const auto values = logits.to(DType::f64).to_vector<double>();
    for (std::int64_t i = 0; i < count; ++i) {
      const double* row = values.data() + i * classes;
      const auto predicted = std::max_element(row, row + classes) - row;
      correct += predicted == labels[static_cast<std::size_t>(i)] ? 1 : 0;
    }
  }
  model_->train();
  result.samples = n;
  result.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  result.loss = loss_sum / static_cast<double>(n);
  return result;
}

void Trainer::log_header(std::ostream& log) const {
  log << fmt::format("trainlab {} ({}): {}, {} parameters, backend {} ({} threads), dtype {}, layout {}{}\n", version(),
                     git_describe(), task_.model_name, model_->num_parameters(), backend_.name(),
                     backend_.num_threads(), dtype_name(config_.dtype), memory_format_name(config_.layout),
                     config_.fuse ? ", fused" : "");
  if (parallel_ != nullptr) {
    log << fmt::format("data parallel: {}; global batch {} ({} per rank)\n", parallel_->describe(), config_.batch,
                       config_.batch / parallel_->world_size());
  }
  log << fmt::format("backend: {}\n", backend_.describe());  // the ISA oneDNN chose, before any step
  // What the planner found, per op: so a reader sees why bf16 is slower on a CPU without native bf16.
  const StepPlan& plan = runner_->plan();
  log << fmt::format("compute on {}{}: {}\n", plan.backend, plan.isa.empty() ? "" : " (ISA " + plan.isa + ")",
                     plan.summary());
  if (!plan.emulated().empty()) log << fmt::format("emulated: {}\n", plan.emulated());
  log << fmt::format("config: {}\n", config_summary(config_));
  log << fmt::format("data: {}{}\n", task_.train_data->describe(),
                     task_.held_out_data ? "; held out: " + task_.held_out_data->describe() : std::string());
  if (callbacks_.stop_rule) {
    log << fmt::format("stop rule: {} (evaluated every {} steps; step cap {})\n", callbacks_.stop_rule.description,
                       config_.eval_every, config_.stop_at > 0 ? config_.stop_at : config_.steps);
  }
  if (step_ > 0) log << fmt::format("resumed at step {} from {}\n", step_, config_.resume);
  log.flush();
}

TrainResult Trainer::train(std::ostream* log) {
  TrainResult result;
  result.first_step = step_;
  result.eval_every = config_.eval_every;
  result.stop_rule = callbacks_.stop_rule.description;
  const auto wall_start = std::chrono::steady_clock::now();
  if (log) log_header(*log);

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
  result.step_cap = target;
  result.stopped_by = "step cap";
  result.memory_device = backend_.device_type();
  reset_memory_peaks(result.memory_device);
  while (step_ < target) {
    // One step, then the schedule, then the callbacks.
    if (run_steps == config_.warmup) reset_memory_peaks(result.memory_device);  // the first measured step
    const double lr = optimizer_->lr();
    StepResult r;
    if (config_.audit && run_steps == 0) {
      // The precision audit's record: every op of the run's first step, with its dtypes.
      OpPrecisionScope record;
      r = runner_->step([this] { return loader_->next(); });
      result.op_precision = record.ops();
    } else {
      r = runner_->step([this] { return loader_->next(); });
    }
    scheduler_->step();
    ++step_;
    ++run_steps;
    if (!r.nonfinite.empty()) {
      if (config_.on_nonfinite == NonFinitePolicy::stop) {
        throw TrainingDiverged(fmt::format(
            "training diverged at step {}: {} is NaN or inf; the update was not applied and nothing was saved (the "
            "last checkpoint, if any, is the last good state). Lower --lr, or pass --on-nonfinite skip to skip such "
            "steps",
            step_, r.nonfinite));
      }
      ++result.nonfinite_steps;
      ++nonfinite_total_;
      if (log) {
        *log << fmt::format("step {}: {} is NaN or inf; update skipped ({} so far, --on-nonfinite skip)\n", step_,
                            r.nonfinite, result.nonfinite_steps);
      }
    } else if (r.skipped) {
      ++result.skipped_steps;
    }
    result.losses.push_back(r.loss);
    const bool measured = run_steps > config_.warmup;
    if (measured) {
      result.measured += r.phases;
      result.step_seconds.push_back(r.seconds);
      result.ddp.backward_compute_s += r.ddp.backward_compute_s;
      result.ddp.comm_s += r.ddp.comm_s;
      result.ddp.overlap_s += r.ddp.overlap_s;
      result.ddp.exposed_s += r.ddp.exposed_s;
      result.ddp.bucket_bytes = r.ddp.bucket_bytes;
      result.ddp.device_clock = r.ddp.device_clock;
      ++result.measured_steps;
    } else {
      ++result.warmup_steps;
    }
    window += r.phases;
    ++window_steps;

    if (log && (step_ % config_.log_every == 0 || step_ == target)) {
      const double total = window.total();
      *log << fmt::format("step {:>6}/{}  loss {:.4f}  {:>8.1f} samples/s  data-wait {:>5.1f}%  lr {:.4g}{}\n", step_,
                          config_.steps, r.loss,
                          total > 0 ? static_cast<double>(window_steps * samples_per_step) / total : 0.0,
                          total > 0 ? 100.0 * window.data_wait_s / total : 0.0, optimizer_->lr(),
                          scaler_ ? fmt::format("  loss scale {:g}", scaler_->scale_value()) : std::string());
      log->flush();
      window = PhaseTimes{};
      window_steps = 0;
    }
    if (callbacks_.on_step) {
      callbacks_.on_step(StepReport{step_, r.loss, lr, r.phases, r.seconds, measured, r.skipped, r.nonfinite});
    }
    if (config_.eval_every > 0 && step_ % config_.eval_every == 0 && step_ != target) {
      const EvalResult eval = evaluate();
      result.evals.push_back(eval);
      if (log)
        *log << fmt::format("eval step {}: held-out accuracy {:.2f}% ({} samples), loss {:.4f}\n", eval.step,
                            100 * eval.accuracy, eval.samples, eval.loss);
      if (callbacks_.on_eval) callbacks_.on_eval(eval);
      if (callbacks_.stop_rule && callbacks_.stop_rule.should_stop(result.evals)) {
        result.stopped_by = "stop rule";
        if (log) *log << fmt::format("stop rule met at step {}: {}\n", step_, callbacks_.stop_rule.description);
        break;
      }
    }
    if (config_.save_every > 0 && step_ % config_.save_every == 0 && step_ != target) save(config_.save);
  }
  result.last_step = step_;
  result.memory = memory_usage(result.memory_device);
  if (scaler_) result.loss_scale = scaler_->scale_value();
  if (tracing) {
    profiler.set_enabled(false);
    // One process track per rank, so the ranks' files can be loaded side by side.
    TraceProcess process;
    process.device = backend_.describe() + "; " + describe_process_placement();
    if (parallel_ != nullptr) {
      process.pid = parallel_->rank();
      process.name = "trainlab rank " + std::to_string(parallel_->rank());
    }
    write_chrome_trace(trace_path(), profiler.take(), profiler.thread_names(), process);
  }
  if (config_.eval_at_end && task_.held_out_data != nullptr) {
    if (!result.evals.empty() && result.evals.back().step == step_) {
      result.final_eval = result.evals.back();  // a stop rule ended the run right after evaluating
    } else {
      result.final_eval = evaluate();
      result.evals.push_back(result.final_eval);
      if (callbacks_.on_eval) callbacks_.on_eval(result.final_eval);
    }
  }
  if (!config_.save.empty()) save(config_.save);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const double measured_total = result.measured.total();
  result.samples_per_s =
      measured_total > 0 ? static_cast<double>(result.measured_steps * samples_per_step) / measured_total : 0.0;
  if (log) log_summary(*log, result, run_steps);
  return result;
}

void Trainer::log_summary(std::ostream& log, const TrainResult& result, std::int64_t run_steps) const {
  const double measured_total = result.measured.total();
  log << fmt::format("done: {} steps in {:.1f} s; final loss {:.4f}", run_steps, result.wall_s,
                     result.losses.empty() ? NAN : result.losses.back());
  if (config_.eval_at_end && task_.held_out_data != nullptr) {
    log << fmt::format("; held-out accuracy {:.2f}% ({} samples)", 100 * result.final_eval.accuracy,
                       result.final_eval.samples);
  }
  log << "\n";
  if (scaler_) {
    log << fmt::format("loss scaling (f16): {} of {} steps skipped for non-finite gradients; scale now {:g}\n",
                       result.skipped_steps, run_steps, scaler_->scale_value());
  }
  if (result.nonfinite_steps > 0) {
    log << fmt::format(
        "non-finite: {} of {} steps had a NaN or inf loss or gradient and were skipped "
        "(--on-nonfinite skip)\n",
        result.nonfinite_steps, run_steps);
  }
  if (result.measured_steps > 0) {
    const PhaseTimes& m = result.measured;
    log << fmt::format(
        "throughput: {:.1f} samples/s over {} steps ({} warm-up steps excluded); data-wait {:.1f}%, forward "
        "{:.1f}%, backward {:.1f}%, {}optimizer {:.1f}%\n",
        result.samples_per_s, result.measured_steps, result.warmup_steps, 100 * m.data_wait_s / measured_total,
        100 * m.forward_s / measured_total, 100 * m.backward_s / measured_total,
        parallel_ != nullptr ? fmt::format("comm wait {:.1f}%, ", 100 * m.comm_s / measured_total) : std::string(),
        100 * m.optimizer_s / measured_total);
    if (parallel_ != nullptr) {
      const DdpStepStats& d = result.ddp;
      const double n = static_cast<double>(result.measured_steps);
      log << fmt::format(
          "ddp: {}; per step: backward compute {:.2f} ms, communication {:.2f} ms, overlapped {:.2f} ms, exposed "
          "{:.2f} ms\n",
          parallel_->describe(), 1e3 * d.backward_compute_s / n, 1e3 * d.comm_s / n, 1e3 * d.overlap_s / n,
          1e3 * d.exposed_s / n);
    }
  }
  if (run_steps > 0) log << memory_summary_line(result.memory, result.memory_device) << "\n";
  log << fmt::format("backend after the run: {}\n", backend_.describe());  // with the kernels it picked
  if (!config_.save.empty()) log << fmt::format("checkpoint: {}\n", config_.save);
  if (!config_.trace.empty())
    log << fmt::format("trace: {}{} (open in https://ui.perfetto.dev or chrome://tracing)\n", config_.trace,
                       parallel_ != nullptr && parallel_->world_size() > 1 ? " (rank 0; rank r writes .rank<r>)" : "");
  log.flush();
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

PrecisionAudit Trainer::precision_audit(const TrainResult& run, const TrainResult& reference) const {
  PrecisionAudit a;
  a.compute_dtype = dtype_name(config_.dtype);
  const NamedTensors params = model_->named_parameters();
  a.master_dtype = params.empty() ? "-" : dtype_name(params.front().second.dtype());
  a.gradient_dtype = a.master_dtype;
  const StateDict state = optimizer_->state_dict();
  a.optimizer_state_dtype = state.tensors.empty()
                                ? std::string("none (") + optimizer_->name() + " keeps no buffers here)"
                                : dtype_name(state.tensors.begin()->second.dtype());
  if (parallel_ != nullptr && parallel_->shards_optimizer_state()) a.optimizer_state_dtype += ", sharded (ZeRO-1)";
  const bool sharded = parallel_ != nullptr && parallel_->shards_optimizer_state();
  if ((config_.dtype == DType::bf16 || config_.dtype == DType::f16) && !sharded) {
    a.optimizer_state_dtype += fmt::format("; {} working copies of the weights written by each step", a.compute_dtype);
  }
  a.ops = run.op_precision;
  a.gradient_reduction = parallel_ != nullptr ? parallel_->gradient_reduction() : "none (one process)";
  a.loss_scaler = scaler_ != nullptr;
  if (scaler_) {
    a.scale_init = config_.loss_scale_init;
    a.growth_interval = config_.loss_scale_growth_interval;
    a.scale_final = scaler_->scale_value();
    a.scaler_skipped = run.skipped_steps;
  }
  a.finite_checks = scaler_ == nullptr;
  a.on_nonfinite = config_.on_nonfinite == NonFinitePolicy::stop ? "stop the run" : "skip the update";
  a.nonfinite_steps = run.nonfinite_steps;
  a.steps = run.last_step;
  a.eval_samples = run.final_eval.samples;
  a.final_loss = run.losses.empty() ? 0.0 : run.losses.back();
  a.accuracy = run.final_eval.accuracy;
  a.reference_is_the_run = &run == &reference;
  a.reference_loss = reference.losses.empty() ? 0.0 : reference.losses.back();
  a.reference_accuracy = reference.final_eval.accuracy;
  return a;
}

void Trainer::save(const std::string& dir) {
  TL_PROFILE_SCOPE("checkpoint.save");
  if (parallel_ != nullptr) {
    // Rank 0 writes once every rank has finished the step, and no rank goes on (or reads it)
    // before the write, completion marker last, is done. Sharded optimiser state is gathered
    // first: the checkpoint holds the whole state, as an unsharded run writes it.
    StateDict optimizer_state = parallel_->gather_optimizer_state(optimizer_->state_dict());
    parallel_->barrier();
    if (parallel_->rank() == 0) save_local(dir, optimizer_state);
    parallel_->barrier();
    return;
  }
  save_local(dir, optimizer_->state_dict());
}

void Trainer::save_local(const std::string& dir, const StateDict& optimizer_state) {
  Checkpoint checkpoint;
  checkpoint.model = model_->state_dict();
  checkpoint.optimizer = optimizer_state;
  checkpoint.scheduler = scheduler_->state_dict();
  checkpoint.loader = loader_->state_dict();
  checkpoint.trainer.integers["step"] = step_;
  checkpoint.trainer.integers["nonfinite_skipped"] = nonfinite_total_;
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
    // A key newer than the checkpoint had its default then.
    const std::string name = std::string("config.") + key;
    const std::string saved = checkpoint.trainer.strings.count(name) > 0 ? checkpoint.trainer.string(name, owner)
                                                                         : config_field(key).get(TrainConfig{});
    const std::string& now = current.strings.at(name);
    TL_CHECK(saved == now, owner + " was trained with " + key + " " + saved + "; this run asks for " + now +
                               " (resume with the same value, or start a new run)");
  }
  const std::int64_t step = checkpoint.trainer.integer("step", owner);
  TL_CHECK(step >= 0 && step <= config_.steps, owner + " is at step " + std::to_string(step) + ", beyond --steps " +
                                                   std::to_string(config_.steps) + " (ask for more steps to continue)");
  TL_CHECK(config_.stop_at == 0 || step <= config_.stop_at,
           owner + " is at step " + std::to_string(step) + ", beyond --stop-at " + std::to_string(config_.stop_at));
  if (!config_.allow_nonfinite_checkpoint) {
    // Weights or optimiser state holding NaN or inf would only propagate: refused unless asked for.
    NamedTensors tensors = checkpoint.model;
    for (const auto& [name, tensor] : checkpoint.optimizer.tensors) tensors.emplace_back(name, tensor);
    for (const auto& [name, tensor] : tensors) {
      const std::vector<double> values = tensor.to(DType::f64).to_vector<double>();
      const auto bad = std::find_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); });
      TL_CHECK(bad == values.end(), owner + ": tensor '" + name + "' holds " + std::to_string(*bad) + " at element " +
                                        std::to_string(bad - values.begin()) +
                                        " (resume anyway with --allow-nonfinite-checkpoint)");
    }
  }
  std::int64_t scaler_skipped = 0;
  try {
    model_->load_state_dict(checkpoint.model);
    optimizer_->load_state_dict(parallel_ != nullptr ? parallel_->shard_optimizer_state(checkpoint.optimizer)
                                                     : checkpoint.optimizer);
    scheduler_->load_state_dict(checkpoint.scheduler);
    loader_->load_state_dict(checkpoint.loader);
    generator_.set_state_string(checkpoint.trainer.string("generator", owner));
    if (scaler_) {
      StateDict scaler;
      scaler.numbers["scale"] = checkpoint.trainer.number("scaler.scale", owner);
      for (const char* key : {"growth_tracker", "skipped_steps", "growth_interval"})
        scaler.integers[key] = checkpoint.trainer.integer(std::string("scaler.") + key, owner);
      scaler_->load_state_dict(scaler);
      scaler_skipped = scaler_->skipped_steps();
    }
  } catch (const Error& e) {
    throw Error(owner + ": " + e.what());
  }
  nonfinite_total_ = checkpoint.trainer.integers.count("nonfinite_skipped")
                         ? checkpoint.trainer.integer("nonfinite_skipped", owner)
                         : 0;
  // The learning rate the state records is the schedule's at that step: a state.json edited to
  // another value is refused, not obeyed.
  const double saved_lr = checkpoint.optimizer.number("lr", owner + " optimizer");
  TL_CHECK(saved_lr == scheduler_->current_lr(), owner + ": the optimizer's lr " + std::to_string(saved_lr) +
                                                     " is not the schedule's at step " + std::to_string(step) + " (" +
                                                     std::to_string(scheduler_->current_lr()) + ")");
  // Every step consumes `accumulate` batches and advances the schedule once: the counters must agree.
  const LoaderPosition position = loader_->position();
  const std::int64_t batches = position.epoch * loader_->batches_per_epoch() + position.next_batch;
  TL_CHECK(batches == step * config_.accumulate && scheduler_->last_step() == step,
           owner + " is inconsistent: step " + std::to_string(step) + " of " + std::to_string(config_.accumulate) +
               " micro-steps, but the loader has consumed " + std::to_string(batches) +
               " batches and the schedule is at step " + std::to_string(scheduler_->last_step()));
  // Every step either updated the weights or was skipped (the f16 scaler, or --on-nonfinite skip):
  // a step count rewound against the optimiser's own count is refused.
  if (optimizer_->updates() >= 0) {
    const std::int64_t expected = step - scaler_skipped - nonfinite_total_;
    TL_CHECK(optimizer_->updates() == expected, owner + " is inconsistent: step " + std::to_string(step) + " with " +
                                                    std::to_string(scaler_skipped + nonfinite_total_) +
                                                    " skipped, but the optimizer has applied " +
                                                    std::to_string(optimizer_->updates()) + " updates");
  }
  step_ = step;
}

}  // namespace trainlab
