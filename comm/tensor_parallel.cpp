// comm/tensor_parallel.h: Megatron's sums over a communicator, each timed.
#include "comm/tensor_parallel.h"

#include <chrono>
#include <utility>

#include "engine/core/autograd.h"

namespace trainlab::comm {

class TensorParallel::Group : public TensorParallelGroup {
 public:
  Group(Communicator& comm, Algorithm algorithm, AlgorithmThresholds thresholds)
      : comm_(comm), algorithm_(algorithm), thresholds_(std::move(thresholds)) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }

  void allreduce_sum(Tensor& t, const std::string& what) override {
    TL_CHECK(t.is_contiguous(),
             "tensor parallel: " + what + "'s sum needs a dense tensor, got " + shape_str(t.shape()));
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t bytes = static_cast<std::int64_t>(t.nbytes());
    if (comm_.reaches(t.backend())) {
      allreduce(comm_, t.raw_data(), t.numel(), t.dtype(), ReduceOp::sum, algorithm_, thresholds_);
    } else {  // staged through host memory (MPI with a GPU backend)
      std::vector<unsigned char> host(t.nbytes());
      t.copy_to_host(host.data());
      allreduce(comm_, host.data(), t.numel(), t.dtype(), ReduceOp::sum, algorithm_, thresholds_);
      NoGradGuard no_grad;
      t.copy_(Tensor::from_host(host.data(), t.shape(), t.dtype(), t.backend()));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double begin = std::chrono::duration<double>(start.time_since_epoch()).count();
    calls_.push_back({what, bytes, choose_algorithm(algorithm_, bytes, thresholds_), begin, seconds});
  }

  std::vector<TensorParallelCall> take() { return std::exchange(calls_, {}); }

 private:
  Communicator& comm_;
  Algorithm algorithm_;
  AlgorithmThresholds thresholds_;
  std::vector<TensorParallelCall> calls_;
};

TensorParallel::TensorParallel(Communicator& comm, Algorithm algorithm, AlgorithmThresholds thresholds)
    : impl_(std::make_shared<Group>(comm, algorithm, std::move(thresholds))), group_(impl_) {
  TL_CHECK(algorithm != Algorithm::single_copy,
           "tensor parallel: single_copy reduces DDP's buckets in a shared window, not a split layer's sums "
           "(allowed: ring, recursive_doubling, halving_doubling, auto, native)");
}

std::vector<TensorParallelCall> TensorParallel::take_calls() { return impl_->take(); }

}  // namespace trainlab::comm
