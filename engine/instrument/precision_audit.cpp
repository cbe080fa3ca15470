#include "engine/instrument/precision_audit.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/core/observer.h"
#include "engine/instrument/memory_usage.h"

namespace trainlab {

namespace {

thread_local OpPrecisionScope* current_scope = nullptr;

// Where an op sums, by its kind: the matrix ops and the reductions accumulate in f32 whatever
// their inputs (every backend's contract, engine/core/autocast.h); elementwise ops do not sum.
std::string accumulation_of(const std::string& op, const std::string& output) {
  const bool matrix = op.rfind("conv2d", 0) == 0 || op.rfind("linear", 0) == 0;
  if (matrix) {
    return output == "f32" || output == "f64" ? output : "f32 (the backend's accumulator), rounded to " + output;
  }
  if (op == "sum" || op == "cross_entropy") return output == "f64" ? "f64" : "f32";
  if (op == "cast" || op == "reorder" || op == "to_backend" || op == "clone") return "- (a copy)";
  if (op == "reshape" || op == "permute" || op == "narrow") return "- (a view)";
  return "- (elementwise)";
}

}  // namespace

OpPrecisionScope::OpPrecisionScope() : previous_(current_scope) { current_scope = this; }
OpPrecisionScope::~OpPrecisionScope() { current_scope = previous_; }

namespace {
// The audit as a subscriber of the engine core's op events (engine/core/observer.h).
class OpRecorder final : public EngineObserver {
 public:
  void on_op(std::string_view name, const std::vector<Tensor>& inputs, const Tensor& output) override {
    if (current_scope != nullptr) note_op_precision(std::string(name), inputs, output);
  }
};
OpRecorder recorder;
const bool recorder_subscribed = (subscribe(recorder), true);
}  // namespace

void note_op_precision(const std::string& op, const std::vector<Tensor>& inputs, const Tensor& output) {
  OpPrecisionScope* scope = current_scope;
  // The model's forward (and autocast's casts in it); not the step's own bookkeeping around it.
  if (scope == nullptr || current_memory_phase() != MemoryPhase::forward) return;
  std::string in;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    in += (in.empty() ? "" : ", ") + std::string(dtype_name(t.dtype()));
  }
  const std::string out = dtype_name(output.dtype());
  for (OpPrecision& known : scope->ops_) {
    if (known.op == op && known.inputs == in && known.output == out) {
      ++known.calls;
      return;
    }
  }
  scope->ops_.push_back({op, in, out, accumulation_of(op, out), 1});
}

std::string precision_audit_text(const PrecisionAudit& a) {
  std::string out = "precision audit\n";
  out += fmt::format("  compute dtype {}; master weights {}; their gradients {}; optimiser state {}\n", a.compute_dtype,
                     a.master_dtype, a.gradient_dtype, a.optimizer_state_dtype);
  out += "  ops of one training step (forward and the casts autocast made), as they ran:\n";
  out += "  | op | inputs | output | accumulates in | calls |\n  |---|---|---|---|---|\n";
  for (const OpPrecision& op : a.ops) {
    out += fmt::format("  | {} | {} | {} | {} | {} |\n", op.op, op.inputs, op.output, op.accumulates, op.calls);
  }
  out += "  gradient reduction: " + a.gradient_reduction + "\n";
  if (a.loss_scaler) {
    out += fmt::format(
        "  loss scaler: dynamic, initial scale {:g}, growth interval {}, scale at the end {:g}, {} step(s) skipped\n",
        a.scale_init, a.growth_interval, a.scale_final, a.scaler_skipped);
  } else {
    out += "  loss scaler: none\n";
  }
  out += a.finite_checks
             ? fmt::format(
                   "  non-finite checks: the loss and every gradient, every step (one read back); on NaN or inf: "
                   "{}; {} step(s) skipped\n",
                   a.on_nonfinite, a.nonfinite_steps)
             : "  non-finite checks: by the loss scaler's unscale (f16)\n";
  if (a.reference_is_the_run) {
    out +=
        fmt::format("  against f32: the run is f32 (its own reference): final loss {:.6f}, held-out accuracy {:.2f}%\n",
                    a.final_loss, 100 * a.accuracy);
  } else {
    out += fmt::format(
        "  against an f32 run of the same seed and {} steps: final loss {:.6f} vs {:.6f} ({:+.6f}), held-out "
        "accuracy {:.2f}% vs {:.2f}% ({:+.2f} points, {} samples)\n",
        a.steps, a.final_loss, a.reference_loss, a.final_loss - a.reference_loss, 100 * a.accuracy,
        100 * a.reference_accuracy, 100 * (a.accuracy - a.reference_accuracy), a.eval_samples);
  }
  return out;
}

std::string precision_audit_json(const PrecisionAudit& a) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpPrecision& op : a.ops) {
    ops.push_back({{"op", op.op},
                   {"inputs", op.inputs},
                   {"output", op.output},
                   {"accumulates", op.accumulates},
                   {"calls", op.calls}});
  }
  nlohmann::json j = {{"compute_dtype", a.compute_dtype},
                      {"master_dtype", a.master_dtype},
                      {"gradient_dtype", a.gradient_dtype},
                      {"optimizer_state_dtype", a.optimizer_state_dtype},
                      {"ops", ops},
                      {"gradient_reduction", a.gradient_reduction},
                      {"loss_scaler", a.loss_scaler},
                      {"finite_checks", a.finite_checks},
                      {"on_nonfinite", a.on_nonfinite},
                      {"nonfinite_steps", a.nonfinite_steps},
                      {"steps", a.steps},
                      {"final_loss", a.final_loss},
                      {"held_out_accuracy", a.accuracy},
                      {"reference_is_the_run", a.reference_is_the_run},
                      {"reference_final_loss", a.reference_loss},
                      {"reference_held_out_accuracy", a.reference_accuracy},
                      {"eval_samples", a.eval_samples}};
  if (a.loss_scaler) {
    j["scaler"] = {{"init_scale", a.scale_init},
                   {"growth_interval", a.growth_interval},
                   {"final_scale", a.scale_final},
                   {"skipped_steps", a.scaler_skipped}};
  }
  return j.dump();
}

}  // namespace trainlab
