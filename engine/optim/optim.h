// Optimisers (SGD, AdamW, PyTorch semantics) and learning-rate schedules, each with a state dict.
// The update arithmetic is one backend call per parameter (Backend::sgd_step / adamw_step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/autocast.h"
#include "engine/core/state_dict.h"
#include "engine/core/tensor.h"

namespace trainlab {

class Optimizer : public WorkingCopies {
 public:
  explicit Optimizer(NamedTensors params, double lr);
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // Updates every parameter that has a gradient (parameters without one are skipped, as PyTorch).
  virtual void step() = 0;
  void zero_grad(bool set_to_none = false);
  double lr() const { return lr_; }
  void set_lr(double lr);
  const NamedTensors& params() const { return params_; }
  // Parameter groups as the model draws them (Module::decays): weight decay applies to parameter i
  // only where decay[i]; every parameter by default. The run's config, not the checkpoint, says
  // which (the same model gives the same groups on resume).
  void set_decay_mask(std::vector<bool> decay);
  const std::vector<bool>& decay_mask() const { return decay_; }
  std::int64_t decayed_parameters() const;  // tensors weight decay applies to
  virtual StateDict state_dict() const = 0;
  // Validates that the state belongs to this optimiser and these parameters (names and shapes),
  // that every hyperparameter it records equals this optimiser's own (they come from the run's
  // config: a checkpoint cannot change them), and that every parameter recorded as having
  // buffers has them all (a missing or renamed buffer is an error naming it, never a reset).
  virtual void load_state_dict(const StateDict& state) = 0;
  // Updates applied so far (restored by load_state_dict when the state records it; -1 when a
  // loaded state predates the count).
  std::int64_t updates() const { return updates_; }

  // Mixed precision: keep a `dtype` (bf16 or f16) copy of every parameter, written by step() in
  // the same pass as the update (one fused kernel on the cuda backend; a cast right after the
  // update elsewhere). Autocast takes a copy instead of casting the parameter while the copy is
  // current: written by a step, with no parameter written since by anything else
  // (parameter_write_epoch). Before the first step there are none, and autocast casts.
  void keep_working_copies(DType dtype);
  const Tensor* working_copy(const Tensor& param, DType dtype) const override;

 protected:
  // For step(): gives `slot` parameter i's working copy to write (nothing when none are kept).
  void attach_working_copy(std::size_t i, const Tensor& p, OptimizerSlot& slot);
  void begin_step() { working_current_ = false; }
  void end_step();
  DType working_dtype_ = DType::f32;  // f32: none kept
  std::vector<Tensor> working_;
  std::vector<char> working_written_;
  bool working_current_ = false;
  std::uint64_t working_epoch_ = 0;

  // The per-parameter buffer `kind` ("momentum_buffer", ...), keyed "kind.param_name".
  static std::string buffer_key(const std::string& kind, const std::string& param) { return kind + "." + param; }
  void load_buffers(const StateDict& state, const std::string& kind, std::vector<Tensor>& buffers) const;
  void check_kind(const StateDict& state) const;
  // The state's value of `key` must equal this optimiser's: an error naming both otherwise.
  void check_same(const StateDict& state, const std::string& key, double mine) const;
  // State shared by every optimiser: the update count and which parameters have buffers
  // ("has_state.<name>"); `has[i]` says whether parameter i has them now.
  void save_common(StateDict& state, const std::vector<bool>& has) const;
  // Which parameters the state records as having buffers (all of those present in `buffers`,
  // for a state that predates the record); checks that each has its `kinds` buffers.
  std::vector<bool> load_common(const StateDict& state, const std::vector<std::vector<Tensor>*>& buffers,
                                const std::vector<std::string>& kinds);
  std::int64_t updates_ = 0;
  std::vector<bool> decay_;
  NamedTensors params_;
  double lr_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  SGD(NamedTensors params, const SgdOptions& options);
  std::string name() const override { return "sgd"; }
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until a parameter's first step
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW final : public Optimizer {
 public:
  AdamW(NamedTensors params, const AdamWOptions& options);
  std::string name() const override { return "adamw"; }
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<std::int64_t> steps_;  // per parameter, as PyTorch's state["step"]
};

// Learning-rate schedule over optimiser steps t = 0, 1, 2, ...; step() advances t and sets the
// optimiser's lr for the next update.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  virtual std::string name() const = 0;
  virtual double lr_at(std::int64_t t) const = 0;
  void step();
  std::int64_t last_step() const { return t_; }
  double current_lr() const { return lr_at(t_); }
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  LRScheduler(Optimizer& optimizer, double base_lr);
  virtual void add_state(StateDict& state) const = 0;
  virtual void check_state(const StateDict& state) const = 0;
  Optimizer& optimizer_;
  double base_lr_;
  std::int64_t t_ = 0;
};

// base_lr throughout, or after a linear warm-up from base_lr / warmup_steps over the first
// warmup_steps (Goyal et al. 2017's gradual warm-up, which the linear scaling rule of a larger batch
// needs).
class ConstantLR final : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double base_lr, std::int64_t warmup_steps = 0);
  std::string name() const override { return "constant"; }
  double lr_at(std::int64_t t) const override;

 private:
  void add_state(StateDict& state) const override;
  void check_state(const StateDict& state) const override;
  std::int64_t warmup_steps_;
};

// Linear warm-up from base_lr / warmup_steps to base_lr over the first warmup_steps, then cosine
// decay to min_lr at total_steps (held there afterwards).
class WarmupCosineLR final : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, double base_lr, std::int64_t warmup_steps, std::int64_t total_steps,
                 double min_lr);
  std::string name() const override { return "warmup_cosine"; }
  double lr_at(std::int64_t t) const override;

 private:
  void add_state(StateDict& state) const override;
  void check_state(const StateDict& state) const override;
  std::int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

}  // namespace trainlab
