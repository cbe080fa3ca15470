#include "engine/instrument/memory_model.h"

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

namespace {

// A chain's blocks, each tensor's lifetime and what each op's backward frees, for both passes.
struct ChainPlan {
  const std::vector<ChainOp>& ops;
  std::size_t n;
  std::vector<ChainLifetime> lifetime;
  // What op i's backward frees: what it saved, its output when saved for itself, the previous
  // op's output when saved for it. `recomputed[i]`: the part of that a recomputed block drops
  // after its forward and makes again in backward (all of it, but the block's input).
  std::vector<double> saved_for, recomputed;
  // A recomputed block's result that nothing after it keeps (ChainOp::saves_input): dropped once the
  // next op has run, made again with the block (it is in `recomputed` too).
  std::vector<bool> result_dropped;
  bool in_block_with(std::size_t i, std::size_t j) const { return ops[i].block >= 0 && ops[i].block == ops[j].block; }
  bool last_of_block(std::size_t i) const { return ops[i].block >= 0 && (i + 1 == n || !in_block_with(i, i + 1)); }
};

ChainPlan plan_chain(const std::vector<ChainOp>& ops) {
  const std::size_t n = ops.size();
  ChainPlan p{ops,
              n,
              std::vector<ChainLifetime>(n),
              std::vector<double>(n, 0.0),
              std::vector<double>(n, 0.0),
              std::vector<bool>(n, false)};
  std::vector<ChainLifetime>& lifetime = p.lifetime;
  // A recomputed block's input is held by the block until its backward: saved for the next op.
  for (std::size_t i = 0; i < n; ++i) {
    lifetime[i] = ops[i].out_lifetime;
    const bool feeds_block = i + 1 < n && ops[i + 1].block >= 0 && !p.in_block_with(i + 1, i);
    if (feeds_block && lifetime[i] != ChainLifetime::saved_self) lifetime[i] = ChainLifetime::saved_next;
  }
  for (std::size_t i = 0; i < n; ++i) {
    p.saved_for[i] += ops[i].saved_bytes;
    if (lifetime[i] == ChainLifetime::saved_self) p.saved_for[i] += ops[i].out_bytes;
    if (lifetime[i] == ChainLifetime::saved_next) p.saved_for[std::min(i + 1, n - 1)] += ops[i].out_bytes;
    if (ops[i].block < 0) continue;
    p.recomputed[i] += ops[i].saved_bytes;
    // The block's output stays (it is the block's result) even when its last op saves it, if the
    // op after it keeps it.
    if (lifetime[i] == ChainLifetime::saved_self && !p.last_of_block(i)) p.recomputed[i] += ops[i].out_bytes;
    if (lifetime[i] == ChainLifetime::saved_self && p.last_of_block(i) && i + 1 < n && ops[i + 1].block < 0 &&
        !ops[i + 1].saves_input) {
      p.recomputed[i] += ops[i].out_bytes;
      p.result_dropped[i] = true;
    }
    if (lifetime[i] == ChainLifetime::saved_next && !p.last_of_block(i) && i + 1 < n)
      p.recomputed[i + 1] += ops[i].out_bytes;
  }
  return p;
}

// Forward: each op allocates what it saves, then its output; the previous op's output goes once
// it has been consumed; a recomputed block's saved tensors go when it ends. Each block's own
// peak above what was live when it began is what its recomputation adds in backward: returned by
// the block's last op. Sets the forward peak and what is saved for backward.
std::vector<double> forward_pass(const ChainPlan& p, ChainEstimate& e) {
  const std::vector<ChainOp>& ops = p.ops;
  const std::size_t n = p.n;
  double live = 0, block_base = 0;
  std::vector<double> block_transient(n, 0.0);  // by the block's last op
  std::size_t block_first = 0;
  auto note_forward = [&](std::size_t i) {
    if (live > e.forward_peak) {
      e.forward_peak = live;
      e.forward_peak_at = ops[i].name;
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    const ChainOp& op = ops[i];
    TL_CHECK(op.out_bytes >= 0 && op.saved_bytes >= 0 && op.dx_bytes >= 0 && op.scratch_bytes >= 0 &&
                 op.dw_bytes >= 0 && op.dw_master_bytes >= 0 && op.carry_bytes >= 0,
             "memory chain: op '" + op.name + "' has a negative size");
    if (op.block >= 0 && (i == 0 || !p.in_block_with(i, i - 1))) {
      block_base = live;
      block_first = i;
    }
    live += op.saved_bytes;
    note_forward(i);
    live += op.out_bytes;
    note_forward(i);
    if (op.block >= 0) {  // the block's own peak: before what this op's output replaces is freed
      std::size_t last = i;
      while (!p.last_of_block(last)) ++last;
      block_transient[last] = std::max(block_transient[last], live - block_base);
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (p.lifetime[j] == ChainLifetime::next_op && j + static_cast<std::size_t>(std::max(1, ops[j].outlives)) == i)
        live -= ops[j].out_bytes;
    }
    if (i > 0 && p.result_dropped[i - 1]) live -= ops[i - 1].out_bytes;  // the block's result, read
    if (op.block >= 0 && p.last_of_block(i)) {
      for (std::size_t j = block_first; j <= i; ++j)
        live -= p.recomputed[j] - (p.result_dropped[j] ? ops[j].out_bytes : 0.0);
    }
  }
  // The forward ends: what only it held goes (the last op's output is the loss, kept for backward).
  for (std::size_t i = 0; i < n; ++i) {
    if (p.lifetime[i] == ChainLifetime::forward) live -= ops[i].out_bytes;
  }
  e.saved = live;
  e.activation_peak = e.forward_peak;
  return block_transient;
}

// Backward, last op first: while op i runs, the tensors saved for ops 0..i are alive (a
// recomputed block's made again when backward reaches its last op).
void backward_pass(const ChainPlan& p, const std::vector<double>& block_transient, ChainEstimate& e) {
  const std::vector<ChainOp>& ops = p.ops;
  const std::size_t n = p.n;
  double acts = 0;
  for (std::size_t i = 0; i < n; ++i) acts += p.saved_for[i] - p.recomputed[i];
  double received = n > 0 ? ops[n - 1].out_bytes : 0;  // the seed gradient, the size of the loss
  auto note_backward = [&](double activations, double ws, const std::string& at) {
    if (ws > e.workspace_peak) {
      e.workspace_peak = ws;
      e.workspace_peak_at = at;
    }
    e.activation_peak = std::max(e.activation_peak, activations);
    if (activations + ws > e.backward_peak) {
      e.backward_peak = activations + ws;
      e.backward_peak_at = at;
    }
  };
  // The residual path's gradient, held between the op that makes it and the op that sums it in;
  // `shared`: still the very tensor the main path carries (an add passed it both ways).
  double held = 0;
  bool shared = false;
  double waiting = 0;  // weight gradients held to the end of the backward (holds_weight_gradient)
  // A recomputed block's backward runs on its own and hands its weight gradients on only when it
  // ends (engine/core/autograd.cpp, checkpoint: captured): until then they are held.
  double captured = 0;
  for (std::size_t k = n; k-- > 0;) {
    const ChainOp& op = ops[k];
    if (p.last_of_block(k)) {
      // The block runs again: its forward's own peak on top of what is live, with the gradient
      // into it waiting; then what it saves stays for its backward. Its result, when its last op
      // saves it for itself, is released first and made again (engine/core/autograd.h, checkpoint).
      const double result = p.lifetime[k] == ChainLifetime::saved_self && !p.result_dropped[k] ? op.out_bytes : 0.0;
      note_backward(acts - result + block_transient[k], received + (shared ? 0 : held) + waiting + captured,
                    op.name + " (recomputed)");
      std::size_t first = k;
      while (first > 0 && p.in_block_with(first - 1, k)) --first;
      for (std::size_t j = first; j <= k; ++j) acts += p.recomputed[j];
    }
    const double side_made = op.side == ChainSide::branch || op.side == ChainSide::transform ? op.side_bytes : 0;
    const double side_held = shared ? 0 : held;
    // The op's own backward, then the casts of its weight gradients to the f32 masters.
    const double during =
        received + op.scratch_bytes + op.dx_bytes + op.dw_bytes + side_held + side_made + waiting + captured;
    const double casting =
        op.dx_bytes + op.carry_bytes + op.dw_bytes + op.dw_master_bytes + side_held + side_made + waiting + captured;
    for (double ws : {during, casting}) note_backward(acts, ws, op.name);
    const double weight_gradient = op.dw_master_bytes > 0 ? op.dw_master_bytes : op.dw_bytes;
    if (op.holds_weight_gradient) waiting += weight_gradient;
    if (op.block >= 0) captured += weight_gradient;
    acts -= p.saved_for[k];
    if (op.side == ChainSide::join && held > 0) {
      // Its input's gradient and the residual's summed into a new tensor (autograd.cpp: sum_into),
      // the gradient it received already released by its backward.
      // (A recomputed block's op has its weight gradient among the captured ones already.)
      const double own_dw = op.block >= 0 ? 0 : op.dw_bytes;
      note_backward(acts, op.dx_bytes + own_dw + side_held + op.dx_bytes + waiting + captured, op.name + " (sum)");
      held = 0;
      shared = false;
    }
    if (op.block >= 0 && (k == 0 || !p.in_block_with(k - 1, k))) captured = 0;  // the block's backward ends
    if (op.side == ChainSide::transform) {
      held = op.side_bytes;  // the shortcut's input gradient; the main path's passes on unchanged
      continue;
    }
    if (op.side == ChainSide::branch) held = op.side_bytes;
    if (op.side == ChainSide::alias) {
      held = received;
      shared = true;
    } else if (!op.passes_gradient) {
      shared = false;  // the main path moves on: the residual's gradient is its own tensor now
    }
    if (!op.passes_gradient) received = op.dx_bytes + op.carry_bytes;
    if (received == 0) break;  // nothing flows further back
  }
}

}  // namespace

ChainEstimate estimate_chain(const std::vector<ChainOp>& ops) {
  ChainEstimate e;
  const ChainPlan plan = plan_chain(ops);
  const std::vector<double> block_transient = forward_pass(plan, e);
  backward_pass(plan, block_transient, e);
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

double seed_activation_bytes(const std::vector<ChainOp>& ops) {
  double bytes = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const bool boundary = ops[i].block < 0 || i + 1 == ops.size() || ops[i + 1].block != ops[i].block;
    if (boundary) bytes += ops[i].out_bytes;
  }
  return bytes;
}

CommBufferEstimate estimate_communication_buffers(const CommBufferPlan& plan) {
  TL_CHECK(plan.world >= 1,
           fmt::format("memory: communication buffers need a world of at least 1, got {}", plan.world));
  TL_CHECK(plan.zero >= 0 && plan.zero <= 3, fmt::format("memory: ZeRO stage {} is not one of 0, 1, 2, 3", plan.zero));
  double all = 0, largest = 0;
  for (double b : plan.bucket_bytes) {
    TL_CHECK(b >= 0, fmt::format("memory: a bucket of {} bytes (must be >= 0)", b));
    all += b;
    largest = std::max(largest, b);
  }
  CommBufferEstimate e;
  if (!plan.buckets_are_gradients && plan.zero < 2) e.persistent += all;
  e.persistent += all * plan.wire_fraction;
  if (plan.staged) e.persistent += all;
  const double agreement = plan.zero >= 1 ? 8.0 * plan.world : 0.0;
  const double scratch = plan.zero == 2 ? largest : 0.0;
  if (scratch >= agreement && scratch > 0) {
    e.transient = scratch;
    e.transient_what = "ZeRO-2's all-gather scratch (the largest bucket)";
  } else if (agreement > 0) {
    e.transient = agreement;
    e.transient_what = "the step's non-finite agreement (one f64 per rank)";
  }
  return e;
}

}  // namespace trainlab
