// The precision audit (seed 003; `trainlab train --audit`): what precision a run actually used, and
// what it cost against an f32 run of the same seed.
//
// While an OpPrecisionScope is alive on a thread, every differentiable op that runs there in the
// step's forward phase in grad mode (whether or not its inputs require grad: the input batch's
// cast is one) notes its name and the dtypes of its inputs and output (the first training step
// runs under one). With the
// trainer's view of the rest (master weights, optimiser state, the gradient reduction, the loss
// scaler, the finiteness checks) and a reference run's result, precision_audit_text prints it all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace trainlab {

struct OpPrecision {
  std::string op;           // "conv2d", "relu", "cast", ...
  std::string inputs;       // "bf16, bf16, bf16" (the tensor inputs' dtypes, in order)
  std::string output;       // "bf16"
  std::string accumulates;  // where the op sums: "f32 (the backend's accumulator)", "-" for elementwise
  std::int64_t calls = 0;   // in the recorded step
};

class OpPrecisionScope {
 public:
  OpPrecisionScope();
  ~OpPrecisionScope();
  OpPrecisionScope(const OpPrecisionScope&) = delete;
  OpPrecisionScope& operator=(const OpPrecisionScope&) = delete;
  // Each distinct (op, input dtypes, output dtype), in the order first seen.
  std::vector<OpPrecision> ops() const { return ops_; }

 private:
  friend void note_op_precision(const std::string& op, const std::vector<Tensor>& inputs, const Tensor& output);
  std::vector<OpPrecision> ops_;
  OpPrecisionScope* previous_;
};

// Every op the core records (autograd's record(), through engine/core/observer.h) comes here: a no-op
// without a scope on this thread.
void note_op_precision(const std::string& op, const std::vector<Tensor>& inputs, const Tensor& output);

struct PrecisionAudit {
  std::string compute_dtype, master_dtype, optimizer_state_dtype, gradient_dtype;
  std::vector<OpPrecision> ops;
  std::string gradient_reduction;  // "none (one process)" or the DDP's: dtype, accumulator, collective
  // The loss scaler (f16): its settings, the scale at the end and the steps it skipped.
  bool loss_scaler = false;
  double scale_init = 0, scale_final = 0;
  std::int64_t growth_interval = 0, scaler_skipped = 0;
  // Finiteness checks (without a scaler): on every step, the policy, the steps skipped.
  bool finite_checks = false;
  std::string on_nonfinite;
  std::int64_t nonfinite_steps = 0;
  // The run against the f32 reference of the same seed and steps.
  double final_loss = 0, accuracy = 0, reference_loss = 0, reference_accuracy = 0;
  bool reference_is_the_run = false;  // the run is f32 already
  std::int64_t steps = 0, eval_samples = 0;
};

std::string precision_audit_text(const PrecisionAudit& audit);
std::string precision_audit_json(const PrecisionAudit& audit);  // one line

}  // namespace trainlab
