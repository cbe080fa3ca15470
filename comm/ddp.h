// DDP: data-parallel training over a Communicator, attached to the engine through its
// gradient-ready hooks (engine/train/distributed.h).
//
// Buckets, as in PyTorch DDP: parameters are taken in reverse registration order (the order
// backward finishes them) and packed into buckets; the first bucket closes at 1 MiB
// (first_bucket_mb), later ones at bucket_cap_mb (a bucket closes once it reaches its cap, so one
// large parameter may exceed it).
//
// The buckets live in the backend's memory (device memory on a GPU), each parameter's gradient a
// row-major range of one. With gradient_as_bucket_view (the default) the gradients are those
// ranges (PyTorch's gradient_as_bucket_view): backward accumulates straight into the bucket and
// nothing is copied, before or after the all-reduce. Without it, a gradient is copied into its
// range when it is ready and the averaged range copied back at the end, both on the backend (a
// device copy on a GPU). Nothing moves a gradient through the host: when the last gradient of a
// bucket is ready, the hook records an event on the backend's compute stream (a GPU backend's;
// CPU backends finish each call before returning) and hands the bucket to the communication
// thread, which makes the communicator wait for that event (on the device for NCCL) and reduces
// the bucket in place (average; a hand-written all-reduce, auto's choice by the bucket's size, or
// the library's) while backward goes on. A communicator that
// cannot reach the backend's memory (MPI with the cuda backend) gets the bucket through a pinned
// host buffer, copied on the communication thread. Buckets are launched and completed in order;
// finish_backward waits for them in order.
//
// Single-copy (allreduce single_copy, or auto from the thresholds' single_copy_from; ddp_single_copy.cpp):
// where every rank is on one host and the buckets are host memory (zero 0, no compression), the
// buckets chosen lie in one window the ranks share (Tensor::borrowed) and are averaged there by the
// single-copy all-reduce: each rank sums its chunk of every rank's bucket where it lies, in rank
// order, and writes the sum into every bucket. At 2 ranks the same bits as every other algorithm
// (one addition, then the 1/world scale); beyond, each element summed in rank order. Where the
// window cannot be (another host, ZeRO, compression, a GPU's memory) the buckets stay where they
// were and single_copy runs the ring, said by describe(). At the end the buckets' memory is made
// this process's own (the gradients outlive DDP) and the window freed, a collective.
//
// ZeRO-1 (zero = 1): each bucket is cut into world-size chunks (comm::shard_chunk) and rank r owns
// chunk r of every bucket, so the shards are balanced by bytes whatever the parameter sizes. A
// bucket is reduce-scattered instead of all-reduced (comm::reduce_scatter: the ring's first half,
// halving-doubling's, recursive doubling's whole all-reduce, or the library's collective), the
// owned chunk's averaged gradient lands in the .grad of this rank's pieces (the views its optimiser
// is built over), and after the optimiser's step every bucket's parameters are all-gathered from
// their owners. Each hand-written reduce-scatter is bit for bit its all-reduce's first half, so a
// sharded run's gradients are plain DDP's with the same algorithm.
//
// ZeRO-2 (zero = 2): the same shards, and the gradients sharded too, as DeepSpeed's stage 2 does.
// A bucket's memory exists only from the backward that fills it to its reduce-scatter: it is
// allocated when backward reaches it (when the bucket before it is launched, or its first gradient
// is ready), the gradients are its views while it lives (gradient_as_bucket_view; without it each
// is copied in and dropped), and once its reduce-scatter is done this rank's averaged chunk is
// copied into this rank's gradient shard of that bucket (the .grad of its pieces, 1/W of it) and
// the bucket and its parameters' gradients are released, during backward where the communication
// has finished by then. After the optimiser's step the shards are spent and released too, and each
// bucket is all-gathered through one transient buffer: between steps a rank holds no gradient. Micro-steps under
// no_sync accumulate whole local gradients, as DDP's do; the synchronised one moves them into the buckets. The
// reductions are ZeRO-1's, so a run is bit for bit ZeRO-1's. (ddp_zero.cpp holds the sharding.)
//
// ZeRO-3 (zero = 3), FSDP-style: ZeRO-2, and the parameters sharded too. The buckets are the
// gathering units: one per part of the model (Module::parts, set_parameter_units; the parts' own
// parameters, in reverse registration order as DDP's; a model without parts is DDP's buckets, all
// gathered together), so a bucket is FSDP's flat parameter. Between uses a rank holds its chunk of
// each bucket's parameters (the shard its optimiser updates in place) and every parameter tensor
// has no memory (Tensor::release_data). Before a part's forward its buckets are all-gathered into
// the bucket's buffer (the parameters are its views; its memory exists only from a gather to a
// release: Tensor::release_data, so the handles the ops saved lose it too), the next part's gather
// queued behind it (prefetch); after the part the buckets no later part reads are released (the
// last two parts' are kept for the backward, which starts with them). The part's output carries a node whose
// backward gathers the part again (and queues the part before it) before the part's own backward
// runs; a bucket's parameters are released as soon as its last gradient is ready, in no_sync
// micro-steps too. Gathers and reductions run in the order they were asked for on the communication
// thread, the same order on every rank. The buckets differ from DDP's, so at more than 2 ranks
// the ring sums an element's contributions in another order than DDP's (equal within f32's
// rounding; at 2 ranks the sum is the same bits). Needs a communicator that reaches the backend's
// memory. With communication off (timing only) a gather keeps zeros where the other ranks'
// chunks would be.
//
// Every parameter must receive a gradient in each synchronised backward (find_unused_parameters
// is not supported): a missing one is an error naming it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/single_copy_allreduce.h"
#include "engine/core/tensor.h"
#include "engine/instrument/memory_model.h"
#include "engine/optim/sharded_state.h"
#include "engine/train/config.h"
#include "engine/train/distributed.h"

namespace trainlab::comm {

// DDP's options are the run's ParallelConfig (engine/train/config.h), handed over whole: bucket_cap_mb,
// first_bucket_mb, allreduce (ring | native), rendezvous, zero, gradient_as_bucket_view and
// grad_compress (the communication hook: the buckets cast to bf16/f16 for the reduction, the
// 1/world scale in the cast; the ring adds in f32 at each hop, and back).
using DdpOptions = ParallelConfig;

// Bucket assignment alone (for tests and for printing): parameter indices (registration order)
// per bucket, buckets in launch order.
std::vector<std::vector<int>> assign_buckets(const std::vector<std::int64_t>& parameter_bytes, std::int64_t first_cap,
                                             std::int64_t cap);

class Ddp final : public DataParallel {
 public:
  Ddp(Communicator& comm, const DdpOptions& options);
  ~Ddp() override;
  Ddp(const Ddp&) = delete;
  Ddp& operator=(const Ddp&) = delete;

  int rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.size(); }
  void attach(const NamedTensors& parameters) override;
  void begin_backward(bool sync) override;
  DdpStepStats finish_backward() override;
  void barrier() override { comm_.barrier(); }
  double max_over_ranks(double value) override;
  double sum_over_ranks(double value) override;
  std::string describe() const override;
  std::string gradient_reduction() const override;

  bool shards_optimizer_state() const override { return options_.zero >= 1; }
  int zero_stage() const override { return static_cast<int>(options_.zero); }
  bool shards_gradients() const { return options_.zero >= 2; }
  bool shards_parameters() const override { return options_.zero >= 3; }
  void set_parameter_units(const std::vector<std::vector<std::string>>& units) override;
  void before_part(int part) override;
  Tensor after_part(int part, const Tensor& output) override;
  void gather_parameters() override;
  void release_parameters() override;
  // The bytes of parameter memory this rank holds now: ZeRO-3's shards and the gathered buckets
  // alive (every parameter's bytes otherwise).
  std::int64_t parameter_bytes_held() const;
  NamedTensors optimizer_parameters() const override;
  void finish_step() override;
  StateDict gather_optimizer_state(const StateDict& local) override;
  StateDict shard_optimizer_state(const StateDict& full) override;
  // ZeRO-1/2: the pieces rank `rank` owns (in bucket order), and this rank's optimiser elements.
  std::vector<ParameterPiece> pieces_of(int rank) const;
  // The bytes of gradient memory this rank holds now: the buckets alive, ZeRO-2's gradient shards
  // and the parameters' own gradients (what the memory accounting checks between steps).
  std::int64_t gradient_bytes_held() const;

  // Every rank's value, in rank order (one all-reduce of world_size values).
  std::vector<double> gather(double value);
  std::vector<std::int64_t> gather(std::int64_t value) override;
  // FNV-1a over every parameter's bytes, in registration order.
  std::uint64_t parameter_checksum() const;
  // Parameter indices per bucket, buckets in launch order.
  std::vector<std::vector<int>> buckets() const;
  // What it allocates beside the gradients (its buckets, stage, compression, staging), as the
  // communication-buffer estimator's plan (engine/instrument/memory_model.h).
  CommBufferPlan communication_buffer_plan() const;
  // Off: every step runs as no_sync (no communication at all), for bench_scaling's paired
  // comparison; the replicas then drift apart, so this is for timing only.
  void set_communication(bool on) { communicate_ = on; }

 private:
  struct Slot {
    std::string name;
    Tensor parameter;
    int bucket = 0;
    std::int64_t offset = 0;  // elements into the bucket
    std::int64_t numel = 0;
    Tensor view;  // its range of the bucket, in the parameter's shape (row-major)
    bool ready = false;
  };
  struct Bucket {
    std::vector<int> slots;
    std::int64_t numel = 0;
    Tensor buffer;                       // in the backend's memory: what the communicator reduces
                                         // (ZeRO-2: only from its backward to its reduce-scatter)
    std::shared_ptr<void> staging;       // host memory, when the communicator cannot reach the buffer
    std::shared_ptr<void> packed;        // gradient compression: the 16-bit copy, in the communicator's memory
    Tensor shard;                        // ZeRO-2: this rank's averaged chunk, from its reduce-scatter to the step
    std::shared_ptr<DeviceEvent> ready;  // on the compute stream, after its last gradient
    // On a device: on the communicator's stream, when its reduction started and ended (timing).
    std::shared_ptr<DeviceEvent> started, finished;
    int pending = 0;
    bool done = false;
    std::int64_t comm_start_ns = 0, comm_end_ns = 0;
    // ZeRO-3: this rank's chunk of the bucket's parameters (persistent), and the whole bucket (the
    // parameters are its views), whose memory exists from its all-gather (queued, then done) to its
    // release (Tensor::release_data).
    Tensor param_shard, params;
    std::shared_ptr<DeviceEvent> shard_copied;  // on the compute stream, after this rank's chunk went in
    bool gather_queued = false, gathered = false;
    int param_users = 0;  // parameters whose gradient is not yet ready in this backward
    // Single-copy: where the buffer lies in the window (bytes into this rank's segment); -1: not in it.
    std::int64_t window_offset = -1;
  };
  // What the communication thread does next: a bucket's reduction, or ZeRO-3's all-gather of its parameters.
  struct Task {
    int bucket = 0;
    bool gather = false;
  };
  void on_gradient_ready(int slot);
  // ZeRO-3 (ddp_zero3.cpp): the bucket assignment by units; the parameters made views of their
  // bucket's buffer, the shards cut and the buffers released at attach; a bucket's all-gather
  // queued (its buffer's memory restored, this rank's chunk in it), waited for, and its memory
  // released; a part's buckets gathered (the next queued); the gather on the communication thread.
  std::vector<std::vector<int>> unit_buckets(const NamedTensors& parameters) const;
  void shard_parameters();
  void queue_gather(int b);
  void wait_gathered(int b);
  void release_params(Bucket& bucket);
  void gather_unit(int unit, int prefetch);
  void run_gather(Bucket& bucket);
  void reset_for_backward(bool sync);  // the per-backward state (caller holds mutex_)
  void launch_ready_buckets();         // in order; caller holds mutex_
  void comm_loop();
  void broadcast_parameters();  // rank 0's to every rank (attach)
  void verify_replicas();
  void verify_thresholds();  // allreduce auto: every rank chooses by the same thresholds
  // Single-copy (ddp_single_copy.cpp): the window opened (a collective) and the buckets that use it
  // given their offsets, or why none does (window_note_); at the end their memory made this
  // process's own and the window freed (a collective too).
  void open_window();
  void close_window();
  // The all-reduce by name; for auto, with its thresholds and where they came from.
  std::string algorithms() const;
  struct OwnedPiece;
  // ZeRO-2: the bucket's memory, allocated if it was released, its slots' views made and, with
  // gradient_as_bucket_view, their gradients pointed at them (an accumulated one copied in).
  void ensure_bucket(int b);
  void make_views(Bucket& bucket);  // its slots' views of its buffer, in their parameters' shapes
  // ZeRO-2: this rank's averaged chunk into the gradient shard, then the bucket and its
  // parameters' gradients released; every done bucket in launch order (the main thread's call).
  void release_bucket(Bucket& bucket);
  void release_done_buckets();
  // ZeRO-2: the bucket's gradient shard, allocated if it is not, its pieces' .grad pointed at it.
  void ensure_shard(int b);
  // ZeRO-1: gives the piece its gradient: the averaged chunk from the bucket, or (null) the local
  // gradient's range when communication is off.
  void attach_piece_gradient(OwnedPiece& piece, const Bucket* bucket);
  // The memory the communicator works on for a bucket (its buffer, or the host staging copy), and
  // the copies to and from the staging copy (nothing when the communicator reaches the buffer).
  void* comm_memory(Bucket& bucket);
  void stage_out(Bucket& bucket);
  void stage_in(Bucket& bucket);
  DType wire_dtype() const;  // what travels: the gradients' dtype, or the compression's
  // One bucket's reduction (the communication thread): all-reduce, or ZeRO-1's reduce-scatter;
  // through the 16-bit copy when compressing.
  void reduce_bucket(Bucket& bucket);
  // On a device (a backend with stream events, a stream-ordered communicator that reaches its
  // memory), the overlap metrics come from device events, not the host's clock.
  bool device_timing() const;
  // gradient_as_bucket_view: points every gradient at its range of the bucket (keeping what an
  // accumulation left in a gradient that is elsewhere).
  void point_gradients_at_buckets();
  NamedTensors parameters() const;  // the slots', in registration order
  // ZeRO-1: rank `rank`'s chunk of every bucket cut at parameter boundaries, in bucket order.
  struct ChunkPiece {
    int bucket = 0, slot = 0;
    std::int64_t bucket_offset = 0, count = 0;  // elements
  };
  std::vector<ChunkPiece> chunk_pieces(int rank) const;
  struct OwnedPiece {  // ZeRO-1: one of this rank's pieces
    int bucket = 0;
    int slot = 0;                    // the parameter it is a piece of
    std::int64_t bucket_offset = 0;  // elements into the bucket
    Tensor view;                     // the optimiser's parameter
    Tensor shard_grad;               // ZeRO-2: its range of its bucket's gradient shard (its .grad)
  };

  Communicator& comm_;
  DdpOptions options_;
  std::string hosts_;               // where the ranks run (hosts_summary), for describe()
  AlgorithmThresholds thresholds_;  // allreduce auto's (the source says when the file had no entry for this world)
  std::unique_ptr<SingleCopyAllreduce> window_;  // single-copy's, where some bucket lies in it
  std::string window_note_;                      // which buckets it reduces, or why none
  DType dtype_ = DType::f32;
  Backend* backend_ = nullptr;
  bool direct_ = true;  // the communicator reaches the backend's memory
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  bool sync_ = true;
  bool communicate_ = true;
  bool local_step_ = false;  // a synchronised backward with communication off
  bool in_backward_ = false;
  std::int64_t backward_start_ns_ = 0;
  std::shared_ptr<DeviceEvent> backward_start_event_;
  std::size_t next_launch_ = 0;
  std::vector<OwnedPiece> owned_;
  std::size_t next_release_ = 0;  // ZeRO-2: the first bucket not yet released this backward
  // ZeRO-3: the units' parameter names (forward order), each unit's buckets, and per bucket the
  // last unit whose forward reads it.
  std::vector<std::vector<std::string>> units_;
  std::vector<std::vector<int>> unit_buckets_;
  std::vector<int> last_forward_use_;
  std::int64_t gathered_bytes_ = 0, gather_wait_ns_ = 0;  // since the last synchronised backward
  int gathers_ = 0;                                       // ZeRO-3's all-gathers, since then too

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace trainlab::comm
