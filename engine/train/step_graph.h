// One training micro-step captured as device graphs (the compile rung on a GPU: CUDA graphs) and
// replayed: the forward to the loss, and its backward into the gradient buffers, as two graphs so
// that the phases stay separately timed. The caller keeps what the graphs read and write where
// the capture saw it: the inputs it copies each batch into (inputs()), the parameters (updated in
// place by the optimiser) and the gradient buffers (zeroed, never dropped, between steps).
// Capturing records without running anything: replay both for the step that captured them.
#pragma once

#include <functional>
#include <vector>

#include "engine/core/state_dict.h"
#include "engine/core/tensor.h"

namespace trainlab {

// The backend's graph capture, or an Error saying that cuda_graph needs one.
GraphCapture& require_graph_capture(Backend& backend);

class StepGraph {
 public:
  // `inputs` are cloned into the graphs' fixed input buffers; `forward` computes the loss from
  // them. `params` must all hold gradient buffers already (a few eager steps first).
  StepGraph(Backend& backend, const std::vector<Tensor>& inputs,
            const std::function<Tensor(const std::vector<Tensor>&)>& forward, const NamedTensors& params);

  // The fixed input buffers: copy each batch in (copy_) before forward().
  std::vector<Tensor>& inputs() { return inputs_; }
  void forward() { graphs_.replay(forward_); }
  void backward() { graphs_.replay(backward_); }
  const Tensor& loss() const { return loss_; }  // rewritten by every forward()

 private:
  Backend& backend_;
  GraphCapture& graphs_;
  std::vector<Tensor> inputs_;
  Tensor loss_;
  int forward_ = -1, backward_ = -1;
};

}  // namespace trainlab
