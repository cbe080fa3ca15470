// Megatron's f and g (engine/nn/tensor_parallel.h): forward and backward side by side.
//   tp_enter   y = x                dx = sum over the group of dy
//   tp_reduce  y = sum of x         dx = dy
#include "engine/nn/tensor_parallel.h"

#include "engine/core/autograd.h"

namespace trainlab {

namespace {

// A dense copy of t summed over the group.
Tensor summed_over(TensorParallelGroup& group, const Tensor& t, const std::string& what) {
  NoGradGuard no_grad;
  Tensor out = t.is_contiguous() ? t.clone() : t.contiguous();  // a copy of its own either way, made once
  group.allreduce_sum(out, what);
  return out;
}

}  // namespace

Tensor tp_enter(TensorParallelGroup& group, const Tensor& x, const std::string& what) {
  TL_CHECK(x.defined(), "tp_enter: the input of " + what + " is undefined");
  TensorParallelGroup* g = &group;
  return record(x, "tp_enter", {x}, [g, what](const Tensor& dy, const std::vector<bool>& needs) {
    return std::vector<Tensor>{needs[0] ? summed_over(*g, dy, what + " backward") : Tensor()};
  });
}

Tensor tp_reduce(TensorParallelGroup& group, const Tensor& x, const std::string& what) {
  TL_CHECK(x.defined(), "tp_reduce: the input of " + what + " is undefined");
  const Tensor y = summed_over(group, x, what + " forward");
  return record(y, "tp_reduce", {x}, [](const Tensor& dy, const std::vector<bool>& needs) {
    return std::vector<Tensor>{needs[0] ? dy : Tensor()};
  });
}

Tensor tensor_slice(const Tensor& t, std::int64_t dim, int rank, int ranks, const std::string& what) {
  TL_CHECK(ranks >= 1 && rank >= 0 && rank < ranks,
           "tensor_slice: rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " ranks");
  const std::int64_t n = t.size(dim);
  TL_CHECK(n % ranks == 0, what + " (" + std::to_string(n) + ") do not divide over " + std::to_string(ranks) +
                               " tensor-parallel ranks (allowed: a rank count that divides " + std::to_string(n) + ")");
  NoGradGuard no_grad;
  const std::int64_t part = n / ranks;
  return t.narrow(dim, rank * part, part).contiguous().clone().detach();
}

const char* linear_split_name(LinearSplit split) {
  switch (split) {
    case LinearSplit::none:
      return "none";
    case LinearSplit::columns:
      return "columns";
    case LinearSplit::rows:
      return "rows";
    case LinearSplit::rows_of_whole_input:
      return "rows of whole input";
  }
  return "?";
}

}  // namespace trainlab
