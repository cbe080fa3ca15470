// The NCCL communicator (compiled when trainlab is built with CUDA: --preset cuda). One GPU per
// rank: the rank's GPU is its index among the ranks on its host (or TRAINLAB_CUDA_DEVICE), claimed
// for the process as the cuda backend claims it (backends/device_selection.h: a different choice
// is an error naming both), and a host with fewer GPUs than ranks is refused with the counts (a
// single GPU supports world size 1 only; nothing here fakes more). NCCL is bootstrapped over MPI: rank 0 makes the
// ncclUniqueId and broadcasts it with MPI_Bcast, every rank calls ncclCommInitRank.
//
// Its operations take device memory on this rank's GPU (device_memory() is true; allocate and
// copy_in/copy_out move data there). Collectives run on the communicator's stream and return when
// the stream has finished them, waited on with the deadline: past --comm-timeout the rank aborts
// the NCCL communicator (ncclCommAbort) and ends the job naming the operation. Point-to-point
// operations posted between two waits are launched together as one NCCL group (ncclGroupStart/End)
// at the next test or wait, so a ring's send to the right and receive from the left progress
// together instead of blocking each other on the stream.
//
// It reaches the cuda backend's memory on the same GPU, so DDP hands it its buckets as they are;
// wait_for makes its stream wait for an event of the backend's compute stream (the host does not
// wait). The ring runs over it stream-ordered: sendrecv launches one send and one receive as a
// group at once, reduce_local is kernels::ring_reduce on the same stream.
//
// Every CUDA and NCCL call is checked: a failure throws Error naming the call, the rank, the peer
// where there is one, and NCCL's own last-error text.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"

namespace trainlab::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Every launched rank, one GPU each; MPI must be initialised (MpiSession).
  static std::unique_ptr<NcclCommunicator> world();

  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  int world_rank() const override { return bootstrap_->world_rank(); }

  std::unique_ptr<Request> isend(const void* data, std::size_t bytes, int peer, const char* what) override;
  std::unique_ptr<Request> irecv(void* data, std::size_t bytes, int peer, const char* what) override;
  void barrier() override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void allreduce_native(void* data, std::int64_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter_native(void* data, std::int64_t count, DType dtype, ReduceOp op) override;
  void allgather_native(void* data, std::int64_t count, DType dtype) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void wait_all(std::vector<std::unique_ptr<Request>>& requests) override;
  [[noreturn]] void abort(const std::string& message, int status) override;

  bool device_memory() const override { return true; }
  std::shared_ptr<void> allocate(std::size_t bytes) override;
  void copy_in(void* dst, const void* host, std::size_t bytes) override;
  void copy_out(void* host, const void* src, std::size_t bytes) override;
  // On the stream, after the point-to-point operations posted so far (kernels::ring_reduce).
  void reduce_local(DType dtype, void* y, const void* x, std::int64_t count, double scale) override;
  void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t count,
               double scale) override;  // kernels::convert_scaled on the stream
  // A send and a receive launched together as one group, on the stream, at once.
  std::unique_ptr<Request> sendrecv(const void* send, std::size_t send_bytes, int to, void* recv,
                                    std::size_t recv_bytes, int from, const char* what) override;
  bool stream_ordered() const override { return true; }
  bool reaches(Backend& backend) const override;         // the cuda backend on this communicator's GPU
  void wait_for(DeviceEvent& event) override;            // cudaStreamWaitEvent: the host does not wait
  std::shared_ptr<DeviceEvent> record_event() override;  // a timing CUDA event on its stream
  void use_on_this_thread() override;                    // cudaSetDevice(its GPU) on the calling thread
  void wait_stream(const std::string& what) override;

  std::string device_name() const override;      // "NVIDIA H200 (device 0)"
  std::string library_version() const override;  // "NCCL 2.28.9" (the library linked at run time)
  // "2 GPUs on this host (NVIDIA H200 x2); peer access 0<->1: yes" (cudaDeviceCanAccessPeer).
  std::string interconnect() const override;

  int device() const { return device_; }
  // copy_in and copy_out calls so far (DDP's device path is tested to make none in a step).
  std::int64_t host_copies() const { return host_copies_; }
  MpiCommunicator& bootstrap() { return *bootstrap_; }

  // Launches the queued point-to-point operations as one group (called by their requests).
  void flush();
  // Throws if NCCL reported an asynchronous error on this communicator.
  void check_async(const char* during) const;

 private:
  NcclCommunicator(std::unique_ptr<MpiCommunicator> bootstrap, int device, ncclComm_t comm);
  // Waits for the stream with the deadline; `what` names the operation for the timeout message.
  void synchronize(const std::string& what);
  unsigned char* padded_scratch(std::size_t bytes);  // device memory of at least `bytes`, reused

  struct Pending;
  std::unique_ptr<MpiCommunicator> bootstrap_;  // the same ranks over MPI (bootstrap, abort)
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::vector<Pending> pending_;
  std::shared_ptr<void> scratch_;
  std::size_t scratch_bytes_ = 0;
  std::atomic<std::int64_t> host_copies_{0};
};

// Checks a CUDA runtime or NCCL call: throws Error naming the call, the rank and (peer >= 0) the peer.
void cuda_check(cudaError_t code, const char* call, int rank);
void nccl_check(ncclResult_t code, const char* call, int rank, ncclComm_t comm, int peer = -1);

}  // namespace trainlab::comm
