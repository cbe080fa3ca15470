#include "engine/step_graph.h"

#include <string>

#include "backends/error.h"
#include "engine/profiler.h"

namespace trainlab {

StepGraph::StepGraph(Backend& backend, const std::vector<Tensor>& inputs,
                     const std::function<Tensor(const std::vector<Tensor>&)>& forward, const NamedTensors& params)
    : backend_(backend) {
  TL_PROFILE_SCOPE("graph.capture");
  TL_CHECK(backend.supports_graphs(),
           "cuda_graph needs a backend that captures device graphs (cuda); backend '" + backend.name() + "' cannot");
  for (const auto& [name, p] : params) {
    TL_CHECK(p.grad().defined(), "cuda_graph: parameter " + name + " has no gradient buffer after the eager steps");
  }
  for (const Tensor& input : inputs) inputs_.push_back(input.detach().clone());
  backend_.synchronize();
  try {
    backend_.begin_capture();
    Tensor loss = forward(inputs_);
    forward_ = backend_.end_capture();
    backend_.begin_capture();
    loss.backward();
    backward_ = backend_.end_capture();
    loss_ = loss.detach();  // the tape is spent; keep only the loss buffer
  } catch (const Error& e) {
    backend_.abort_capture();
    throw Error(std::string("cuda_graph: capturing the training step failed: ") + e.what());
  } catch (...) {
    backend_.abort_capture();  // whatever failed, the stream and the allocator leave capture mode
    throw;
  }
}

}  // namespace trainlab
