// Communicators: one interface over MPI (and NCCL on a GPU machine). Point-to-point operations are
// non-blocking and every wait has a deadline: a dead or stalled peer ends the job, naming the
// operation and the peer, instead of hanging it forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/dtype.h"
#include "engine/core/state_dict.h"
#include "engine/train/distributed.h"

namespace trainlab::comm {

enum class ReduceOp { sum, average };
// ring | recursive_doubling | halving_doubling (hand-written), auto (one of those three by size), or
// native (MPI_Allreduce / ncclAllReduce).
using Algorithm = AllreduceAlgorithm;
Algorithm parse_algorithm(const std::string& name);  // the names above; throws Error naming the allowed
const char* algorithm_name(Algorithm algorithm);

// `auto`'s choice by message size (bytes per rank): recursive doubling below the first threshold
// (a step's latency is the cost), halving-doubling below the second, the ring from there (its
// 2(P-1) steps pipeline). The built-in values are the conventional shape, not a measurement of this
// machine: bench_allreduce --write-tuning measures them per world size and writes a file (comm/tuning.h)
// that the config's `allreduce_tuning` names.
struct AlgorithmThresholds {
  std::int64_t recursive_doubling_below = 8 << 10;
  std::int64_t ring_from = 32 << 20;
  // Where the data lies in a window the ranks share (DDP's buckets on one host): single-copy from
  // this size (INT64_MAX: never). Built in: every size (it won each one measured at 2 ranks here,
  // 4K-256M, docs/RESULTS.md's routes table); a tuning file's is what its run measured.
  std::int64_t single_copy_from = 0;
  std::string source = "built-in";  // or "FILE (world N, run ID)"
};
// The algorithm that runs for a message of `bytes`: `requested` itself unless it is auto. Never
// single_copy (it needs its data in a window, which only DDP's buckets have: comm/ddp.h decides
// that itself by single_copy_from): a free collective asked for single_copy runs the ring.
Algorithm choose_algorithm(Algorithm requested, std::int64_t bytes, const AlgorithmThresholds& thresholds);
// "recursive doubling below 8K, halving-doubling from 8K below 32M, ring from 32M; single-copy at
// every size in a shared window (built-in)".
std::string describe_thresholds(const AlgorithmThresholds& thresholds);

// Chunk c of a buffer of `count` elements cut into `ranks` chunks, the first count % ranks of them
// one element longer: what rank c owns after a reduce-scatter (ring or native alike).
struct ChunkRange {
  std::int64_t begin = 0, count = 0;
};
ChunkRange shard_chunk(std::int64_t count, int ranks, int chunk);

// Memory that every rank of a communicator maps (MPI's shared-memory window, when the ranks share a
// host): collectives move data inside a node by loads and stores instead of messages. One segment
// per rank, each `bytes` long.
class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  virtual void* segment(int rank) = 0;  // rank's segment, mapped in this process
  virtual std::size_t bytes() const = 0;
  // Every rank's stores before it are visible to every rank's loads after it: a barrier of the
  // communicator (under its deadline) between two memory synchronisations.
  virtual void fence() = 0;
};

// A non-blocking operation in flight.
class Request {
 public:
  virtual ~Request() = default;
  virtual bool test() = 0;                   // completed?
  virtual std::string describe() const = 0;  // "receive from rank 1 (ring reduce-scatter)"
  // The requests it is made of, still pending (sendrecv's pair: its send and its receive), so that a
  // communicator can wait on its own kind all at once; a single request is itself.
  virtual void parts(std::vector<Request*>& out) { out.push_back(this); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl"
  // This process's rank in the launched job (for messages); equals rank() on the world.
  virtual int world_rank() const = 0;

  virtual std::unique_ptr<Request> isend(const void* data, std::size_t bytes, int peer, const char* what) = 0;
  virtual std::unique_ptr<Request> irecv(void* data, std::size_t bytes, int peer, const char* what) = 0;
  // A send to one peer and a receive from another, progressing together (one step of a ring);
  // the request completes when both have. The default pairs isend and irecv; NCCL launches them as
  // one group on its stream at once.
  virtual std::unique_ptr<Request> sendrecv(const void* send, std::size_t send_bytes, int to, void* recv,
                                            std::size_t recv_bytes, int from, const char* what);
  // True when this communicator's operations (sendrecv, reduce_local, the collectives) run in the
  // order they are issued on one device stream, so that a step needs no wait for the one before:
  // the ring then enqueues its steps and waits once, at the end. False for MPI (requests complete
  // independently, and the ring overlaps them itself).
  virtual bool stream_ordered() const { return false; }
  // Stream-ordered communicators: waits, under the deadline, until everything issued so far has
  // finished (`what` names it in the timeout message). Nothing to wait for elsewhere.
  virtual void wait_stream(const std::string& what) { (void)what; }
  virtual void barrier() = 0;
  // A barrier that sleeps between polls instead of spinning in the library's progress loop: DDP's
  // communication thread calls it before each bucket, so a rank that arrives first does not burn
  // the core its own backward is computing on. The default is barrier().
  virtual void rendezvous() { barrier(); }
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // The library's own all-reduce (MPI_Allreduce, ncclAllReduce), in place.
  virtual void allreduce_native(void* data, std::int64_t count, DType dtype, ReduceOp op) = 0;
  // The library's reduce-scatter, in place: rank r ends with chunk r (shard_chunk) reduced over
  // every rank; the rest of `data` is left as scratch.
  virtual void reduce_scatter_native(void* data, std::int64_t count, DType dtype, ReduceOp op) = 0;
  // The library's all-gather, in place: every rank ends with rank r's chunk r, for every r.
  virtual void allgather_native(void* data, std::int64_t count, DType dtype) = 0;
  // The ranks with the same colour form a new communicator, ordered by key; a negative colour
  // takes no part and gets nullptr (MPI_Comm_split semantics).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // `bytes` of memory per rank that every rank maps (a collective: every rank asks for the same
  // size); null on every rank when they do not all share a host, or the communicator cannot (NCCL).
  virtual std::unique_ptr<SharedMemory> share_memory(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  // The largest message, in bytes, that reaches `peer` without a rendezvous (a handshake before the
  // data moves); 0 when none is known. The same on every rank of the communicator, and symmetric.
  virtual std::size_t eager_limit(int peer) const {
    (void)peer;
    return 0;
  }
  // Ends the whole job with a non-zero status after printing `message` (never returns).
  [[noreturn]] virtual void abort(const std::string& message, int status) = 0;

  // The memory its operations take: host memory (MPI), or device memory of this rank's GPU (NCCL).
  // Benchmarks and tests allocate through the communicator and copy in and out with these.
  virtual bool device_memory() const { return false; }
  // The device its memory is on ("" for the host CPU; the GPU's name for NCCL) and the library's
  // version line ("Open MPI v4.1.4", "NCCL 2.28.9"), for the ledger.
  virtual std::string device_name() const { return ""; }
  virtual std::string library_version() const = 0;
  // How this rank reaches the others, for the tables: MPI's transport as far as it is known; for
  // NCCL the GPUs on this host and whether each pair has peer access (NVLink or PCIe P2P).
  virtual std::string interconnect() const { return "host memory, through " + library_version(); }
  // Whether its operations can take `backend`'s memory as it is (a host backend's for MPI, the
  // same GPU's for NCCL). DDP keeps its buckets in the backend's memory and hands them over
  // directly when so; MPI with a GPU backend stages them through pinned host memory.
  virtual bool reaches(Backend& backend) const;
  // The operations issued next wait for `event` (recorded on the backend's compute stream): on
  // the device for NCCL (its stream waits; the host does not), on the host here.
  virtual void wait_for(DeviceEvent& event) { event.synchronize(); }
  // Stream-ordered communicators: an event on their stream after what is issued so far (DDP times
  // its buckets with these against the backend's events); null elsewhere.
  virtual std::shared_ptr<DeviceEvent> record_event() { return nullptr; }
  // Makes this communicator's device current on the calling thread (CUDA's current device is per
  // thread: NCCL's communicator calls cudaSetDevice), so that the events, kernels and copies a
  // thread of its own issues (DDP's communication thread calls this first) go to the process's GPU,
  // not to device 0. Nothing to do on the host.
  virtual void use_on_this_thread() {}
  virtual std::shared_ptr<void> allocate(std::size_t bytes);
  virtual void copy_in(void* dst, const void* host, std::size_t bytes);   // host -> communicator memory
  virtual void copy_out(void* host, const void* src, std::size_t bytes);  // communicator memory -> host
  // The ring all-reduce's local step on this communicator's memory: y = y + x, or (y + x) * scale
  // when scale != 1 (an average's last step), elementwise over `count` elements; bf16 and f16 add
  // in f32. A host loop here; NCCL launches kernels::ring_reduce on its stream, after the
  // operations posted so far. Both give the same bits.
  virtual void reduce_local(DType dtype, void* y, const void* x, std::int64_t count, double scale);
  // dst = src * scale, converted from one floating dtype to another, elementwise, in this
  // communicator's memory (gradient compression); computed in f32 (f64 when both are f64) and
  // rounded once. A host loop here; NCCL launches kernels::convert_scaled on its stream.
  virtual void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t count, double scale);
  // A buffer of at least `bytes` in this communicator's memory, kept and reused (the ring's receive
  // double buffer): valid until the next call with a larger size. One caller at a time.
  void* scratch(std::size_t bytes);

  // Waits for every request; past the deadline it aborts the job naming the first request still
  // pending (the operation and the peer). The default polls; MPI blocks in MPI_Waitall under a
  // deadline guard.
  virtual void wait_all(std::vector<std::unique_ptr<Request>>& requests);
  void set_timeout(double seconds);
  double timeout() const { return timeout_s_; }

 protected:
  double timeout_s_ = 300.0;

 private:
  std::shared_ptr<void> scratch_;
  std::size_t scratch_bytes_ = 0;
};

// The communicators (comm/registry.cpp): "mpi", and "nccl" in a CUDA build. make_world(kind) is
// the world communicator of a kind; MPI must be initialised (MpiSession), since NCCL is
// bootstrapped over it. An unknown or unbuilt kind throws naming what is allowed.
std::vector<std::string> communicator_names();  // the ones this build offers
std::unique_ptr<Communicator> make_world(const std::string& kind);

// Every rank's host name, in rank order (a collective: every rank of `comm` calls it; the names
// travel through allreduce_native, so it works on any communicator).
std::vector<std::string> gather_host_names(Communicator& comm);
// "4 ranks on 2 hosts: node1 (ranks 0-1), node2 (ranks 2-3)", from gather_host_names' list.
std::string hosts_summary(const std::vector<std::string>& names);

// All-reduce in place with the chosen algorithm (auto: by size, from `thresholds`).
void allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm,
               const AlgorithmThresholds& thresholds = {});
// Its two halves, in place (sharded optimiser state): rank r owns chunk r afterwards, then every
// rank gets every chunk. The ring's halves, halving-doubling's (recursive halving, recursive
// doubling), or the library's; recursive doubling reduce-scatters with its whole all-reduce and
// all-gathers by recursive doubling.
void reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm,
                    const AlgorithmThresholds& thresholds = {});
void allgather(Communicator& comm, void* data, std::int64_t count, DType dtype, Algorithm algorithm,
               const AlgorithmThresholds& thresholds = {});

// The world as `replicas` data-parallel replicas of a model split over world / replicas ranks (a
// pipeline's stages, or a tensor split's ranks): rank r is model rank r % model_ranks of replica
// r / model_ranks. `model` holds the ranks of its replica, `data` the ranks with the same model
// rank in every replica (Megatron's grid, the model split inner: on one host its ranks are
// neighbours). A collective of the world; both take the world's deadline. Throws Error when the
// count does not divide the world.
struct ParallelGrid {
  std::unique_ptr<Communicator> model, data;
  int replicas = 1, model_ranks = 1;
};
ParallelGrid make_parallel_grid(Communicator& world, int replicas);

// Every parameter's gradient averaged over the ranks of `comm` (the replicas of data parallelism
// beside a pipeline or a tensor split): packed into one f32 buffer in host memory, all-reduced
// (`auto` by size), unpacked; a parameter without a gradient counts as zeros and gets the average.
// f32 parameters only (Error naming one that is not). Every rank passes the same list.
void average_gradients(Communicator& comm, const NamedTensors& params);

}  // namespace trainlab::comm
