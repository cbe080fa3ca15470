// Data parallelism as the trainer sees it. The engine knows no communicator: comm::Ddp
// (comm/ddp.h) implements this over MPI or NCCL and is handed to the Trainer. The trainer shards
// the data (DataLoaderOptions::shard_*), calls begin_backward before each micro-step's backward and
// finish_backward after the last one, and checkpoints through rank 0 after a barrier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/state_dict.h"

namespace trainlab {

// The all-reduce data-parallel training uses (the config's `allreduce`): a hand-written one (the
// ring; recursive doubling and halving-doubling, comm/latency_allreduce.h; single-copy over a
// window the host's ranks share, comm/single_copy_allreduce.h, where DDP's buckets lie in one, the
// ring elsewhere), `auto` (one of them chosen by message size, comm::AlgorithmThresholds), or the
// communication library's own (MPI_Allreduce, ncclAllReduce). comm/ implements them all.
enum class AllreduceAlgorithm { ring, native, recursive_doubling, halving_doubling, automatic, single_copy };
// DDP's communication hook (PyTorch's bf16/fp16_compress_hook): gradients cast to a 16-bit type
// (the 1/world scale applied in the cast) before the reduction and cast back after; the ring adds
// in f32 at each hop. Halves the bytes on the wire.
enum class GradCompression { none, bf16, f16 };
// The communicator it runs over (the config's `comm`).
enum class CommBackend { mpi, nccl };

// One optimiser step's communication, as PyTorch DDP logs it.
struct DdpStepStats {
  double backward_compute_s = 0;  // the synchronised micro-step's backward, start to end
  double comm_s = 0;              // all-reduce time, summed over buckets (on the communication thread)
  double overlap_s = 0;           // the part of comm_s inside backward (avg_backward_compute_comm_overlap_time)
  double exposed_s = 0;           // waited for after backward (the step sees this)
  std::vector<std::int64_t> bucket_bytes;  // on the wire (halved by gradient compression)
  // ZeRO: the parameter bytes all-gathered for this step (1 and 2: every bucket once, after the
  // optimiser; 3: each part's before its forward and again before its backward, over the step's
  // micro-steps), and (3) the time the forward and backward waited for them (not in comm_s).
  std::int64_t gather_bytes = 0;
  int gathers = 0;  // the all-gathers those bytes took (a bucket each)
  double gather_wait_s = 0;
  bool device_clock = false;  // the times above are device events' (a GPU), not the host's steady clock
};

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Once, with the model's parameters in registration order: broadcasts them from rank 0, checks
  // that every replica agrees (checksum), builds the buckets and attaches gradient-ready hooks.
  virtual void attach(const NamedTensors& parameters) = 0;
  // Before a micro-step's backward; `sync` false is no_sync: gradients only accumulate locally.
  virtual void begin_backward(bool sync) = 0;
  // After the synchronised backward: waits for every bucket (in order) and leaves each gradient
  // averaged over the world. Returns what the step's communication cost.
  virtual DdpStepStats finish_backward() = 0;
  virtual void barrier() = 0;
  // The largest value over the ranks (the slowest rank's time).
  virtual double max_over_ranks(double value) = 0;
  // The sum over the ranks, added in rank order (every rank gets the same bits): a global
  // gradient norm's squares from the shards of sharded optimiser state.
  virtual double sum_over_ranks(double value) = 0;
  // Every rank's value, in rank order (a collective: every rank calls it).
  virtual std::vector<std::int64_t> gather(std::int64_t value) = 0;
  virtual std::string describe() const = 0;  // "DDP over mpi, 2 ranks, native all-reduce, 2 buckets (1.0 MiB, ...)"
  // What the gradient reduction computes in, for the precision audit: "f32 gradients, summed in f32
  // (the hand-written ring's adds), averaged over 2 ranks by all-reduce".
  virtual std::string gradient_reduction() const = 0;

  // ---- sharded optimiser state (ZeRO-1 and 2; engine/optim/sharded_state.h) ----
  // True when each rank's optimiser updates only its pieces of the parameters: finish_backward
  // then leaves the averaged gradient in those pieces' .grad (a reduce-scatter) and not in the
  // parameters', and finish_step all-gathers the updated parameters.
  virtual bool shards_optimizer_state() const { return false; }
  // 2: the gradients sharded too; 3: the parameters too (shards_parameters)
  virtual int zero_stage() const { return shards_optimizer_state() ? 1 : 0; }
  // After attach: what this rank's optimiser is built over (views of its pieces, or the parameters).
  virtual NamedTensors optimizer_parameters() const = 0;
  // After the optimiser's step (applied or skipped alike, on every rank): all-gathers the
  // parameters and clears their local gradients when sharded; nothing otherwise.
  virtual void finish_step() {}
  // Checkpoints: the whole optimiser state from this rank's (a collective; the merged state on
  // rank 0, an empty one elsewhere), and this rank's cut of a whole one. Identity when unsharded.
  virtual StateDict gather_optimizer_state(const StateDict& local) { return local; }
  virtual StateDict shard_optimizer_state(const StateDict& full) { return full; }

  // ---- sharded parameters (ZeRO-3, FSDP-style) ----
  // True when each rank keeps only its shard of the parameters between uses: a parameter has memory
  // (Tensor::has_data) only from the all-gather before the forward of the part that reads it to the
  // end of that part, and again from before that part's backward to when its gradient is ready.
  virtual bool shards_parameters() const { return false; }
  // Before attach: the units gathered together, the model's parts in forward order (Module::parts:
  // each part's parameter names). None: the whole model is one unit.
  virtual void set_parameter_units(const std::vector<std::vector<std::string>>& units) { (void)units; }
  // Around part `part`'s forward in a step (the step runs the model as its parts): gathers what it
  // reads (the next part's prefetched), and after it releases what no later part reads; the output
  // comes back with a node whose backward gathers the part again before its own backward runs.
  virtual void before_part(int part) { (void)part; }
  virtual Tensor after_part(int part, const Tensor& output) {
    (void)part;
    return output;
  }
  // Every parameter whole on every rank, for what reads or writes them outside a step (evaluation
  // outside the step, a checkpoint, a resume); release_parameters keeps this rank's shard of what
  // they hold then (a resume's values) and drops the rest. The gather is a collective (every rank
  // calls it); the release is local.
  virtual void gather_parameters() {}
  virtual void release_parameters() {}
};

// The parameters whole for a scope (nothing unless they are sharded): DataParallel::gather_parameters
// and release_parameters.
class FullParameters {
 public:
  explicit FullParameters(DataParallel* parallel)
      : parallel_(parallel != nullptr && parallel->shards_parameters() ? parallel : nullptr) {
    if (parallel_ != nullptr) parallel_->gather_parameters();
  }
  ~FullParameters() {
    if (parallel_ != nullptr) parallel_->release_parameters();
  }
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;

 private:
  DataParallel* parallel_;
};

}  // namespace trainlab
