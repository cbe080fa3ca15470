// Training memory, estimated (seed 003's accounting; issue 13's estimator, first part): persistent
// model state per worker under ZeRO stages 0-3, from bytes per parameter for the parameters (q_p),
// the gradients (q_g), a master copy and the optimiser's moments (q_o = master + moments).
//
//   stage 0: P (q_p + q_g + q_o)            every worker holds everything
//   stage 1: P (q_p + q_g) + P q_o / W      optimiser state sharded
//   stage 2: P q_p + P (q_g + q_o) / W      gradients too
//   stage 3: P (q_p + q_g + q_o) / W        parameters too
//
// Activations, workspaces, gathered parameters, communication buffers and fragmentation are not in
// it: it is one term of a peak-memory estimate, not a promise that a run fits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/dtype.h"

namespace trainlab {

struct StateBytes {  // bytes per parameter; the defaults are seed 003's mixed-precision Adam
  double param = 2, grad = 2, master = 4, moments = 8;
  double optimizer() const { return master + moments; }
};

struct PersistentState {  // bytes per worker
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};

// Throws Error for parameters <= 0, workers < 1 or a stage outside 0..3, naming the value.
PersistentState persistent_state(double parameters, int workers, int zero_stage, const StateBytes& bytes);

// The bytes per parameter trainlab itself keeps for an optimiser ("sgd" with momentum, "adamw") at a
// compute dtype: f32 parameters and gradients (under bf16/f16 autocast they are the f32 masters; the
// low-precision working copies are transient and not counted here), no separate master, and the
// optimiser's f32 moments (one for SGD with momentum > 0, two for AdamW).
StateBytes trainlab_state_bytes(const std::string& optimizer, double momentum);

// ---- activations and backward workspaces: a model's forward as a chain of ops ----
//
// A model that can describe itself (Module::memory_chain) lists the ops of its forward in order,
// each with the tensors it allocates and how long they live, and what its backward allocates. The
// estimate walks the chain: the forward's live activations after each allocation, then the
// backward in reverse, where an op's saved tensors are freed once it has run and its workspace is
// the gradient it received, the input gradient it makes and its transient weight gradients.
enum class ChainLifetime {
  next_op,     // freed once the next `outlives` ops' outputs exist (a C++ temporary lives to the
               // end of its full expression: max_pool2d(relu(x)) holds relu's input through the pool)
  saved_self,  // saved for this op's backward
  saved_next,  // saved for the next op's backward (its input)
  forward,     // held until the forward ends, then freed
};

// A residual block's second gradient path, for the backward of y = f(x) + shortcut(x), whose chain
// is f's ops in order: the op that adds the residual makes its gradient beside its own input's
// (branch: side_bytes allocated, then held; alias: the gradient it received is also the residual's,
// held past the next op without a copy, as an add's backward passes it both ways), an op on the
// shortcut that turns the held gradient into its input's (transform: side_bytes allocated, the
// held one freed), and the block's first op, whose input is x: its gradient and the held one are
// summed into a new tensor (join), the gradient that flows on.
enum class ChainSide { none, branch, alias, transform, join };

struct ChainOp {
  std::string name;
  double out_bytes = 0;  // the output it allocates
  ChainLifetime out_lifetime = ChainLifetime::next_op;
  double saved_bytes = 0;  // other tensors it allocates and keeps for its backward (a pool's
                           // workspace, an input cast to the compute dtype)
  // Backward: the gradient it allocates for its input (0: the input needs none, or it passes the
  // gradient it received on unchanged, as a bias add does: passes_gradient), other temporaries (a
  // fused ReLU's masked gradient), the weight gradients it allocates (accumulated into the leaves
  // and freed), and their f32 copies when the weights are cast from f32 masters.
  double dx_bytes = 0;
  bool passes_gradient = false;
  double scratch_bytes = 0, dw_bytes = 0, dw_master_bytes = 0;
  // Of the gradients its backward hands on, the bytes it received and passes through untouched
  // beside its own dx (attention's dv, made by the second matmul, waits through the softmax and the
  // first matmul): counted in what the next op receives, not made again.
  double carry_bytes = 0;
  // Its weight gradient waits in autograd to the end of the backward (a tied weight's first
  // contribution: the head's, until the token embedding's is summed with it); its f32 copy where
  // there is one.
  bool holds_weight_gradient = false;
  int outlives = 1;  // next_op: how many of the following ops' outputs appear before it is freed
  // The residual path's role of this op in backward (ChainSide) and the gradient it allocates there.
  // A transform op is not on the main path: the gradient the main path carries passes it unchanged.
  ChainSide side = ChainSide::none;
  double side_bytes = 0;
  // Recomputation (engine/core/autograd.h, checkpoint): consecutive ops with the same block >= 0 are one
  // recomputed block. What they save is dropped when the block ends (its output and its input
  // stay) and made again when backward reaches the block's last op.
  int block = -1;
  // Whether its backward needs its input (most ops'; a global average pool needs only the shape).
  // A recomputed block's result is kept after its forward only when the op after it needs it (or
  // is another block, which holds its input); otherwise it goes once that op has run, and is made
  // again with the block in backward.
  bool saves_input = true;
};

struct ChainEstimate {
  double forward_peak = 0;     // activations, at most live at once during the forward
  double activation_peak = 0;  // activations at most live at once in the step (recomputation in backward too)
  double saved = 0;            // activations live when the forward ends (what backward needs)
  double workspace_peak = 0;   // backward temporaries, at most live at once
  double backward_peak = 0;    // activations + workspaces, at most live at once during backward
  std::string forward_peak_at, workspace_peak_at, backward_peak_at;  // the op where each occurred
};
ChainEstimate estimate_chain(const std::vector<ChainOp>& ops);

// What the estimate needs to know about a step.
struct ChainShape {
  std::int64_t batch = 0;
  DType dtype = DType::f32;  // compute dtype (bf16/f16: autocast over f32 masters)
  bool channels_last = false;
};

// The estimate of a training step's tensor memory by category (engine/instrument/memory_usage.h's names),
// in bytes, from the parameter count, the optimiser and the model's chain.
struct TrainingMemoryEstimate {
  double parameters = 0, gradients = 0, optimizer_state = 0, working_copies = 0;
  ChainEstimate chain;
  double persistent() const { return parameters + gradients + optimizer_state + working_copies; }
  // The step's peak: the persistent state plus the larger of the forward's and the backward's.
  double peak() const { return persistent() + std::max(chain.forward_peak, chain.backward_peak); }
  const char* peak_phase() const { return chain.backward_peak > chain.forward_peak ? "backward" : "forward"; }
};
TrainingMemoryEstimate estimate_training_memory(std::int64_t parameters, DType param_dtype, DType compute_dtype,
                                                const std::string& optimizer, double momentum,
                                                const std::vector<ChainOp>& chain);

// Seed 003's activation formula, M = B x S x H x q for each saved layer: the outputs of the chain's
// ops (out_bytes is B x S x H x q at the step's batch and compute dtype), every op's when nothing is
// recomputed; under recomputation the ops outside a recomputed block and each block's output (its
// boundary: what the seed's "stores selected boundaries" keeps). No transient, no workspace, no
// tensor freed early: the seed's term, not the estimator's walk.
double seed_activation_bytes(const std::vector<ChainOp>& ops);

// ---- communication buffers: what data parallelism allocates beside the gradients ----
//
// Seed 003 leaves them out of its accounting ("excludes activations, temporary gathered parameters,
// communication buffers"). trainlab's DDP (comm/ddp.h) allocates, in the communication category, per
// rank:
//   persistent: the buckets when they are not the gradients (gradient_as_bucket_view off, stages
//     0-1; from stage 2 they are gradient shards' staging, counted as gradients), their packed
//     copies under gradient compression, their host staging copies where the communicator cannot
//     reach the backend's memory;
//   transient, one at a time: ZeRO-2's all-gather scratch (the largest bucket) and, with sharded
//     optimiser state, the step's agreement on a non-finite gradient (one f64 per rank).
// ZeRO-3's gathered parameters are parameters (the parameters category), not buffers.
struct CommBufferPlan {
  std::vector<double> bucket_bytes;  // each bucket's bytes in the gradients' dtype, launch order
  int world = 1, zero = 0;
  bool buckets_are_gradients = true;  // gradient_as_bucket_view (or the buckets in a shared window)
  double wire_fraction = 0;           // compressed: wire bytes per gradient byte (0: not compressed)
  bool staged = false;                // copied through host buffers (a device the communicator cannot reach)
};
struct CommBufferEstimate {
  double persistent = 0, transient = 0;
  std::string transient_what;  // "ZeRO-2's all-gather scratch (the largest bucket)", ... ("" none)
  double peak() const { return persistent + transient; }
};
// Throws Error for a world < 1, a stage outside 0..3 or a negative bucket, naming the value.
CommBufferEstimate estimate_communication_buffers(const CommBufferPlan& plan);

}  // namespace trainlab
