// A tensor-parallel group over a communicator (engine/nn/tensor_parallel.h): Megatron's sums through
// comm::allreduce, the algorithm chosen by the message's size as `auto` chooses it (the latency-
// optimal recursive doubling and halving-doubling below the ring's threshold: these all-reduces sit
// on the step's critical path, nothing overlaps them), every call timed for the bench.
//
//   comm::TensorParallel tp(world);
//   model.split_tensor_parallel(tp.group());   // every rank built the whole model from one seed
//   ... forward, loss, backward, optimiser step as usual; tp.take_calls() says what the sums cost
//
// Data x tensor: split the world (Communicator::split) into groups of consecutive ranks for the
// tensor-parallel sums, and the ranks with the same position in each group for the data-parallel
// gradient all-reduce.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/nn/tensor_parallel.h"

namespace trainlab::comm {

// One sum as it ran: its name, bytes per rank, the algorithm auto chose, when it was called
// (steady_clock seconds: one clock for the ranks of one host) and its seconds from the call to its
// return (a rank that arrives first waits for the others inside it).
struct TensorParallelCall {
  std::string what;
  std::int64_t bytes = 0;
  Algorithm algorithm = Algorithm::ring;
  double begin_s = 0, seconds = 0;
};

class TensorParallel {
 public:
  // Over every rank of `comm`, which must outlive it.
  explicit TensorParallel(Communicator& comm, Algorithm algorithm = Algorithm::automatic,
                          AlgorithmThresholds thresholds = {});
  std::shared_ptr<TensorParallelGroup> group() const { return group_; }
  // The sums since the last call, in order.
  std::vector<TensorParallelCall> take_calls();

 private:
  class Group;
  std::shared_ptr<Group> impl_;
  std::shared_ptr<TensorParallelGroup> group_;
};

}  // namespace trainlab::comm
