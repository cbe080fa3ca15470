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

#include <string>

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

}  // namespace trainlab
