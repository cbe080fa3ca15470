#include "engine/train/step.h"

#include <cmath>
#include <cstring>
#include <exception>

#include "engine/core/autocast.h"
#include "engine/core/autograd.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/profiler.h"

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

// Times one phase with the backend's own timer and synchronises the device at its end, so that
// an asynchronous backend does not look faster than it is and the next phase starts on an idle
// device; records a profiler span.
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

}  // namespace

StepPlan plan_step(const Backend& backend, const Module& model, const StepOptions& options) {
  const bool mixed = options.dtype == DType::bf16 || options.dtype == DType::f16;
  const DType param = mixed ? DType::f32 : options.dtype;
  const bool channels_last = options.layout == MemoryFormat::channels_last;
  StepPlan plan;
  plan.backend = backend.name();
  plan.isa = backend.isa();
  auto ask = [&](BackendOp op, DType dtype, bool nhwc) {
    for (const PlannedOp& seen : plan.ops) {
      if (seen.op == op && seen.dtype == dtype && seen.channels_last == nhwc) return;
    }
    const OpSupport support = backend.supports_op(op, dtype, nhwc);
    if (!support.runs()) throw Unsupported(unsupported_message(backend, op, dtype, nhwc, support));
    plan.ops.push_back({op, dtype, nhwc, support});
  };
  // The model's ops in the compute dtype (autocast's low dtype: the matrix ops cast to it, and the
  // ops after them follow); the 4-D ones in the run's layout.
  // (The matrix ops first: they are the ones whose support varies with the ISA.)
  const std::set<BackendOp> used = model.ops_used();
  std::vector<BackendOp> order;
  for (BackendOp op : {BackendOp::conv2d, BackendOp::linear}) {
    if (used.count(op)) order.push_back(op);
  }
  for (BackendOp op : used) {
    if (op != BackendOp::conv2d && op != BackendOp::linear) order.push_back(op);
  }
  for (BackendOp op : order) {
    const bool four_d = op == BackendOp::conv2d || op == BackendOp::max_pool2d;
    ask(op, options.dtype, four_d && channels_last);
  }
  // The step's own: the casts and copies (f32 batches, autocast's casts), the loss (in f32 under
  // autocast), the loss scaler's unscale and the optimiser on the master weights.
  ask(BackendOp::elementwise, options.dtype, false);
  ask(BackendOp::elementwise, param, false);
  ask(BackendOp::cross_entropy, mixed ? DType::f32 : options.dtype, false);
  if (options.dtype == DType::f16) ask(BackendOp::unscale, param, false);
  ask(BackendOp::optimizer, param, false);
  return plan;
}

std::string StepPlan::emulated() const {
  std::string out;
  for (const PlannedOp& p : ops) {
    if (p.support.level != Support::emulated) continue;
    out += (out.empty() ? "" : "; ") + std::string(backend_op_name(p.op)) + " " + dtype_name(p.dtype);
    if (!p.support.how.empty()) out += " (" + p.support.how + ")";
  }
  return out;
}

std::string StepPlan::summary() const {
  std::string out;
  for (const PlannedOp& p : ops) {
    out += (out.empty() ? "" : ", ") + std::string(backend_op_name(p.op)) + " " + dtype_name(p.dtype) + " " +
           support_name(p.support.level);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> StepPlan::paths() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const PlannedOp& p : ops)
    out.emplace_back(std::string(backend_op_name(p.op)) + " " + dtype_name(p.dtype), support_name(p.support.level));
  return out;
}

StepRunner::StepRunner(Backend& backend, Module& model, Optimizer& optimizer, const StepOptions& options,
                       GradScaler* scaler, DataParallel* parallel)
    : backend_(backend),
      model_(model),
      optimizer_(optimizer),
      options_(options),
      scaler_(scaler),
      parallel_(parallel),
      param_dtype_(options.dtype == DType::bf16 || options.dtype == DType::f16 ? DType::f32 : options.dtype),
      plan_(plan_step(backend, model, options)) {
  TL_CHECK(options.accumulate >= 1, "step: accumulate must be >= 1, got " + std::to_string(options.accumulate));
  TL_CHECK(options.dtype != DType::f16 || scaler != nullptr, "step: dtype f16 needs a loss scaler (GradScaler)");
  if (options.cuda_graph) {
    require_graph_capture(backend);
    TL_CHECK(options.eager_steps_before_capture >= 1,
             "step: cuda_graph needs at least one eager step before the capture (its buffers must exist)");
    TL_CHECK(scaler == nullptr,
             "cuda_graph with dtype f16 is not supported: the loss scaler decides on the host, every step, whether "
             "to skip it (use bf16, which needs no scaler, or f32)");
    TL_CHECK(parallel == nullptr,
             "cuda_graph with data-parallel training is not supported yet: the all-reduce hooks run on the host "
             "while backward runs");
  }
  TL_CHECK(
      scaler == nullptr || parallel == nullptr || !parallel->shards_optimizer_state(),
      "dtype f16 with zero: 1, 2 or 3 is not supported: the loss scaler checks the gradients it unscales, and each "
      "rank holds only its shard of them (use bf16, which needs no scaler, or zero: 0)");
}

StepRunner::~StepRunner() = default;

Timer& StepRunner::timer(const char* phase) {
  std::unique_ptr<Timer>& t = timers_[phase];
  if (!t) t = backend_.make_timer();
  return *t;
}

DType StepRunner::autocast_dtype() const { return param_dtype_ != options_.dtype ? options_.dtype : DType::f32; }

Tensor StepRunner::model_forward(const Tensor& inputs) {
  if (parallel_ != nullptr && parallel_->shards_parameters()) return sharded_forward(inputs);
  // Token ids go in as they are: no layout, no cast.
  if (inputs.dtype() == DType::i64) return model_.forward(inputs);
  // The reorder to channels_last is real work, done (and timed) inside the forward phase, by the
  // model where it can do without (Module::forward_in).
  if (param_dtype_ != DType::f32) return model_.forward(inputs.contiguous(options_.layout).to(param_dtype_));
  return model_.forward_in(inputs, options_.layout);
}

Tensor StepRunner::sharded_forward(const Tensor& inputs) {
  if (!parts_taken_) {
    parts_ = model_.parts();
    parts_taken_ = true;
  }
  // The batch as model_forward hands it to the model (parts[0] takes it in the step's layout).
  Tensor h = inputs;
  if (inputs.dtype() != DType::i64) {
    h = inputs.contiguous(options_.layout);
    if (param_dtype_ != DType::f32) h = h.to(param_dtype_);
  }
  if (parts_.empty()) {
    parallel_->before_part(0);
    return parallel_->after_part(0, model_.forward(h));
  }
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    parallel_->before_part(static_cast<int>(i));
    h = parallel_->after_part(static_cast<int>(i), parts_[i].forward(h));
  }
  return h;
}

Tensor StepRunner::forward(const Tensor& inputs) {
  MemoryCategoryScope category(MemoryCategory::activations);
  AutocastGuard autocast(autocast_dtype(), &optimizer_);
  return model_forward(inputs);
}

Tensor StepRunner::forward_loss(const Tensor& inputs, const Tensor& labels) {
  AutocastGuard autocast(autocast_dtype(), &optimizer_);  // cross_entropy runs in f32 under it
  // A token batch's targets [B, T] against the logits of every position [B * T, vocab].
  const Tensor targets = labels.dim() > 1 ? labels.reshape({-1}) : labels;
  const Tensor loss = cross_entropy(model_forward(inputs), targets);
  // Micro-steps: each loss is scaled by 1/K, so the accumulated gradient is the step's mean.
  return options_.accumulate > 1 ? loss * (1.0 / static_cast<double>(options_.accumulate)) : loss;
}

// Copies a batch into the graphs' input. A replayed forward cannot read the label check back
// from the device, so the labels are checked here, on the host.
void StepRunner::stage_for_graph(const Batch& batch) {
  TL_PROFILE_SCOPE("graph.stage_input");
  if (options_.num_classes > 0) {
    const std::vector<std::int64_t> labels = batch.labels.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < labels.size(); ++i) {
      TL_CHECK(labels[i] >= 0 && labels[i] < options_.num_classes,
               "cross_entropy: label " + std::to_string(labels[i]) + " at row " + std::to_string(i) +
                   " is outside [0, " + std::to_string(options_.num_classes) + ")");
    }
  }
  graph_->inputs()[0].copy_(batch.inputs);
  graph_->inputs()[1].copy_(batch.labels);
}

namespace {

void check_weights_not_frozen(Backend& backend) {
  const FrozenWeights* frozen = backend.frozen_weights();
  TL_CHECK(frozen == nullptr || !frozen->frozen(),
           "step: backend '" + backend.name() +
               "' holds the weights frozen for inference (FrozenWeightsScope); a "
               "training step would change them under what it keeps: end the scope first");
}

// The optimiser's update, or none when the step found a non-finite value (result.nonfinite, here
// or, with sharded optimiser state, on another rank); the gradients are cleared either way.
void apply_or_skip_update(Optimizer& optimizer, GradScaler* scaler, DataParallel* parallel, StepResult& result) {
  if (parallel != nullptr && parallel->shards_optimizer_state()) {
    // Each rank checked only its shard of the gradient: the ranks skip together or not at all.
    const bool here = !result.nonfinite.empty();
    if (parallel->max_over_ranks(here ? 1.0 : 0.0) > 0 && !here) result.nonfinite = "a gradient on another rank";
  }
  if (!result.nonfinite.empty()) {
    result.skipped = true;  // never apply a non-finite update
  } else if (scaler) {
    result.skipped = !scaler->step(optimizer);
  } else {
    optimizer.step();
  }
  optimizer.zero_grad();
}

}  // namespace

StepResult StepRunner::step(const std::function<Batch()>& next_batch) {
  check_weights_not_frozen(backend_);
  StepResult result;
  PhaseTimes& phases = result.phases;
  // What the step makes outside its phases (the loss read back) is a workspace too.
  MemoryCategoryScope step_memory(MemoryCategory::workspaces);
  PhaseTimer step_span(backend_, timer("step"), "step", result.seconds);
  // Micro-steps: gradients accumulate over `accumulate` batches (each loss scaled by 1/K, so the
  // step's gradient is the mean); data parallel runs communicate on the last one only.
  double loss_sum = 0;
  // cuda_graph: eager for the first steps, then captured once (untimed: the capture is taken out
  // of the step's time) and replayed.
  const bool replay = options_.cuda_graph && steps_ >= options_.eager_steps_before_capture;
  double capture_s = 0;
  for (std::int64_t micro = 0; micro < options_.accumulate; ++micro) {
    Batch batch;
    {
      PhaseTimer t(backend_, timer("data_wait"), "data_wait", phases.data_wait_s);
      MemoryPhaseScope phase(MemoryPhase::data_wait);
      batch = next_batch();
      if (replay && graph_) stage_for_graph(batch);
    }
    if (replay && !graph_) {
      PhaseTimer t(backend_, timer("graph_capture"), "graph_capture", capture_s);
      graph_ = std::make_unique<StepGraph>(
          backend_, std::vector<Tensor>{batch.inputs, batch.labels},
          [this](const std::vector<Tensor>& in) { return forward_loss(in[0], in[1]); }, model_.named_parameters());
      stage_for_graph(batch);  // the same batch: its labels checked like every later one
    }
    if (replay) {
      {
        PhaseTimer t(backend_, timer("forward"), "forward", phases.forward_s);
        graph_->forward();
      }
      {
        PhaseTimer t(backend_, timer("backward"), "backward", phases.backward_s);
        graph_->backward();
      }
      loss_sum += graph_->loss().item();
      continue;
    }
    Tensor loss;
    {
      PhaseTimer t(backend_, timer("forward"), "forward", phases.forward_s);
      MemoryPhaseScope phase(MemoryPhase::forward);
      MemoryCategoryScope category(MemoryCategory::activations);
      loss = forward_loss(batch.inputs, batch.labels);
    }
    note_forward_end(backend_.device_type());
    const bool sync = micro + 1 == options_.accumulate;
    if (parallel_ != nullptr) parallel_->begin_backward(sync);
    {
      PhaseTimer t(backend_, timer("backward"), "backward", phases.backward_s);
      MemoryPhaseScope phase(MemoryPhase::backward);
      MemoryCategoryScope category(MemoryCategory::workspaces);  // a leaf's gradient is moved to `gradients`
      if (scaler_) {
        scaler_->scale(loss).backward();
      } else {
        loss.backward();
      }
    }
    if (parallel_ != nullptr && sync) {
      PhaseTimer t(backend_, timer("comm_wait"), "comm_wait", phases.comm_s);
      MemoryPhaseScope phase(MemoryPhase::backward);
      MemoryCategoryScope category(MemoryCategory::workspaces);
      result.ddp = parallel_->finish_backward();
    }
    loss_sum += loss.item();
  }
  {
    PhaseTimer t(backend_, timer("optimizer"), "optimizer", phases.optimizer_s);
    MemoryPhaseScope phase(MemoryPhase::optimizer);
    MemoryCategoryScope category(MemoryCategory::workspaces);  // the optimiser's state and copies say so
    if (options_.grad_clip > 0) result.grad_norm = clip_gradients();
    if (options_.check_finite && !std::isfinite(loss_sum)) {
      result.nonfinite = "the loss (" + std::to_string(loss_sum) + ")";
    } else if (options_.check_finite && !scaler_) {
      // (With a scaler, its unscale checks the gradients, and skips and backs off on its own.)
      if (const std::string name = first_nonfinite_gradient(); !name.empty()) {
        result.nonfinite = "the gradient of " + name;
      }
    }
    apply_or_skip_update(optimizer_, scaler_, parallel_, result);
  }
  if (parallel_ != nullptr && parallel_->shards_optimizer_state()) {
    // ZeRO-1/2: every rank updated its pieces; the parameters are gathered from their owners.
    PhaseTimer t(backend_, timer("param_allgather"), "param_allgather", phases.comm_s);
    MemoryCategoryScope category(MemoryCategory::communication);
    parallel_->finish_step();
  }
  step_span.finish();  // the step span ends with the optimiser phase
  result.seconds -= capture_s;
  result.loss = loss_sum;  // the mean over the micro-steps (each was scaled by 1/K)
  result.replayed = replay;
  ++steps_;
  return result;
}

namespace {

// One element of `dtype` at `at` (host memory) as a double.
double host_scalar(DType dtype, const unsigned char* at) {
  if (dtype == DType::f64) {
    double value = 0;
    std::memcpy(&value, at, sizeof value);
    return value;
  }
  if (dtype == DType::f32) {
    float f = 0;
    std::memcpy(&f, at, sizeof f);
    return f;
  }
  std::uint16_t bits = 0;
  std::memcpy(&bits, at, sizeof bits);
  return dtype == DType::bf16 ? bf16_bits_to_f32(bits) : f16_bits_to_f32(bits);
}

// `t` holds at least n elements of `dtype` on `backend` (reallocated when not).
void ensure_buffer(Tensor& t, std::int64_t n, DType dtype, Backend& backend) {
  if (!t.defined() || t.numel() < n || t.dtype() != dtype || &t.backend() != &backend)
    t = Tensor::zeros({n}, dtype, backend);
}

}  // namespace

double StepRunner::clip_gradients() {
  TL_PROFILE_SCOPE("step.clip_gradients");
  NoGradGuard no_grad;
  const NamedTensors params = optimizer_.params();
  std::vector<std::size_t> present;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor grad = params[i].second.grad();
    if (!grad.defined()) continue;
    Backend& backend = grad.backend();
    ensure_buffer(clip_sums_, static_cast<std::int64_t>(params.size()), grad.dtype(), backend);
    ensure_buffer(clip_scratch_, grad.numel(), grad.dtype(), backend);
    // The squares, then their sum: dense gradients (contiguous or channels_last), every element once.
    backend.binary(BinaryOp::mul, grad.dtype(), grad.raw_data(), grad.raw_data(), clip_scratch_.raw_data(),
                   grad.numel());
    backend.sum(grad.dtype(), clip_scratch_.raw_data(), grad.numel(),
                static_cast<unsigned char*>(clip_sums_.raw_data()) + i * dtype_size(grad.dtype()));
    present.push_back(i);
  }
  double squares = 0;
  if (!present.empty()) {
    std::vector<unsigned char> host(clip_sums_.nbytes());
    clip_sums_.copy_to_host(host.data());
    for (std::size_t i : present)
      squares += host_scalar(clip_sums_.dtype(), host.data() + i * dtype_size(clip_sums_.dtype()));
  }
  // Sharded optimiser state: each rank holds its pieces of the gradient; the norm is over them all.
  if (parallel_ != nullptr && parallel_->shards_optimizer_state()) squares = parallel_->sum_over_ranks(squares);
  double norm = std::sqrt(squares);
  if (scaler_) norm /= scaler_->scale_value();  // the gradients still carry the loss scale
  if (!std::isfinite(norm) || norm <= options_.grad_clip) return norm;
  // PyTorch's clip_grad_norm_: scaled by max_norm / (norm + 1e-6).
  const double coefficient = options_.grad_clip / (norm + 1e-6);
  for (std::size_t i : present) {
    const Tensor grad = params[i].second.grad();
    grad.backend().affine(grad.dtype(), grad.raw_data(), grad.raw_data(), grad.numel(), coefficient, 0.0);
  }
  return norm;
}

std::string StepRunner::first_nonfinite_gradient() {
  TL_PROFILE_SCOPE("step.check_finite");
  NoGradGuard no_grad;
  const NamedTensors params = optimizer_.params();
  std::vector<std::size_t> checked;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor grad = params[i].second.grad();
    if (!grad.defined()) continue;
    ensure_buffer(gradient_sums_, static_cast<std::int64_t>(params.size()), grad.dtype(), grad.backend());
    // A NaN or an infinity anywhere makes the sum non-finite (as does a finite overflow, which is
    // divergence too). The gradient is dense (contiguous or channels_last): every element once.
    grad.backend().sum(grad.dtype(), grad.raw_data(), grad.numel(),
                       static_cast<unsigned char*>(gradient_sums_.raw_data()) + i * dtype_size(grad.dtype()));
    checked.push_back(i);
  }
  if (checked.empty()) return "";
  // One read back (no device allocation: a steady step allocates nothing).
  std::vector<unsigned char> host(gradient_sums_.nbytes());
  gradient_sums_.copy_to_host(host.data());
  const DType dtype = gradient_sums_.dtype();
  for (std::size_t i : checked) {
    if (!std::isfinite(host_scalar(dtype, host.data() + i * dtype_size(dtype)))) return params[i].first;
  }
  return "";
}

StepResult StepRunner::infer(const Batch& batch) {
  StepResult result;
  {
    PhaseTimer t(backend_, timer("forward"), "forward", result.phases.forward_s);
    NoGradGuard no_grad;
    forward(batch.inputs);
  }
  result.seconds = result.phases.forward_s;
  return result;
}

FrozenWeightsScope::FrozenWeightsScope(Backend& backend) : frozen_(backend.frozen_weights()) {
  if (frozen_ != nullptr) frozen_->freeze();
}

FrozenWeightsScope::~FrozenWeightsScope() {
  if (frozen_ != nullptr) frozen_->thaw();
}

}  // namespace trainlab
