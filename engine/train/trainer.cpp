#include "engine/train/trainer.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>

#include "backends/device_selection.h"
#include "backends/registry.h"
#include "engine/core/autograd.h"
#include "engine/data/token_windows.h"
#include "engine/instrument/profiler.h"
#include "engine/instrument/trace.h"
#include "engine/io/fileio.h"
#include "engine/io/version.h"
#include "engine/train/checkpoint.h"
#include "engine/train/generate.h"
#include "engine/train/resume.h"
#include "engine/train/train_observers.h"

namespace trainlab {

namespace {

// Config keys that shape the trajectory: a resumed run must use the values it was trained with.
const char* const kMustMatchOnResume[] = {
    "batch", "lr",    "momentum", "weight_decay", "optimizer",     "schedule",   "warmup_steps", "min_lr", "seed",
    "dtype", "beta1", "beta2",    "grad_clip",    "train_samples", "accumulate", "data",         "augment"};

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

// The text vocabulary the task's token data decode with (null: not text).
const TextCorpus* task_text(const TrainTask& task) {
  const auto* windows = dynamic_cast<const TokenWindows*>(task.train_data.get());
  return windows != nullptr ? windows->text() : nullptr;
}

// What --record keeps of one sample: its input (f32 values or i64 tokens) and its labels.
std::uint64_t recorded_bytes_per_sample(const Dataset& data) {
  const std::int64_t input = data.sample_kind() == SampleKind::tokens ? 8 : 4;
  return static_cast<std::uint64_t>(data.sample_elements() * input + data.labels_per_sample() * 8);
}

}  // namespace

namespace {

// A rule met when `reached` holds for each of the last `consecutive` evaluations.
StopRule consecutive_rule(std::string description, int consecutive, std::function<bool(const EvalResult&)> reached) {
  TL_CHECK(consecutive >= 1, "stop rule: consecutive evaluations must be >= 1, got " + std::to_string(consecutive));
  StopRule rule;
  rule.description =
      fmt::format("{} on {} consecutive evaluation{}", description, consecutive, consecutive == 1 ? "" : "s");
  rule.should_stop = [consecutive, test = std::move(reached)](const std::vector<EvalResult>& evals) {
    if (static_cast<int>(evals.size()) < consecutive) return false;
    return std::all_of(evals.end() - consecutive, evals.end(), test);
  };
  return rule;
}

}  // namespace

StopRule accuracy_at_least(double target, int consecutive) {
  TL_CHECK(target > 0 && target <= 1, "stop rule: target accuracy must be in (0, 1], got " + std::to_string(target));
  return consecutive_rule(fmt::format("held-out accuracy >= {:g}", target), consecutive,
                          [target](const EvalResult& e) { return e.accuracy >= target; });
}

StopRule loss_at_most(double target, int consecutive) {
  TL_CHECK(std::isfinite(target) && target > 0,
           "stop rule: target loss must be finite and > 0, got " + std::to_string(target));
  return consecutive_rule(fmt::format("held-out loss <= {:g}", target), consecutive,
                          [target](const EvalResult& e) { return e.loss <= target; });  // a NaN never reaches it
}

Trainer::Trainer(const TrainConfig& config, DataParallel* parallel) : Trainer(config, model_task(config), parallel) {}

Trainer::Trainer(const TrainConfig& config, TrainTask task, DataParallel* parallel)
    : config_(config), task_(std::move(task)), parallel_(parallel), generator_(config.seed) {
  validate_config(config_);
  if (parallel_ != nullptr) check_config_agrees(config_, *parallel_);
  TL_CHECK(task_.make_model != nullptr && task_.train_data != nullptr,
           "trainer: the task needs a model factory and training data");
  // Outputs are checked before the run, not after it: a directory given as --trace, or a --save
  // that holds other files, is refused now.
  if (!config_.reporting.trace.empty()) check_output_file(trace_path(), "--trace");
  if (!config_.checkpoint.save.empty()) check_checkpoint_dir(config_.checkpoint.save);
  if (!config_.reporting.audit_file.empty()) check_output_file(config_.reporting.audit_file, "--audit-file");
  if (!config_.reporting.record.empty()) {
    check_output_file(config_.reporting.record, "--record");
    TL_CHECK(parallel_ == nullptr,
             "--record writes one process's run; under data parallel each rank trains its own "
             "share of every batch (run it at world 1)");
    const std::int64_t steps = config_.stop_at > 0 ? config_.stop_at : config_.steps;
    check_host_memory(static_cast<std::uint64_t>(steps) * static_cast<std::uint64_t>(config_.batch) *
                          recorded_bytes_per_sample(*task_.train_data),
                      "--record of " + std::to_string(steps) + " steps", "it holds every batch: record fewer steps");
  }
  run_ = make_run(config_, task_, generator_, parallel_);
  const DataConfig& d = config_.data;
  DataLoaderOptions loader_options;
  loader_options.batch_size = config_.batch;
  loader_options.num_workers = d.workers;
  loader_options.prefetch = d.prefetch;
  loader_options.persistent_workers = d.persistent_workers;
  loader_options.pin_memory = config_.execution.pin_memory;
  loader_options.seed = config_.seed;
  if (parallel_ != nullptr) {
    loader_options.shard_rank = parallel_->rank();
    loader_options.shard_count = parallel_->world_size();
  }
  loader_ = std::make_unique<DataLoader>(task_.train_data, loader_options, *run_.backend);
  if (!config_.checkpoint.resume.empty()) resume(config_.checkpoint.resume);
}

Trainer::~Trainer() = default;

const StepPlan& Trainer::step_plan() const { return run_.runner->plan(); }

void Trainer::set_callbacks(TrainCallbacks callbacks) {
  TL_CHECK(!callbacks.stop_rule || config_.reporting.eval_every > 0,
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

std::vector<double> EvalResult::per_class_accuracy() const {
  std::vector<double> by_class;
  if (confusion.size() != static_cast<std::size_t>(classes * classes)) return by_class;
  for (std::int64_t k = 0; k < classes; ++k) {
    std::int64_t total = 0;
    for (std::int64_t j = 0; j < classes; ++j) total += confusion[static_cast<std::size_t>(k * classes + j)];
    by_class.push_back(total == 0 ? std::nan("")
                                  : static_cast<double>(confusion[static_cast<std::size_t>(k * classes + k)]) /
                                        static_cast<double>(total));
  }
  return by_class;
}

namespace {

// Held-out samples [begin, begin + count) as tensors on `backend`: the inputs (f32 values, or token
// ids) and a label per output row (a class, or the next token at every position).
std::pair<Tensor, Tensor> held_out_batch(const Dataset& data, std::int64_t begin, std::int64_t count,
                                         std::vector<std::int64_t>& labels, Backend& backend) {
  const std::int64_t elements = data.sample_elements(), per_sample = data.labels_per_sample();
  labels.resize(static_cast<std::size_t>(count * per_sample));
  Shape shape{count};
  for (std::int64_t d : data.sample_shape()) shape.push_back(d);
  MemoryCategoryScope batch_category(MemoryCategory::data);
  if (data.sample_kind() == SampleKind::tokens) {
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(count * elements));
    for (std::int64_t i = 0; i < count; ++i)
      data.get_tokens(begin + i, 0, tokens.data() + i * elements, labels.data() + i * per_sample);
    return {Tensor::from_vector(tokens, shape, backend), Tensor::from_vector(labels, {count * per_sample}, backend)};
  }
  std::vector<float> values(static_cast<std::size_t>(count * elements));
  for (std::int64_t i = 0; i < count; ++i)
    labels[static_cast<std::size_t>(i)] = data.get(begin + i, values.data() + i * elements);
  return {Tensor::from_host(values.data(), shape, DType::f32, backend), Tensor::from_vector(labels, {count}, backend)};
}

}  // namespace

// Accuracy and mean loss over every output row: a sample's class, or for token data every
// position's next token (the loss per token, whose exp is the perplexity).
EvalResult Trainer::evaluate() {
  TL_PROFILE_SCOPE("evaluate");
  TL_CHECK(task_.held_out_data != nullptr, "evaluate: the task has no held-out data");
  const Dataset& data = *task_.held_out_data;
  const std::int64_t classes = data.num_classes(), per_sample = data.labels_per_sample();
  NoGradGuard no_grad;
  MemoryPhaseScope phase(MemoryPhase::evaluation);
  MemoryCategoryScope category(MemoryCategory::activations);
  run_.model->eval();
  EvalResult result;
  result.step = step_;
  result.classes = classes;
  const bool confusion = data.sample_kind() == SampleKind::values && classes <= EvalResult::kMaxConfusionClasses;
  if (confusion) result.confusion.assign(static_cast<std::size_t>(classes * classes), 0);
  const std::int64_t n = data.size();
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::vector<std::int64_t> labels;
  for (std::int64_t begin = 0; begin < n; begin += config_.data.eval_batch) {
    const std::int64_t count = std::min(config_.data.eval_batch, n - begin), rows = count * per_sample;
    const auto [x, y] = held_out_batch(data, begin, count, labels, *run_.backend);
    const Tensor logits = run_.runner->forward(x);
    TL_CHECK(logits.dim() == 2 && logits.size(0) == rows && logits.size(1) == classes,
             "evaluate: the model's output " + shape_str(logits.shape()) + " does not match " + data.describe() +
                 " (expected [" + std::to_string(rows) + ", " + std::to_string(classes) + "])");
    loss_sum += cross_entropy(logits.to(DType::f32), y).item() * static_cast<double>(rows);
    const auto values = logits.to(DType::f64).to_vector<double>();
    for (std::int64_t i = 0; i < rows; ++i) {
      const double* row = values.data() + i * classes;
      const auto predicted = std::max_element(row, row + classes) - row;
      const std::int64_t label = labels[static_cast<std::size_t>(i)];
      correct += predicted == label ? 1 : 0;
      if (confusion) result.confusion[static_cast<std::size_t>(label * classes + predicted)] += 1;
    }
  }
  run_.model->train();
  result.samples = n;
  const auto total_rows = static_cast<double>(n * per_sample);
  result.accuracy = static_cast<double>(correct) / total_rows;
  result.loss = loss_sum / total_rows;
  return result;
}

TrainResult Trainer::train(std::ostream* log) {
  const auto wall_start = std::chrono::steady_clock::now();
  const std::int64_t target = config_.stop_at > 0 ? config_.stop_at : config_.steps;
  TrainResult result;
  result.first_step = step_;
  result.eval_every = config_.reporting.eval_every;
  result.stop_rule = callbacks_.stop_rule.description;
  result.step_cap = target;
  result.stopped_by = "step cap";
  const auto observers = train_observers(*this, callbacks_, log);
  for (const auto& o : observers) o->on_start(result);
  for (std::int64_t run_step = 0; step_ < target; ++run_step) {
    // One step, then the schedule, then what watches the run (any of them may stop it).
    for (const auto& o : observers) o->before_step(run_step);
    const double lr = run_.optimizer->lr();
    const StepResult r = run_.runner->step([this] {
      Batch batch = loader_->next();
      if (batch_tap_) batch_tap_(batch);
      return batch;
    });
    run_.scheduler->step();
    ++step_;
    const StepReport report{step_,     r.loss,      lr,
                            r.phases,  r.seconds,   run_step >= config_.reporting.warmup,
                            r.skipped, r.nonfinite, r.grad_norm};
    const bool stop = std::any_of(observers.begin(), observers.end(),
                                  [&](const auto& o) { return o->after_step(report, r, result); });
    if (stop) break;
  }
  result.last_step = step_;
  for (const auto& o : observers) o->on_end(result);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  for (const auto& o : observers) o->on_summary(result);
  return result;
}

std::string Trainer::trace_path() const {
  // In a data-parallel run every rank traces its own process: rank r > 0 writes NAME.rank<r>.json.
  if (parallel_ == nullptr || parallel_->rank() == 0) return config_.reporting.trace;
  const std::string suffix = ".json";
  const std::string& path = config_.reporting.trace;
  const bool json =
      path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string stem = json ? path.substr(0, path.size() - suffix.size()) : path;
  return stem + ".rank" + std::to_string(parallel_->rank()) + (json ? suffix : "");
}

PrecisionAudit Trainer::precision_audit(const TrainResult& run, const TrainResult& reference) const {
  PrecisionAudit a;
  a.compute_dtype = dtype_name(config_.execution.dtype);
  const NamedTensors params = run_.model->named_parameters();
  a.master_dtype = params.empty() ? "-" : dtype_name(params.front().second.dtype());
  a.gradient_dtype = a.master_dtype;
  const StateDict state = run_.optimizer->state_dict();
  a.optimizer_state_dtype = state.tensors.empty()
                                ? std::string("none (") + run_.optimizer->name() + " keeps no buffers here)"
                                : dtype_name(state.tensors.begin()->second.dtype());
  if (parallel_ != nullptr && parallel_->shards_optimizer_state())
    a.optimizer_state_dtype += fmt::format(", sharded (ZeRO-{})", parallel_->zero_stage());
  const bool sharded = parallel_ != nullptr && parallel_->shards_optimizer_state();
  if ((config_.execution.dtype == DType::bf16 || config_.execution.dtype == DType::f16) && !sharded) {
    a.optimizer_state_dtype += fmt::format("; {} working copies of the weights written by each step", a.compute_dtype);
  }
  a.ops = run.op_precision;
  a.gradient_reduction = parallel_ != nullptr ? parallel_->gradient_reduction() : "none (one process)";
  a.loss_scaler = run_.scaler != nullptr;
  if (run_.scaler) {
    a.scale_init = config_.execution.loss_scale_init;
    a.growth_interval = config_.execution.loss_scale_growth_interval;
    a.scale_final = run_.scaler->scale_value();
    a.scaler_skipped = run.skipped_steps;
  }
  a.finite_checks = run_.scaler == nullptr;
  a.on_nonfinite = config_.execution.on_nonfinite == NonFinitePolicy::stop ? "stop the run" : "skip the update";
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
    StateDict optimizer_state = parallel_->gather_optimizer_state(run_.optimizer->state_dict());
    FullParameters whole(parallel_);  // ZeRO-3: the parameters whole on rank 0 too
    parallel_->barrier();
    if (parallel_->rank() == 0) save_local(dir, optimizer_state);
    parallel_->barrier();
    return;
  }
  save_local(dir, run_.optimizer->state_dict());
}

void Trainer::save_local(const std::string& dir, const StateDict& optimizer_state) {
  Checkpoint checkpoint;
  checkpoint.model = run_.model->state_dict();
  checkpoint.optimizer = optimizer_state;
  checkpoint.scheduler = run_.scheduler->state_dict();
  checkpoint.loader = loader_->state_dict();
  checkpoint.trainer.integers["step"] = step_;
  checkpoint.trainer.integers["nonfinite_skipped"] = nonfinite_total_;
  checkpoint.trainer.strings["generator"] = generator_.state_string();
  // Where dropout's stream stands (its seed is the run's: every rank's offset is the same).
  checkpoint.trainer.integers["dropout_offset"] = static_cast<std::int64_t>(dropout_stream().offset);
  checkpoint.trainer.strings["engine_version"] = git_describe();
  checkpoint.trainer.strings["backend"] = run_.backend->name();
  checkpoint.trainer.strings["model"] = task_.model_name;
  // Token data from text: the vocabulary, so that `trainlab generate` needs no data set.
  if (const TextCorpus* text = task_text(task_)) {
    const TextVocabularyRecord record = record_vocabulary(*text);
    checkpoint.trainer.strings["vocabulary.kind"] = record.kind;
    checkpoint.trainer.strings["vocabulary.symbols"] = record.symbols;
  }
  if (run_.scaler) {
    const StateDict scaler = run_.scaler->state_dict();
    for (const auto& [key, value] : scaler.numbers) checkpoint.trainer.numbers["scaler." + key] = value;
    for (const auto& [key, value] : scaler.integers) checkpoint.trainer.integers["scaler." + key] = value;
  }
  config_to_state(config_, checkpoint.trainer);
  save_checkpoint(dir, checkpoint);
}

void Trainer::resume(const std::string& dir) {
  TL_PROFILE_SCOPE("checkpoint.load");
  const Checkpoint checkpoint = load_checkpoint(dir, *run_.backend);
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
  if (const TextCorpus* text = task_text(task_);
      text != nullptr && checkpoint.trainer.strings.count("vocabulary.kind")) {
    const TextVocabularyRecord now = record_vocabulary(*text);
    TL_CHECK(checkpoint.trainer.strings.at("vocabulary.kind") == now.kind &&
                 checkpoint.trainer.strings.count("vocabulary.symbols") &&
                 checkpoint.trainer.strings.at("vocabulary.symbols") == now.symbols,
             owner + " was trained on another vocabulary than data set " + config_.data.dir + "'s (" +
                 std::to_string(text->symbols.size()) + " " + now.kind +
                 " symbols): its token ids would mean other characters (train on the data set it was trained on)");
  }
  const ResumedCounters counters = restore_run(checkpoint, owner, config_, run_, generator_, parallel_);
  const std::int64_t step = counters.step;
  TL_CHECK(step <= config_.steps, owner + " is at step " + std::to_string(step) + ", beyond --steps " +
                                      std::to_string(config_.steps) + " (ask for more steps to continue)");
  TL_CHECK(config_.stop_at == 0 || step <= config_.stop_at,
           owner + " is at step " + std::to_string(step) + ", beyond --stop-at " + std::to_string(config_.stop_at));
  try {
    loader_->load_state_dict(checkpoint.loader);
  } catch (const Error& e) {
    throw Error(owner + ": " + e.what());
  }
  const LoaderPosition position = loader_->position();
  check_position(step, config_.execution.accumulate,
                 position.epoch * loader_->batches_per_epoch() + position.next_batch, run_.scheduler->last_step(),
                 owner);
  nonfinite_total_ = counters.nonfinite_total;
  step_ = step;
}

}  // namespace trainlab
