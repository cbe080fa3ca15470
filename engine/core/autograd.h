// Tape-based reverse-mode autograd.
//
// Every differentiable op that runs while grad mode is on, with at least one input that requires
// grad, appends a Node to the tape: its backward function (which holds the tensors it saved), an
// edge per input, and a sequence number in recording order. backward() replays the nodes reachable
// from the output in reverse recording order, so a node runs only after every node that consumed
// its output has passed its gradient back. Leaves accumulate into .grad (across backward calls,
// until zeroed) and fire their gradient-ready hooks as soon as no node left on the tape can add to
// them; data-parallel training overlaps its all-reduce with the rest of backward through them.
// Every leaf the backward reaches fires exactly once, even when no path delivered it a gradient
// (its .grad is then unchanged, possibly undefined); leaves the backward never reaches do not fire.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace trainlab {

// Grad mode is per thread: data loader threads never record.
class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Grad mode set for a scope (recomputation turns it back on inside a backward).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(GradMode::enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeGuard() { GradMode::set_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Gradients with respect to the inputs, given the gradient of the output. needs[i] says whether
// input i wants one; an entry may be left undefined when it does not. The engine passes its only
// handle to grad_output, so a backward that is done with it early may release it (checkpoint
// does, before its recomputed backward runs, by assigning an empty Tensor through a const_cast).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, const std::vector<bool>& needs)>;

struct Edge {
  std::shared_ptr<Node> node;        // the input was produced by a recorded op
  std::shared_ptr<TensorImpl> leaf;  // or it is a leaf that requires grad
  bool connected() const { return node || leaf; }
};

struct Node {
  std::string name;
  std::uint64_t sequence = 0;  // position on the tape
  std::vector<Edge> inputs;
  std::vector<Shape> input_shapes;
  BackwardFn backward;  // reset after it runs: that frees the saved tensors
};

// Records `output` as produced by op `name` from `inputs` and returns it (now with a grad_fn),
// or returns it untouched when grad mode is off or no input requires grad.
Tensor record(Tensor output, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward);

// Runs reverse mode from `root` with the given seed gradient (the implementation of
// Tensor::backward).
void run_backward(const Tensor& root, const Tensor& seed);

// The gradients of `root` (seeded with `seed`) with respect to the leaves `inputs`, returned
// (undefined where no path reaches one) instead of added to their .grad; no hook fires.
std::vector<Tensor> gradients(const Tensor& root, const Tensor& seed, const std::vector<Tensor>& inputs);

// Activation recomputation (PyTorch's torch.utils.checkpoint). Runs block(x) and keeps only x:
// the tensors the block's ops save for backward are dropped as soon as it returns. Backward runs
// the block again on x, under the autocast it first ran in (the same kernels on the same values,
// so the same activations) and differentiates that, handing x and `parameters` (the leaves the
// block reads) the very gradients a plain backward would have. With grad mode off, or nothing
// requiring grad, it is block(x).
Tensor checkpoint(const std::string& name, const std::function<Tensor(const Tensor&)>& block, const Tensor& x,
                  const std::vector<Tensor>& parameters);

}  // namespace trainlab
