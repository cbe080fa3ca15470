#include "engine/optim/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/core/autograd.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/profiler.h"

namespace trainlab {

namespace {

// Every parameter with a gradient, in one backend call per run of parameters that share a backend,
// a dtype and whether weight decay applies (one kernel launch on a GPU). make_slot(i, param,
// dense_grad) prepares parameter i's state and describes it; step(backend, dtype, decays, slots)
// updates a group.
template <typename MakeSlot, typename Step>
void step_in_groups(const NamedTensors& params, const std::vector<bool>& decay, MakeSlot make_slot, Step step) {
  std::vector<Tensor> dense_grads;  // kept alive until the group's call returns
  std::vector<OptimizerSlot> slots;
  Backend* backend = nullptr;
  DType dtype = DType::f32;
  bool decays = true;
  auto flush = [&] {
    if (!slots.empty()) step(*backend, dtype, decays, slots);
    slots.clear();
    dense_grads.clear();
  };
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (backend != nullptr && (&p.backend() != backend || p.dtype() != dtype || decay[i] != decays)) flush();
    backend = &p.backend();
    dtype = p.dtype();
    decays = decay[i];
    dense_grads.push_back(g.contiguous());
    slots.push_back(make_slot(i, p, dense_grads.back()));
  }
  flush();
}

}  // namespace

// ---- Optimizer ----

Optimizer::Optimizer(NamedTensors params, double lr)
    : decay_(params.size(), true), params_(std::move(params)), lr_(lr) {
  for (const auto& [name, p] : params_) {
    TL_CHECK(p.defined() && p.is_leaf() && p.requires_grad(),
             "optimizer: parameter '" + name + "' must be a leaf that requires grad");
    TL_CHECK(p.is_contiguous(), "optimizer: parameter '" + name + "' must be contiguous");
  }
  set_lr(lr);
}

void Optimizer::set_decay_mask(std::vector<bool> decay) {
  TL_CHECK(decay.size() == params_.size(), "optimizer: a weight-decay mask of " + std::to_string(decay.size()) +
                                               " entries for " + std::to_string(params_.size()) + " parameters");
  decay_ = std::move(decay);
}

std::int64_t Optimizer::decayed_parameters() const {
  return static_cast<std::int64_t>(std::count(decay_.begin(), decay_.end(), true));
}

void Optimizer::set_lr(double lr) {
  TL_CHECK(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0, got " + std::to_string(lr));
  lr_ = lr;
}

void Optimizer::keep_working_copies(DType dtype) {
  TL_CHECK(dtype == DType::bf16 || dtype == DType::f16,
           std::string("optimizer: working copies are bf16 or f16, not ") + dtype_name(dtype));
  working_dtype_ = dtype;
  working_.assign(params_.size(), Tensor());
  working_written_.assign(params_.size(), 0);
  working_current_ = false;
}

const Tensor* Optimizer::working_copy(const Tensor& param, DType dtype) const {
  if (dtype != working_dtype_ || !working_current_ || working_epoch_ != parameter_write_epoch()) return nullptr;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].second.impl() == param.impl()) return working_written_[i] ? &working_[i] : nullptr;
  }
  return nullptr;
}

void Optimizer::attach_working_copy(std::size_t i, const Tensor& p, OptimizerSlot& slot) {
  if (working_dtype_ == DType::f32 || p.dtype() != DType::f32 || !p.is_contiguous()) return;
  if (!working_[i].defined()) {
    MemoryCategoryScope category(MemoryCategory::working_copies);
    working_[i] = Tensor::empty(p.shape(), working_dtype_, p.backend());
  }
  slot.working = working_[i].raw_data();
  slot.working_dtype = working_dtype_;
  working_written_[i] = 1;
}

void Optimizer::end_step() {
  if (updates_ >= 0) ++updates_;
  working_current_ = working_dtype_ != DType::f32;
  working_epoch_ = parameter_write_epoch();
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& [name, p] : params_) {
    Tensor t = p;
    t.zero_grad(set_to_none);
  }
}

void Optimizer::check_kind(const StateDict& state) const {
  const std::string& kind = state.string("optimizer", "optimizer state");
  TL_CHECK(kind == name(), "optimizer state is for '" + kind + "', this optimizer is '" + name() + "'");
}

void Optimizer::load_buffers(const StateDict& state, const std::string& kind, std::vector<Tensor>& buffers) const {
  MemoryCategoryScope category(MemoryCategory::optimizer_state);
  std::vector<Tensor> loaded(params_.size());
  std::size_t found = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& [pname, p] = params_[i];
    auto it = state.tensors.find(buffer_key(kind, pname));
    if (it == state.tensors.end()) continue;
    TL_CHECK(it->second.shape() == p.shape() && it->second.dtype() == p.dtype(),
             "optimizer state '" + it->first + "' is " + shape_str(it->second.shape()) + " " +
                 dtype_name(it->second.dtype()) + ", parameter '" + pname + "' is " + shape_str(p.shape()) + " " +
                 dtype_name(p.dtype()));
    loaded[i] = it->second.to(p.backend()).contiguous().clone();
    ++found;
  }
  std::size_t expected = 0;
  for (const auto& [key, tensor] : state.tensors) expected += key.rfind(kind + ".", 0) == 0 ? 1 : 0;
  TL_CHECK(found == expected, "optimizer state has " + kind + " tensors for parameters this model does not have");
  buffers = std::move(loaded);
}

void Optimizer::check_same(const StateDict& state, const std::string& key, double mine) const {
  const double saved = state.number(key, name() + " state");
  TL_CHECK(saved == mine, name() + " state has " + key + " " + std::to_string(saved) + "; this run's config gives " +
                              std::to_string(mine) + " (resume with the same value, or start a new run)");
}

void Optimizer::save_common(StateDict& state, const std::vector<bool>& has) const {
  state.integers["updates"] = updates_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (has[i]) state.integers["has_state." + params_[i].first] = 1;
  }
}

std::vector<bool> Optimizer::load_common(const StateDict& state, const std::vector<std::vector<Tensor>*>& buffers,
                                         const std::vector<std::string>& kinds) {
  const std::string owner = name() + " state";
  std::vector<bool> has(params_.size(), false);
  const bool recorded = state.integers.count("updates") > 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::string& pname = params_[i].first;
    bool any = false;
    for (const auto* list : buffers) any = any || (*list)[i].defined();
    has[i] = recorded ? state.integers.count("has_state." + pname) > 0 : any;
    for (std::size_t k = 0; k < buffers.size(); ++k) {
      TL_CHECK((*buffers[k])[i].defined() == has[i],
               owner + ": parameter '" + pname + "' " +
                   (has[i] ? "has no '" + buffer_key(kinds[k], pname) + "' buffer, which its state records"
                           : "has a '" + buffer_key(kinds[k], pname) + "' buffer its state does not record"));
    }
  }
  for (const auto& [key, tensor] : state.tensors) {
    std::string allowed;
    bool buffer = false;
    for (const std::string& kind : kinds) {
      buffer = buffer || key.rfind(kind + ".", 0) == 0;
      allowed += (allowed.empty() ? "" : ", ") + kind + ".<parameter>";
    }
    TL_CHECK(buffer, owner + " has a tensor '" + key + "' that is none of its buffers (" + allowed + ")");
    (void)tensor;
  }
  for (const auto& [key, value] : state.integers) {
    if (key.rfind("has_state.", 0) != 0) continue;
    const std::string pname = key.substr(std::string("has_state.").size());
    const bool known = std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == pname; });
    TL_CHECK(known, owner + " records buffers for parameter '" + pname + "', which this model does not have");
  }
  updates_ = recorded ? state.integer("updates", owner) : -1;
  TL_CHECK(!recorded || updates_ >= 0, owner + ": updates must be >= 0, got " + std::to_string(updates_));
  return has;
}

// ---- SGD ----

namespace {
// The same checks guard the constructor and a loaded state, so a checkpoint cannot smuggle in a
// value the constructor would have refused.
void check_sgd_options(const SgdOptions& o) {
  TL_CHECK(std::isfinite(o.momentum) && o.momentum >= 0,
           "SGD: momentum must be >= 0, got " + std::to_string(o.momentum));
  TL_CHECK(std::isfinite(o.dampening) && o.dampening >= 0 && o.dampening <= 1,
           "SGD: dampening must be in [0, 1], got " + std::to_string(o.dampening));
  TL_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
           "SGD: weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
  TL_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0 and zero dampening");
}

void check_adamw_options(const AdamWOptions& o) {
  TL_CHECK(o.beta1 >= 0 && o.beta1 < 1, "AdamW: beta1 must be in [0, 1), got " + std::to_string(o.beta1));
  TL_CHECK(o.beta2 >= 0 && o.beta2 < 1, "AdamW: beta2 must be in [0, 1), got " + std::to_string(o.beta2));
  TL_CHECK(std::isfinite(o.eps) && o.eps > 0, "AdamW: eps must be > 0, got " + std::to_string(o.eps));
  TL_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
           "AdamW: weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
}
}  // namespace

SGD::SGD(NamedTensors params, const SgdOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options), momentum_buffers_(params_.size()) {
  check_sgd_options(options);
}

void SGD::step() {
  TL_PROFILE_SCOPE("sgd.step");
  NoGradGuard no_grad;
  const SgdStep step{lr_, options_.momentum, options_.dampening, options_.weight_decay, options_.nesterov, false};
  begin_step();
  step_in_groups(
      params_, decay_,
      [&](std::size_t i, const Tensor& p, const Tensor& dense_grad) {
        const bool first = !momentum_buffers_[i].defined();
        if (first && options_.momentum != 0) {
          MemoryCategoryScope category(MemoryCategory::optimizer_state);
          momentum_buffers_[i] = Tensor::empty(p.shape(), p.dtype(), p.backend());
        }
        OptimizerSlot slot{p.raw_data(),
                           dense_grad.raw_data(),
                           options_.momentum != 0 ? momentum_buffers_[i].raw_data() : nullptr,
                           nullptr,
                           p.numel(),
                           first,
                           0};
        attach_working_copy(i, p, slot);
        return slot;
      },
      [&](Backend& backend, DType dtype, bool decays, const std::vector<OptimizerSlot>& slots) {
        SgdStep group = step;
        if (!decays) group.weight_decay = 0;
        backend.sgd_step_all(dtype, slots, group);
      });
  end_step();
}

StateDict SGD::state_dict() const {
  StateDict state;
  state.strings["optimizer"] = name();
  state.numbers["lr"] = lr_;
  state.numbers["momentum"] = options_.momentum;
  state.numbers["dampening"] = options_.dampening;
  state.numbers["weight_decay"] = options_.weight_decay;
  state.integers["nesterov"] = options_.nesterov ? 1 : 0;
  std::vector<bool> has(params_.size(), false);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (momentum_buffers_[i].defined()) {
      state.tensors[buffer_key("momentum_buffer", params_[i].first)] = momentum_buffers_[i];
      has[i] = true;
    }
  }
  save_common(state, has);
  return state;
}

void SGD::load_state_dict(const StateDict& state) {
  check_kind(state);
  const std::string owner = "SGD state";
  std::vector<Tensor> buffers;
  load_buffers(state, "momentum_buffer", buffers);
  SgdOptions loaded;
  loaded.momentum = state.number("momentum", owner);
  loaded.dampening = state.number("dampening", owner);
  loaded.weight_decay = state.number("weight_decay", owner);
  loaded.nesterov = state.integer("nesterov", owner) != 0;
  loaded.lr = state.number("lr", owner);
  check_sgd_options(loaded);  // a value the constructor would refuse is named as such first
  check_same(state, "momentum", options_.momentum);
  check_same(state, "dampening", options_.dampening);
  check_same(state, "weight_decay", options_.weight_decay);
  TL_CHECK(loaded.nesterov == options_.nesterov, owner + " has nesterov " + (loaded.nesterov ? "on" : "off") +
                                                     "; this run's config has it " +
                                                     (options_.nesterov ? "on" : "off"));
  load_common(state, {&buffers}, {"momentum_buffer"});
  set_lr(loaded.lr);
  momentum_buffers_ = std::move(buffers);
}

// ---- AdamW ----

AdamW::AdamW(NamedTensors params, const AdamWOptions& options)
    : Optimizer(std::move(params), options.lr),
      options_(options),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      steps_(params_.size(), 0) {
  check_adamw_options(options);
}

void AdamW::step() {
  TL_PROFILE_SCOPE("adamw.step");
  NoGradGuard no_grad;
  const AdamWStep step{lr_, options_.beta1, options_.beta2, options_.eps, options_.weight_decay, 0};
  begin_step();
  step_in_groups(
      params_, decay_,
      [&](std::size_t i, const Tensor& p, const Tensor& dense_grad) {
        if (!exp_avg_[i].defined()) {
          MemoryCategoryScope category(MemoryCategory::optimizer_state);
          exp_avg_[i] = Tensor::zeros(p.shape(), p.dtype(), p.backend());
          exp_avg_sq_[i] = Tensor::zeros(p.shape(), p.dtype(), p.backend());
        }
        ++steps_[i];
        OptimizerSlot slot{
            p.raw_data(), dense_grad.raw_data(), exp_avg_[i].raw_data(), exp_avg_sq_[i].raw_data(), p.numel(), false,
            steps_[i]};
        attach_working_copy(i, p, slot);
        return slot;
      },
      [&](Backend& backend, DType dtype, bool decays, const std::vector<OptimizerSlot>& slots) {
        AdamWStep group = step;
        if (!decays) group.weight_decay = 0;
        backend.adamw_step_all(dtype, slots, group);
      });
  end_step();
}

StateDict AdamW::state_dict() const {
  StateDict state;
  state.strings["optimizer"] = name();
  state.numbers["lr"] = lr_;
  state.numbers["beta1"] = options_.beta1;
  state.numbers["beta2"] = options_.beta2;
  state.numbers["eps"] = options_.eps;
  state.numbers["weight_decay"] = options_.weight_decay;
  std::vector<bool> has(params_.size(), false);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    state.tensors[buffer_key("exp_avg", params_[i].first)] = exp_avg_[i];
    state.tensors[buffer_key("exp_avg_sq", params_[i].first)] = exp_avg_sq_[i];
    state.integers[buffer_key("step", params_[i].first)] = steps_[i];
    has[i] = true;
  }
  save_common(state, has);
  return state;
}

void AdamW::load_state_dict(const StateDict& state) {
  check_kind(state);
  const std::string owner = "AdamW state";
  std::vector<Tensor> m, v;
  load_buffers(state, "exp_avg", m);
  load_buffers(state, "exp_avg_sq", v);
  std::vector<std::int64_t> steps(params_.size(), 0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    TL_CHECK(m[i].defined() == v[i].defined(),
             "AdamW state: '" + params_[i].first + "' has only one of its two moments");
  }
  AdamWOptions loaded;
  loaded.beta1 = state.number("beta1", owner);
  loaded.beta2 = state.number("beta2", owner);
  loaded.eps = state.number("eps", owner);
  loaded.weight_decay = state.number("weight_decay", owner);
  loaded.lr = state.number("lr", owner);
  check_adamw_options(loaded);  // a value the constructor would refuse is named as such first
  check_same(state, "beta1", options_.beta1);
  check_same(state, "beta2", options_.beta2);
  check_same(state, "eps", options_.eps);
  check_same(state, "weight_decay", options_.weight_decay);
  load_common(state, {&m, &v}, {"exp_avg", "exp_avg_sq"});
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!m[i].defined()) continue;
    steps[i] = state.integer(buffer_key("step", params_[i].first), owner);
    TL_CHECK(steps[i] >= 1, owner + ": '" + params_[i].first + "' has moments but step " + std::to_string(steps[i]) +
                                " (must be >= 1)");
    TL_CHECK(updates_ < 0 || steps[i] <= updates_, owner + ": '" + params_[i].first + "' is at step " +
                                                       std::to_string(steps[i]) + ", past the " +
                                                       std::to_string(updates_) + " updates the state records");
  }
  set_lr(loaded.lr);
  exp_avg_ = std::move(m);
  exp_avg_sq_ = std::move(v);
  steps_ = std::move(steps);
}

// ---- schedules ----

LRScheduler::LRScheduler(Optimizer& optimizer, double base_lr) : optimizer_(optimizer), base_lr_(base_lr) {
  TL_CHECK(std::isfinite(base_lr) && base_lr >= 0, "schedule: base lr must be finite and >= 0");
}

void LRScheduler::step() {
  ++t_;
  optimizer_.set_lr(lr_at(t_));
}

StateDict LRScheduler::state_dict() const {
  StateDict state;
  state.strings["schedule"] = name();
  state.numbers["base_lr"] = base_lr_;
  state.integers["last_step"] = t_;
  add_state(state);
  return state;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const std::string& kind = state.string("schedule", "schedule state");
  TL_CHECK(kind == name(), "schedule state is for '" + kind + "', this schedule is '" + name() + "'");
  check_state(state);
  const double base_lr = state.number("base_lr", "schedule state");
  TL_CHECK(base_lr == base_lr_, "schedule state has base lr " + std::to_string(base_lr) + "; this run's config gives " +
                                    std::to_string(base_lr_) + " (resume with the same lr, or start a new run)");
  t_ = state.integer("last_step", "schedule state");
  TL_CHECK(t_ >= 0, "schedule state: last_step must be >= 0");
  optimizer_.set_lr(lr_at(t_));
}

ConstantLR::ConstantLR(Optimizer& optimizer, double base_lr, std::int64_t warmup_steps)
    : LRScheduler(optimizer, base_lr), warmup_steps_(warmup_steps) {
  TL_CHECK(warmup_steps >= 0, "constant: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  optimizer_.set_lr(lr_at(0));
}

double ConstantLR::lr_at(std::int64_t t) const {
  if (t < warmup_steps_) return base_lr_ * static_cast<double>(t + 1) / static_cast<double>(warmup_steps_);
  return base_lr_;
}

// A warm-up is in the state only when there is one: checkpoints of plain constant runs stay as they were.
void ConstantLR::add_state(StateDict& state) const {
  if (warmup_steps_ > 0) state.integers["warmup_steps"] = warmup_steps_;
}

void ConstantLR::check_state(const StateDict& state) const {
  const auto it = state.integers.find("warmup_steps");
  const std::int64_t saved = it == state.integers.end() ? 0 : it->second;
  TL_CHECK(saved == warmup_steps_, "constant schedule state was saved with warmup_steps " + std::to_string(saved) +
                                       "; this run uses warmup_steps " + std::to_string(warmup_steps_));
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, double base_lr, std::int64_t warmup_steps,
                               std::int64_t total_steps, double min_lr)
    : LRScheduler(optimizer, base_lr), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {
  TL_CHECK(warmup_steps >= 0, "warmup_cosine: warmup_steps must be >= 0");
  TL_CHECK(total_steps > warmup_steps, "warmup_cosine: total steps (" + std::to_string(total_steps) +
                                           ") must exceed warmup_steps (" + std::to_string(warmup_steps) + ")");
  TL_CHECK(min_lr >= 0 && min_lr <= base_lr, "warmup_cosine: min_lr must be in [0, base lr]");
  optimizer_.set_lr(lr_at(0));
}

double WarmupCosineLR::lr_at(std::int64_t t) const {
  if (t < warmup_steps_) return base_lr_ * static_cast<double>(t + 1) / static_cast<double>(warmup_steps_);
  const double progress =
      std::min(1.0, static_cast<double>(t - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_));
  return min_lr_ + 0.5 * (base_lr_ - min_lr_) * (1.0 + std::cos(std::numbers::pi * progress));
}

void WarmupCosineLR::add_state(StateDict& state) const {
  state.integers["warmup_steps"] = warmup_steps_;
  state.integers["total_steps"] = total_steps_;
  state.numbers["min_lr"] = min_lr_;
}

void WarmupCosineLR::check_state(const StateDict& state) const {
  const std::string owner = "warmup_cosine state";
  TL_CHECK(state.integer("warmup_steps", owner) == warmup_steps_ &&
               state.integer("total_steps", owner) == total_steps_ && state.number("min_lr", owner) == min_lr_,
           "warmup_cosine state was saved with warmup_steps " + std::to_string(state.integer("warmup_steps", owner)) +
               ", total_steps " + std::to_string(state.integer("total_steps", owner)) +
               "; this run uses warmup_steps " + std::to_string(warmup_steps_) + ", total_steps " +
               std::to_string(total_steps_));
}

}  // namespace trainlab
