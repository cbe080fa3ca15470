#include "engine/train/train_observers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>

#include "backends/device_selection.h"
#include "backends/registry.h"
#include "engine/data/token_windows.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/precision_audit.h"
#include "engine/instrument/profiler.h"
#include "engine/instrument/trace.h"
#include "engine/io/safetensors.h"
#include "engine/io/text.h"
#include "engine/io/version.h"
#include "engine/nn/model_registry.h"
#include "engine/train/generate.h"
#include "engine/train/trainer.h"

namespace trainlab {

namespace {

std::int64_t step_cap(const TrainConfig& config) { return config.stop_at > 0 ? config.stop_at : config.steps; }

// A step whose loss or gradient is NaN or inf: the run stops (TrainingDiverged, nothing saved), or
// the skip is counted and said. A step f16's scaler skipped is counted apart.
class NonFinitePolicyObserver final : public TrainObserver {
 public:
  NonFinitePolicyObserver(Trainer& trainer, std::ostream* log) : trainer_(trainer), log_(log) {}
  bool after_step(const StepReport& report, const StepResult& r, TrainResult& result) override {
    if (r.nonfinite.empty()) {
      if (r.skipped) ++result.skipped_steps;
      return false;
    }
    if (trainer_.config().execution.on_nonfinite == NonFinitePolicy::stop) {
      throw TrainingDiverged(fmt::format(
          "training diverged at step {}: {} is NaN or inf; the update was not applied and nothing was saved (the "
          "last checkpoint, if any, is the last good state). Lower --lr, or pass --on-nonfinite skip to skip such "
          "steps",
          report.step, r.nonfinite));
    }
    ++result.nonfinite_steps;
    trainer_.count_nonfinite();
    if (log_) {
      *log_ << fmt::format("step {}: {} is NaN or inf; update skipped ({} so far, --on-nonfinite skip)\n", report.step,
                           r.nonfinite, result.nonfinite_steps);
    }
    return false;
  }

 private:
  Trainer& trainer_;
  std::ostream* log_;
};

// Losses, and throughput over the measured steps (warm-up excluded and counted): phase totals,
// every step's time, DDP's communication, and tensor memory from the first measured step.
class ThroughputObserver final : public TrainObserver {
 public:
  explicit ThroughputObserver(Trainer& trainer) : trainer_(trainer) {}
  void on_start(TrainResult& result) override {
    result.memory_device = trainer_.backend().device_type();
    reset_memory_peaks(result.memory_device);
  }
  void before_step(std::int64_t run_step) override {
    if (run_step == trainer_.config().reporting.warmup) reset_memory_peaks(trainer_.backend().device_type());
  }
  bool after_step(const StepReport& report, const StepResult& r, TrainResult& result) override {
    result.losses.push_back(r.loss);
    if (!report.measured) {
      ++result.warmup_steps;
      return false;
    }
    result.measured += r.phases;
    result.step_seconds.push_back(r.seconds);
    result.ddp.backward_compute_s += r.ddp.backward_compute_s;
    result.ddp.comm_s += r.ddp.comm_s;
    result.ddp.overlap_s += r.ddp.overlap_s;
    result.ddp.exposed_s += r.ddp.exposed_s;
    result.ddp.bucket_bytes = r.ddp.bucket_bytes;
    result.ddp.gather_bytes = r.ddp.gather_bytes;
    result.ddp.gather_wait_s += r.ddp.gather_wait_s;
    result.ddp.device_clock = r.ddp.device_clock;
    ++result.measured_steps;
    return false;
  }
  void on_end(TrainResult& result) override {
    result.memory = memory_usage(result.memory_device);
    if (const GradScaler* scaler = trainer_.scaler()) result.loss_scale = scaler->scale_value();
    const TrainConfig& c = trainer_.config();
    const double measured_total = result.measured.total();
    const std::int64_t samples_per_step = c.batch * c.execution.accumulate;  // over the whole world
    result.samples_per_s =
        measured_total > 0 ? static_cast<double>(result.measured_steps * samples_per_step) / measured_total : 0.0;
  }

 private:
  Trainer& trainer_;
};

// The precision audit's record: every op of the run's first step, with its dtypes.
class AuditRecordObserver final : public TrainObserver {
 public:
  void before_step(std::int64_t run_step) override {
    if (run_step == 0) scope_.emplace();
  }
  bool after_step(const StepReport&, const StepResult&, TrainResult& result) override {
    if (scope_) {
      result.op_precision = scope_->ops();
      scope_.reset();
    }
    return false;
  }

 private:
  std::optional<OpPrecisionScope> scope_;
};

// The run's profiler spans as a Chrome trace, one process track per rank.
class TraceObserver final : public TrainObserver {
 public:
  explicit TraceObserver(Trainer& trainer) : trainer_(trainer) {}
  void on_start(TrainResult&) override {
    Profiler& profiler = Profiler::instance();
    profiler.clear();
    profiler.name_this_thread("main (training)");
    profiler.set_enabled(true);
  }
  void on_end(TrainResult&) override {
    Profiler& profiler = Profiler::instance();
    profiler.set_enabled(false);
    TraceProcess process;
    process.device = trainer_.backend().describe() + "; " + describe_process_placement();
    if (DataParallel* parallel = trainer_.parallel()) {
      process.pid = parallel->rank();
      process.name = "trainlab rank " + std::to_string(parallel->rank());
    }
    write_chrome_trace(trainer_.trace_path(), profiler.take(), profiler.thread_names(), process);
  }

 private:
  Trainer& trainer_;
};

namespace {

// A held-out evaluation in words: its accuracy, or for token data its loss per token, the
// perplexity and the next-token accuracy.
std::string eval_text(const EvalResult& eval, const Dataset& data) {
  if (data.sample_kind() == SampleKind::tokens)
    return fmt::format("held-out loss {:.4f} (perplexity {:.2f}), next-token accuracy {:.2f}% ({} windows)", eval.loss,
                       std::exp(eval.loss), 100 * eval.accuracy, eval.samples);
  return fmt::format("held-out accuracy {:.2f}% ({} samples), loss {:.4f}", 100 * eval.accuracy, eval.samples,
                     eval.loss);
}

// Per second: samples (right-aligned in `width`), and for token data the tokens too.
std::string rate_text(double samples_per_s, const Dataset& data, int width = 0) {
  if (data.sample_kind() != SampleKind::tokens) return fmt::format("{:>{}.1f} samples/s", samples_per_s, width);
  return fmt::format("{:>{}.1f} samples/s ({:.0f} tokens/s)", samples_per_s, width,
                     samples_per_s * static_cast<double>(data.sample_elements()));
}

// A token model trained on text: 200 tokens sampled after a newline (or the vocabulary's first
// symbol), seeded by the run's seed, as the run's last line of evidence; "" when not text.
std::string text_sample(Trainer& trainer) {
  const auto* windows = dynamic_cast<const TokenWindows*>(trainer.task().train_data.get());
  if (windows == nullptr || windows->text() == nullptr) return "";
  const TextCorpus& text = *windows->text();
  const TrainConfig& c = trainer.config();
  const bool newline = std::binary_search(text.symbols.begin(), text.symbols.end(), std::uint32_t{'\n'});
  const std::vector<std::int32_t> prompt = newline ? text.encode("\n") : std::vector<std::int32_t>{0};
  GenerateOptions o;
  o.seed = c.seed;
  o.context = windows->context();
  const std::vector<std::int32_t> ids = generate_tokens(trainer.model(), prompt, windows->num_classes(), o);
  std::string out;
  for (std::int32_t id : ids) out += text.text_of(id);
  return fmt::format("sample ({} tokens after {}, seed {}; trainlab generate --checkpoint DIR for more):\n{}\n",
                     o.tokens, newline ? "a newline" : "token 0", c.seed, escape_invalid_utf8(out));
}

}  // namespace

// The header, a progress line every log_every steps (and at the last), and the summary.
class ProgressLogObserver final : public TrainObserver {
 public:
  ProgressLogObserver(Trainer& trainer, const TrainCallbacks& callbacks, std::ostream& log)
      : trainer_(trainer), callbacks_(callbacks), log_(log) {}
  void on_start(TrainResult&) override { header(); }
  bool after_step(const StepReport& report, const StepResult& r, TrainResult&) override {
    const TrainConfig& c = trainer_.config();
    window_ += r.phases;
    ++window_steps_;
    ++run_steps_;
    if (report.step % c.reporting.log_every != 0 && report.step != step_cap(c)) return false;
    const double total = window_.total();
    const std::int64_t samples_per_step = c.batch * c.execution.accumulate;
    const GradScaler* scaler = trainer_.scaler();
    log_ << fmt::format("step {:>6}/{}  loss {:.4f}  {}  data-wait {:>5.1f}%  lr {:.4g}{}{}\n", report.step, c.steps,
                        r.loss,
                        rate_text(total > 0 ? static_cast<double>(window_steps_ * samples_per_step) / total : 0.0,
                                  *trainer_.task().train_data, 8),
                        total > 0 ? 100.0 * window_.data_wait_s / total : 0.0, trainer_.optimizer().lr(),
                        scaler ? fmt::format("  loss scale {:g}", scaler->scale_value()) : std::string(),
                        r.grad_norm >= 0 ? fmt::format("  grad norm {:.3g}", r.grad_norm) : std::string());
    log_.flush();
    window_ = PhaseTimes{};
    window_steps_ = 0;
    return false;
  }
  void on_summary(const TrainResult& result) override { summary(result); }

 private:
  void header();
  void summary(const TrainResult& result);

  Trainer& trainer_;
  const TrainCallbacks& callbacks_;
  std::ostream& log_;
  PhaseTimes window_;  // since the last progress line
  std::int64_t window_steps_ = 0, run_steps_ = 0;
};

void ProgressLogObserver::header() {
  const TrainConfig& c = trainer_.config();
  Backend& backend = trainer_.backend();
  log_ << fmt::format("trainlab {} ({}): {}, {} parameters, backend {} ({} threads), dtype {}, layout {}{}\n",
                      version(), git_describe(), trainer_.task().model_name, trainer_.model().num_parameters(),
                      backend.name(), backend.num_threads(), dtype_name(c.execution.dtype),
                      memory_format_name(c.execution.layout), c.execution.fuse ? ", fused" : "");
  if (DataParallel* parallel = trainer_.parallel()) {
    log_ << fmt::format("data parallel: {}; global batch {} ({} per rank)\n", parallel->describe(), c.batch,
                        c.batch / parallel->world_size());
  }
  log_ << fmt::format("backend: {}\n", backend.describe());  // the ISA oneDNN chose, before any step
  // What the planner found, per op: so a reader sees why bf16 is slower on a CPU without native bf16.
  const StepPlan& plan = trainer_.step_plan();
  log_ << fmt::format("compute on {}{}: {}\n", plan.backend, plan.isa.empty() ? "" : " (ISA " + plan.isa + ")",
                      plan.summary());
  if (!plan.emulated().empty()) log_ << fmt::format("emulated: {}\n", plan.emulated());
  log_ << fmt::format("config: {}\n", config_summary(c));
  const TrainTask& task = trainer_.task();
  log_ << fmt::format("data: {}; {}\n", task.train_data->describe(),
                      task.held_out_data ? "held out: " + task.held_out_data->describe()
                                         : std::string("no held-out data: no evaluation"));
  if (callbacks_.stop_rule) {
    log_ << fmt::format("stop rule: {} (evaluated every {} steps; step cap {})\n", callbacks_.stop_rule.description,
                        c.reporting.eval_every, step_cap(c));
  }
  if (trainer_.step() > 0) log_ << fmt::format("resumed at step {} from {}\n", trainer_.step(), c.checkpoint.resume);
  log_.flush();
}

namespace {

// The final evaluation by class: each class's accuracy (with its held-out count), and where the data
// names its classes (real data) the confusion matrix, up to 20 classes.
std::string held_out_by_class(const EvalResult& eval, const std::vector<std::string>& names) {
  const std::vector<double> accuracy = eval.per_class_accuracy();
  const std::int64_t k = eval.classes;
  const auto name = [&](std::int64_t c) {
    return c < static_cast<std::int64_t>(names.size()) ? names[c] : "class " + std::to_string(c);
  };
  const auto count = [&](std::int64_t row, std::int64_t col) {
    return eval.confusion[static_cast<std::size_t>(row * k + col)];
  };
  std::string text = "held-out by class:";
  for (std::int64_t c = 0; c < k; ++c) {
    std::int64_t total = 0;
    for (std::int64_t j = 0; j < k; ++j) total += count(c, j);
    text += fmt::format(
        "{} {} {}", c == 0 ? "" : ",", name(c),
        total == 0 ? std::string("(none held out)") : fmt::format("{:.1f}% of {}", 100 * accuracy[c], total));
  }
  text += "\n";
  if (names.empty() || k > 20) return text;
  std::size_t width = 0;
  for (const auto& n : names) width = std::max(width, n.size());
  text += "confusion matrix (rows: true class, columns: predicted class, counts):\n";
  text += fmt::format("{:>{}}", "", width + 5);
  for (std::int64_t j = 0; j < k; ++j) text += fmt::format(" {:>5}", j);
  text += "\n";
  for (std::int64_t c = 0; c < k; ++c) {
    text += fmt::format("{:>3} {:<{}} ", c, name(c), width + 1);
    for (std::int64_t j = 0; j < k; ++j) text += fmt::format(" {:>5}", count(c, j));
    text += "\n";
  }
  return text;
}

}  // namespace

void ProgressLogObserver::summary(const TrainResult& result) {
  const TrainConfig& c = trainer_.config();
  const double measured_total = result.measured.total();
  log_ << fmt::format("done: {} steps in {:.1f} s; final loss {:.4f}", run_steps_, result.wall_s,
                      result.losses.empty() ? NAN : result.losses.back());
  if (c.reporting.eval_at_end && trainer_.task().held_out_data != nullptr) {
    log_ << "; " << eval_text(result.final_eval, *trainer_.task().held_out_data);
  }
  log_ << "\n";
  if (c.reporting.eval_at_end && trainer_.task().held_out_data != nullptr && !result.final_eval.confusion.empty())
    log_ << held_out_by_class(result.final_eval, trainer_.task().held_out_data->class_names());
  if (c.reporting.eval_at_end && run_steps_ > 0) log_ << text_sample(trainer_);
  if (const GradScaler* scaler = trainer_.scaler()) {
    log_ << fmt::format("loss scaling (f16): {} of {} steps skipped for non-finite gradients; scale now {:g}\n",
                        result.skipped_steps, run_steps_, scaler->scale_value());
  }
  if (result.nonfinite_steps > 0) {
    log_ << fmt::format(
        "non-finite: {} of {} steps had a NaN or inf loss or gradient and were skipped "
        "(--on-nonfinite skip)\n",
        result.nonfinite_steps, run_steps_);
  }
  DataParallel* parallel = trainer_.parallel();
  if (result.measured_steps > 0) {
    const PhaseTimes& m = result.measured;
    log_ << fmt::format(
        "throughput: {} over {} steps ({} warm-up steps excluded); data-wait {:.1f}%, forward "
        "{:.1f}%, backward {:.1f}%, {}optimizer {:.1f}%\n",
        rate_text(result.samples_per_s, *trainer_.task().train_data), result.measured_steps, result.warmup_steps,
        100 * m.data_wait_s / measured_total, 100 * m.forward_s / measured_total, 100 * m.backward_s / measured_total,
        parallel != nullptr ? fmt::format("comm wait {:.1f}%, ", 100 * m.comm_s / measured_total) : std::string(),
        100 * m.optimizer_s / measured_total);
    if (parallel != nullptr) {
      const DdpStepStats& d = result.ddp;
      const double n = static_cast<double>(result.measured_steps);
      log_ << fmt::format(
          "ddp: {}; per step: backward compute {:.2f} ms, communication {:.2f} ms, overlapped {:.2f} ms, exposed "
          "{:.2f} ms\n",
          parallel->describe(), 1e3 * d.backward_compute_s / n, 1e3 * d.comm_s / n, 1e3 * d.overlap_s / n,
          1e3 * d.exposed_s / n);
    }
  }
  if (run_steps_ > 0) log_ << memory_summary_line(result.memory, result.memory_device) << "\n";
  log_ << fmt::format("backend after the run: {}\n", trainer_.backend().describe());  // with the kernels it picked
  if (!c.checkpoint.save.empty()) log_ << fmt::format("checkpoint: {}\n", c.checkpoint.save);
  if (!c.reporting.trace.empty())
    log_ << fmt::format("trace: {}{} (open in https://ui.perfetto.dev or chrome://tracing)\n", c.reporting.trace,
                        parallel != nullptr && parallel->world_size() > 1 ? " (rank 0; rank r writes .rank<r>)" : "");
  log_.flush();
}

// The driver's callback after each step.
class CallbackObserver final : public TrainObserver {
 public:
  explicit CallbackObserver(const TrainCallbacks& callbacks) : callbacks_(callbacks) {}
  bool after_step(const StepReport& report, const StepResult&, TrainResult&) override {
    callbacks_.on_step(report);
    return false;
  }

 private:
  const TrainCallbacks& callbacks_;
};

// Held-out evaluation every eval_every steps (not at the last: the final one follows), the driver's
// on_eval, and the stop rule; the final evaluation at the end.
class EvaluationObserver final : public TrainObserver {
 public:
  EvaluationObserver(Trainer& trainer, const TrainCallbacks& callbacks, std::ostream* log)
      : trainer_(trainer), callbacks_(callbacks), log_(log) {}
  bool after_step(const StepReport& report, const StepResult&, TrainResult& result) override {
    const TrainConfig& c = trainer_.config();
    if (c.reporting.eval_every <= 0 || report.step % c.reporting.eval_every != 0 || report.step == step_cap(c))
      return false;
    const EvalResult eval = trainer_.evaluate();
    result.evals.push_back(eval);
    if (log_) *log_ << fmt::format("eval step {}: {}\n", eval.step, eval_text(eval, *trainer_.task().held_out_data));
    if (callbacks_.on_eval) callbacks_.on_eval(eval);
    if (!callbacks_.stop_rule || !callbacks_.stop_rule.should_stop(result.evals)) return false;
    result.stopped_by = "stop rule";
    if (log_) *log_ << fmt::format("stop rule met at step {}: {}\n", report.step, callbacks_.stop_rule.description);
    return true;
  }
  void on_end(TrainResult& result) override {
    if (!trainer_.config().reporting.eval_at_end || trainer_.task().held_out_data == nullptr) return;
    if (!result.evals.empty() && result.evals.back().step == trainer_.step()) {
      result.final_eval = result.evals.back();  // a stop rule ended the run right after evaluating
      return;
    }
    result.final_eval = trainer_.evaluate();
    result.evals.push_back(result.final_eval);
    if (callbacks_.on_eval) callbacks_.on_eval(result.final_eval);
  }

 private:
  Trainer& trainer_;
  const TrainCallbacks& callbacks_;
  std::ostream* log_;
};

// A checkpoint every save_every steps (not at the last) and at the end.
class CheckpointObserver final : public TrainObserver {
 public:
  explicit CheckpointObserver(Trainer& trainer) : trainer_(trainer) {}
  bool after_step(const StepReport& report, const StepResult&, TrainResult&) override {
    const CheckpointConfig& k = trainer_.config().checkpoint;
    if (k.save_every > 0 && report.step % k.save_every == 0 && report.step != step_cap(trainer_.config()))
      trainer_.save(k.save);
    return false;
  }
  void on_end(TrainResult&) override {
    if (!trainer_.config().checkpoint.save.empty()) trainer_.save(trainer_.config().checkpoint.save);
  }

 private:
  Trainer& trainer_;
};

// `record`: the initial parameters and buffers ("init.NAME"), every batch the steps take
// ("inputs.K", "labels.K", in order), each optimiser step's loss and learning rate ("loss", "lr",
// f64), written at the end with what the replay needs to know in the metadata.
class RecordObserver final : public TrainObserver {
 public:
  explicit RecordObserver(Trainer& trainer) : trainer_(trainer) {}
  // The tap points at this observer: a run that throws before on_end must not leave it behind for
  // the trainer's next train().
  ~RecordObserver() override { trainer_.tap_batches(nullptr); }
  RecordObserver(const RecordObserver&) = delete;
  RecordObserver& operator=(const RecordObserver&) = delete;
  void on_start(TrainResult&) override {
    Backend& host = get_backend("reference");
    for (const auto& [name, tensor] : trainer_.model().state_dict())
      tensors_.emplace_back("init." + name, tensor.to(host).clone());
    trainer_.tap_batches([this, &host](const Batch& batch) {  // copied: the loader reuses its buffers
      const std::string k = std::to_string(batches_++);
      tensors_.emplace_back("inputs." + k, batch.inputs.to(host).clone());
      tensors_.emplace_back("labels." + k, batch.labels.to(host).clone());
    });
  }
  bool after_step(const StepReport& report, const StepResult&, TrainResult&) override {
    loss_.push_back(report.loss);
    lr_.push_back(report.lr);
    return false;
  }
  void on_end(TrainResult&) override {
    trainer_.tap_batches(nullptr);
    Backend& host = get_backend("reference");
    const auto steps = static_cast<std::int64_t>(loss_.size());
    tensors_.emplace_back("loss", Tensor::from_vector(loss_, {steps}, host));
    tensors_.emplace_back("lr", Tensor::from_vector(lr_, {steps}, host));
    const TrainConfig& c = trainer_.config();
    std::string no_decay;
    for (const auto& [name, tensor] : trainer_.model().named_parameters())
      if (!trainer_.model().decays(name)) no_decay += (no_decay.empty() ? "" : ",") + name;
    write_safetensors(c.reporting.record, tensors_,
                      {{"tool", "trainlab train --record"},
                       {"version", version() + " (" + git_describe() + ")"},
                       {"model", c.model.name},
                       {"model_options", model_options_text(c.model.options)},
                       {"backend", trainer_.backend().name()},
                       {"dtype", dtype_name(c.execution.dtype)},
                       {"layout", memory_format_name(c.execution.layout)},
                       {"fuse", c.execution.fuse ? "true" : "false"},
                       {"optimizer", trainer_.optimizer().name()},
                       {"momentum", fmt::format("{}", c.optimizer.momentum)},
                       {"weight_decay", fmt::format("{}", c.optimizer.weight_decay)},
                       {"beta1", fmt::format("{}", c.optimizer.beta1)},
                       {"beta2", fmt::format("{}", c.optimizer.beta2)},
                       {"grad_clip", fmt::format("{}", c.optimizer.grad_clip)},
                       {"no_decay", no_decay},
                       {"accumulate", std::to_string(c.execution.accumulate)},
                       {"batches", std::to_string(batches_)},
                       {"seed", std::to_string(c.seed)}});
  }

 private:
  Trainer& trainer_;
  NamedTensors tensors_;
  std::int64_t batches_ = 0;
  std::vector<double> loss_, lr_;
};

}  // namespace

std::vector<std::unique_ptr<TrainObserver>> train_observers(Trainer& trainer, const TrainCallbacks& callbacks,
                                                            std::ostream* log) {
  const TrainConfig& c = trainer.config();
  std::vector<std::unique_ptr<TrainObserver>> list;
  list.push_back(std::make_unique<NonFinitePolicyObserver>(trainer, log));
  list.push_back(std::make_unique<ThroughputObserver>(trainer));
  if (c.reporting.audit) list.push_back(std::make_unique<AuditRecordObserver>());
  if (!c.reporting.trace.empty()) list.push_back(std::make_unique<TraceObserver>(trainer));
  if (log != nullptr) list.push_back(std::make_unique<ProgressLogObserver>(trainer, callbacks, *log));
  if (callbacks.on_step) list.push_back(std::make_unique<CallbackObserver>(callbacks));
  list.push_back(std::make_unique<EvaluationObserver>(trainer, callbacks, log));
  list.push_back(std::make_unique<CheckpointObserver>(trainer));
  if (!c.reporting.record.empty()) list.push_back(std::make_unique<RecordObserver>(trainer));
  return list;
}

}  // namespace trainlab
