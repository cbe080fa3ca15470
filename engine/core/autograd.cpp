#include "engine/core/autograd.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "engine/core/autocast.h"
#include "engine/core/observer.h"
#include "engine/core/rng.h"

namespace trainlab {

namespace {
thread_local bool grad_mode_enabled = true;
std::atomic<std::uint64_t> next_sequence{1};

// acc += contribution, out of place: a gradient a backward function returned may be a view of
// a buffer that another node still reads, so it is never written through. Summed in the memory
// order both share (channels_last gradients stay channels_last: no reorder there and back), else
// row-major; each element's sum is the same either way.
void sum_into(Tensor& acc, const Tensor& contribution) {
  if (!acc.defined()) {
    acc = contribution;
    return;
  }
  const MemoryFormat format =
      acc.memory_format() == contribution.memory_format() ? acc.memory_format() : MemoryFormat::contiguous;
  const Tensor a = acc.contiguous(format), b = contribution.contiguous(format);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.backend(), format);
  a.backend().binary(BinaryOp::add, a.dtype(), a.raw_data(), b.raw_data(), out.raw_data(), a.numel());
  acc = out;
}

// A leaf's .grad persists across backward calls: add in place, or start it as a private copy.
void accumulate_leaf_grad(Tensor& param, const Tensor& contribution) {
  Tensor grad = param.grad();
  if (grad.defined()) {
    // Added in the gradient's own memory order (row-major, or channels_last), in place: the
    // gradient may be a view DDP reduces (gradient_as_bucket_view).
    const MemoryFormat format = grad.memory_format();
    TL_CHECK(grad.is_contiguous(format), "backward: the gradient of " + param.name() +
                                             " is not dense (a strided view); it cannot be accumulated in place");
    const Tensor dense = contribution.contiguous(format);
    grad.backend().axpy(grad.dtype(), grad.numel(), 1.0, dense.raw_data(), grad.raw_data());
  } else {
    param.set_grad(contribution.clone());
  }
}
}  // namespace

bool GradMode::enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

Tensor record(Tensor output, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward) {
  if (!GradMode::enabled()) return output;
  observe::op(name, inputs, output);  // the precision audit's record, when one is on
  bool any = false;
  for (const auto& input : inputs) any = any || input.requires_grad();
  if (!any) return output;

  auto node = std::make_shared<Node>();
  node->name = name;
  node->sequence = next_sequence.fetch_add(1);
  node->backward = std::move(backward);
  for (const auto& input : inputs) {
    Edge edge;
    if (input.requires_grad()) {
      if (input.grad_fn())
        edge.node = input.grad_fn();
      else
        edge.leaf = input.impl();
    }
    node->inputs.push_back(std::move(edge));
    node->input_shapes.push_back(input.defined() ? input.shape() : Shape{});
  }
  // The output is a fresh handle: record never changes what a caller already holds.
  auto impl = std::make_shared<TensorImpl>(*output.impl());
  impl->requires_grad = true;
  impl->grad_fn = std::move(node);
  impl->grad = Tensor();
  impl->grad_ready_hooks.clear();
  return Tensor(std::move(impl));
}

namespace {

// Reverse mode from the node `root_fn` with the seed gradient `seed`. Leaves' gradients are added
// to .grad (and their hooks fired), or, with `capture`, stored there instead.
void backward_nodes(const std::shared_ptr<Node>& root_fn, Tensor seed,
                    std::unordered_map<TensorImpl*, Tensor>* capture);

void backward_from(const Tensor& root, Tensor seed, std::unordered_map<TensorImpl*, Tensor>* capture) {
  TL_CHECK(root.requires_grad(),
           "backward: the output does not require grad (no input of its graph requires grad, "
           "or it was computed under NoGradGuard)");
  if (root.is_leaf()) {
    NoGradGuard no_grad;
    Tensor param(root.impl());
    if (capture != nullptr) {
      (*capture)[root.impl().get()] = seed;
      return;
    }
    accumulate_leaf_grad(param, seed);
    for (auto& hook : root.impl()->grad_ready_hooks) hook(param);
    return;
  }
  backward_nodes(root.grad_fn(), std::move(seed), capture);
}

void backward_nodes(const std::shared_ptr<Node>& root_fn, Tensor seed,
                    std::unordered_map<TensorImpl*, Tensor>* capture) {
  NoGradGuard no_grad;  // gradients are not themselves differentiated

  // Collect the reachable part of the tape and count, per leaf, the edges still to deliver.
  std::vector<Node*> nodes;
  std::unordered_set<Node*> seen;
  std::unordered_map<TensorImpl*, int> pending;
  std::vector<Node*> stack{root_fn.get()};
  seen.insert(stack.back());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    TL_CHECK(node->backward, "backward: the graph through '" + node->name +
                                 "' was already freed by an earlier backward (run the forward again)");
    nodes.push_back(node);
    for (const auto& edge : node->inputs) {
      if (edge.node && seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
      if (edge.leaf) ++pending[edge.leaf.get()];
    }
  }
  // Reverse recording order: every consumer of a node's output was recorded after it.
  std::sort(nodes.begin(), nodes.end(), [](Node* a, Node* b) { return a->sequence > b->sequence; });

  std::unordered_map<Node*, Tensor> node_grads;
  std::unordered_map<TensorImpl*, Tensor> leaf_grads;
  node_grads[root_fn.get()] = std::move(seed);

  auto deliver_to_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor* contribution) {
    if (contribution) sum_into(leaf_grads[leaf.get()], *contribution);
    if (--pending[leaf.get()] > 0) return;
    // Final for this backward: add to .grad (which persists across backward calls) and announce.
    Tensor param(leaf);
    auto it = leaf_grads.find(leaf.get());
    if (capture != nullptr) {
      if (it != leaf_grads.end()) (*capture)[leaf.get()] = it->second;
      return;
    }
    if (it != leaf_grads.end()) {  // else no path delivered a gradient: .grad is unchanged (maybe undefined)
      accumulate_leaf_grad(param, it->second);
      leaf_grads.erase(it);
    }
    for (auto& hook : leaf->grad_ready_hooks) hook(param);
  };

  for (Node* node : nodes) {
    auto it = node_grads.find(node);
    std::vector<Tensor> input_grads;
    if (it != node_grads.end()) {
      // The only handle to the gradient from here on (see BackwardFn: a backward may release it).
      Tensor grad_output = std::move(it->second);
      node_grads.erase(it);
      std::vector<bool> needs;
      for (const auto& edge : node->inputs) needs.push_back(edge.connected());
      const bool timed = observe::spans_wanted();
      const std::int64_t start_ns = timed ? observe::now_ns() : 0;
      input_grads = node->backward(grad_output, needs);
      if (timed) observe::span(node->name + ".backward", start_ns, observe::now_ns());
      TL_CHECK(input_grads.size() == node->inputs.size(), "backward of '" + node->name + "' returned " +
                                                              std::to_string(input_grads.size()) + " gradients for " +
                                                              std::to_string(node->inputs.size()) + " inputs");
    }
    node->backward = nullptr;  // frees the saved tensors; a second backward is refused above

    for (std::size_t i = 0; i < node->inputs.size(); ++i) {
      const Edge& edge = node->inputs[i];
      if (!edge.connected()) continue;
      const Tensor* grad = (i < input_grads.size() && input_grads[i].defined()) ? &input_grads[i] : nullptr;
      if (grad) {
        TL_CHECK(grad->shape() == node->input_shapes[i],
                 "backward of '" + node->name + "' produced a gradient of shape " + shape_str(grad->shape()) +
                     " for input " + std::to_string(i) + " of shape " + shape_str(node->input_shapes[i]));
      }
      if (edge.node) {
        if (grad) sum_into(node_grads[edge.node.get()], *grad);
      } else {
        deliver_to_leaf(edge.leaf, grad);
      }
    }
  }
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& seed) { backward_from(root, seed, nullptr); }

namespace {

std::vector<Tensor> captured_for(const std::unordered_map<TensorImpl*, Tensor>& captured,
                                 const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  for (const Tensor& input : inputs) {
    auto it = input.defined() ? captured.find(input.impl().get()) : captured.end();
    out.push_back(it != captured.end() ? it->second : Tensor());
  }
  return out;
}

}  // namespace

std::vector<Tensor> gradients(const Tensor& root, const Tensor& seed, const std::vector<Tensor>& inputs) {
  std::unordered_map<TensorImpl*, Tensor> captured;
  backward_from(root, seed, &captured);
  return captured_for(captured, inputs);
}

Tensor checkpoint(const std::string& name, const std::function<Tensor(const Tensor&)>& block, const Tensor& x,
                  const std::vector<Tensor>& parameters) {
  bool any = x.requires_grad();
  for (const Tensor& p : parameters) any = any || p.requires_grad();
  if (!GradMode::enabled() || !any) return block(x);
  // The forward as it would run (recorded, so every op takes its training path), its graph
  // dropped with the handle: only x, kept by this node, survives.
  const CounterStream draws = dropout_stream();  // where the block's dropout masks start
  const Tensor output = block(x.detach()).detach();
  const DType dtype = autocast_dtype();
  const WorkingCopies* copies = autocast_working_copies();
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), parameters.begin(), parameters.end());
  return record(
      output, name.c_str(), inputs,
      [block, x, parameters, dtype, copies, name, draws](const Tensor& grad_output, const std::vector<bool>& needs) {
        TL_SPAN("recompute");
        std::vector<Tensor> leaves{x.detach()};
        if (needs[0]) leaves[0].set_requires_grad(true);
        leaves.insert(leaves.end(), parameters.begin(), parameters.end());
        Tensor again;
        {
          GradModeGuard grad_on(true);
          AutocastGuard autocast(dtype, copies);
          RecomputeScope recompute;  // memory accounting counts its allocations as activations
          // The same dropout masks as the first forward drew; the stream then goes on
          // where it was.
          const CounterStream now = dropout_stream();
          dropout_stream() = draws;
          again = block(leaves[0]);
          dropout_stream() = now;
        }
        TL_CHECK(again.requires_grad(), name + ": the recomputed block does not depend on its inputs");
        // Neither the block's output values nor this node's hold on the seed are needed
        // past this point: both are released, so recomputation holds no more than the
        // plain backward does (see BackwardFn).
        const std::shared_ptr<Node> root = again.grad_fn();
        TL_CHECK(root != nullptr, name + ": the recomputed block returned one of its inputs");
        again = Tensor();
        Tensor seed = grad_output;
        const_cast<Tensor&>(grad_output) = Tensor();
        std::unordered_map<TensorImpl*, Tensor> captured;
        backward_nodes(root, std::move(seed), &captured);
        return captured_for(captured, leaves);
      });
}

}  // namespace trainlab
