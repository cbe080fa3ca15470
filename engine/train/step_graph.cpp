#include "engine/train/step_graph.h"

#include <string>

#include "backends/error.h"
#include "engine/instrument/profiler.h"

namespace trainlab {

GraphCapture& require_graph_capture(Backend& backend) {
  GraphCapture* graphs = backend.graph_capture();
  TL_CHECK(graphs != nullptr,
           "cuda_graph needs a backend that captures device graphs (cuda); backend '" + backend.name() + "' cannot");
  return *graphs;
}

StepGraph::StepGraph(Backend& backend, const std::vector<Tensor>& inputs,
                     const std::function<Tensor(const std::vector<Tensor>&)>& forward, const NamedTensors& params)
    : backend_(backend), graphs_(require_graph_capture(backend)) {
  TL_PROFILE_SCOPE("graph.capture");
  for (const auto& [name, p] : params) {
    TL_CHECK(p.grad().defined(), "cuda_graph: parameter " + name + " has no gradient buffer after the eager steps");
  }
  for (const Tensor& input : inputs) inputs_.push_back(input.detach().clone());
  backend_.synchronize();
  try {
    graphs_.begin_capture();
    Tensor loss = forward(inputs_);
    forward_ = graphs_.end_capture();
    graphs_.begin_capture();
    loss.backward();
    backward_ = graphs_.end_capture();
    loss_ = loss.detach();  // the tape is spent; keep only the loss buffer
  } catch (const Error& e) {
    graphs_.abort_capture();
    throw Error(std::string("cuda_graph: capturing the training step failed: ") + e.what());
  } catch (...) {
    graphs_.abort_capture();  // whatever failed, the stream and the allocator leave capture mode
    throw;
  }
}

}  // namespace trainlab
