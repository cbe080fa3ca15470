#include "engine/memory_model.h"

#include <fmt/format.h>
#include <cmath>

#include "backends/error.h"

namespace trainlab {

PersistentState persistent_state(double parameters, int workers, int zero_stage, const StateBytes& bytes) {
  TL_CHECK(parameters > 0 && std::isfinite(parameters),
           fmt::format("memory: parameters must be > 0, got {}", parameters));
  TL_CHECK(workers >= 1, fmt::format("memory: workers must be >= 1, got {}", workers));
  TL_CHECK(zero_stage >= 0 && zero_stage <= 3,
           fmt::format("memory: ZeRO stage must be 0, 1, 2 or 3, got {}", zero_stage));
  for (double b : {bytes.param, bytes.grad, bytes.master, bytes.moments})
    TL_CHECK(b >= 0 && std::isfinite(b), fmt::format("memory: bytes per parameter must be >= 0, got {}", b));
  const double w = workers;
  PersistentState s;
  s.params = parameters * bytes.param / (zero_stage >= 3 ? w : 1.0);
  s.grads = parameters * bytes.grad / (zero_stage >= 2 ? w : 1.0);
  s.optimizer = parameters * bytes.optimizer() / (zero_stage >= 1 ? w : 1.0);
  return s;
}

StateBytes trainlab_state_bytes(const std::string& optimizer, double momentum) {
  TL_CHECK(optimizer == "sgd" || optimizer == "adamw",
           "memory: optimizer must be sgd or adamw, got '" + optimizer + "'");
  StateBytes b;
  b.param = 4;
  b.grad = 4;
  b.master = 0;
  b.moments = optimizer == "adamw" ? 8 : (momentum > 0 ? 4 : 0);
  return b;
}

ChainEstimate estimate_chain(const std::vector<ChainOp>& ops) {
  ChainEstimate e;
  const std::size_t n = ops.size();
  // Forward: each op allocates what it saves, then its output; the previous op's output goes once
  // it has been consumed.
  double live = 0;
  auto note_forward = [&](const ChainOp& op) {
    if (live > e.forward_peak) {
      e.forward_peak = live;
      e.forward_peak_at = op.name;
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    const ChainOp& op = ops[i];
    TL_CHECK(op.out_bytes >= 0 && op.saved_bytes >= 0 && op.dx_bytes >= 0 && op.scratch_bytes >= 0 &&
                 op.dw_bytes >= 0 && op.dw_master_bytes >= 0,
             "memory chain: op '" + op.name + "' has a negative size");
    live += op.saved_bytes;
    note_forward(op);
    live += op.out_bytes;
    note_forward(op);
    for (std::size_t j = 0; j < i; ++j) {
      if (ops[j].out_lifetime == ChainLifetime::next_op &&
          j + static_cast<std::size_t>(std::max(1, ops[j].outlives)) == i)
        live -= ops[j].out_bytes;
    }
  }
  // The forward ends: what only it held goes (the last op's output is the loss, kept for backward).
  for (std::size_t i = 0; i < n; ++i) {
    if (ops[i].out_lifetime == ChainLifetime::forward) live -= ops[i].out_bytes;
  }
  e.saved = live;
  // Backward, last op first: while op i runs, the tensors saved for ops 0..i are alive.
  std::vector<double> saved_for(n, 0.0);  // bytes freed when op i's backward has run
  for (std::size_t i = 0; i < n; ++i) {
    saved_for[i] += ops[i].saved_bytes;
    if (ops[i].out_lifetime == ChainLifetime::saved_self) saved_for[i] += ops[i].out_bytes;
    if (ops[i].out_lifetime == ChainLifetime::saved_next) saved_for[std::min(i + 1, n - 1)] += ops[i].out_bytes;
  }
  double acts = 0;
  for (double b : saved_for) acts += b;
  double received = n > 0 ? ops[n - 1].out_bytes : 0;  // the seed gradient, the size of the loss
  for (std::size_t k = n; k-- > 0;) {
    const ChainOp& op = ops[k];
    // The op's own backward, then the casts of its weight gradients to the f32 masters.
    const double during = received + op.scratch_bytes + op.dx_bytes + op.dw_bytes;
    const double casting = op.dx_bytes + op.dw_bytes + op.dw_master_bytes;
    for (double ws : {during, casting}) {
      if (ws > e.workspace_peak) {
        e.workspace_peak = ws;
        e.workspace_peak_at = op.name;
      }
      if (acts + ws > e.backward_peak) {
        e.backward_peak = acts + ws;
        e.backward_peak_at = op.name;
      }
    }
    acts -= saved_for[k];
    if (!op.passes_gradient) received = op.dx_bytes;
    if (received == 0) break;  // nothing flows further back
  }
  return e;
}

TrainingMemoryEstimate estimate_training_memory(std::int64_t parameters, DType param_dtype, DType compute_dtype,
                                                const std::string& optimizer, double momentum,
                                                const std::vector<ChainOp>& chain) {
  TL_CHECK(parameters > 0, fmt::format("memory: parameters must be > 0, got {}", parameters));
  const StateBytes per = trainlab_state_bytes(optimizer, momentum);
  const double p = static_cast<double>(parameters), scale = static_cast<double>(dtype_size(param_dtype)) / 4.0;
  TrainingMemoryEstimate m;
  m.parameters = p * per.param * scale;
  m.gradients = p * per.grad * scale;
  m.optimizer_state = p * per.moments * scale;
  m.working_copies = compute_dtype != param_dtype ? p * static_cast<double>(dtype_size(compute_dtype)) : 0.0;
  m.chain = estimate_chain(chain);
  return m;
}

}  // namespace trainlab
