// Tensor parallelism, seed 004's second door (Shoeybi et al. 2019, Megatron-LM): each layer cut
// across its width over the ranks of a group, every rank holding a slice of its weights. A pair of
// linear layers splits with one all-reduce forward and one backward:
//
//   column-parallel  Y_r = X W_r^T + b_r    W's output rows (and the bias) cut: each rank computes
//                                            its slice of the output from the whole input
//   row-parallel     Y = sum_r Y_r W_r^T + b W's input columns cut: each rank multiplies its slice
//                                            of the input; the partial products are summed
//
// with two conjugate operators around them (Megatron's f and g):
//   tp_enter   the identity forward; backward, the input's gradient summed over the group (every
//              rank's slice contributed to it)
//   tp_reduce  forward, the partial outputs summed over the group; the identity backward
//
// The GPT's MLP (c_fc column, GELU on the slice, c_proj row) and attention (c_attn column by head:
// each rank its heads' q, k and v; c_proj row) each cost one all-reduce of the block's activations
// forward and one backward; a layer whose input is whole on every rank (the ResNet's head) is cut
// by rows after a narrow (`rows_of_whole_input`). Everything else (norms, embeddings, the other
// layers) is replicated: the gradients that reach it are the same on every rank, since every
// branch's comes through tp_enter's sum, so no other communication is needed.
//
// The engine knows only the group's interface; comm/tensor_parallel.h gives one over a communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/tensor.h"

namespace trainlab {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `t` (dense, in its backend's memory) over the group's ranks in place: every rank ends with
  // the same bits. `what` names the call for timings and timeouts ("attn.c_proj forward").
  virtual void allreduce_sum(Tensor& t, const std::string& what) = 0;
};

// Megatron's f and g (above); `what` names the layer in the group's timings.
Tensor tp_enter(TensorParallelGroup& group, const Tensor& x, const std::string& what);
Tensor tp_reduce(TensorParallelGroup& group, const Tensor& x, const std::string& what);

// Rank `rank` of `ranks`' equal slice of t along `dim` (a dense copy, no gradient history); the
// length must divide, or Error naming it (`what`: "gpt: c_fc's 512 output features").
Tensor tensor_slice(const Tensor& t, std::int64_t dim, int rank, int ranks, const std::string& what);

enum class LinearSplit { none, columns, rows, rows_of_whole_input };
const char* linear_split_name(LinearSplit split);  // "none", "columns", "rows", "rows of whole input"

}  // namespace trainlab
