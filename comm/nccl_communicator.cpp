#include "comm/nccl_communicator.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "backends/device_selection.h"
#include "backends/error.h"
#include "engine/instrument/memory_usage.h"
#include "kernels/kernels.h"

namespace trainlab::comm {

void cuda_check(cudaError_t code, const char* call, int rank) {
  if (code == cudaSuccess) return;
  throw Error(
      fmt::format("cuda: {} failed on rank {}: {} ({})", call, rank, cudaGetErrorString(code), cudaGetErrorName(code)));
}

void nccl_check(ncclResult_t code, const char* call, int rank, ncclComm_t comm, int peer) {
  if (code == ncclSuccess || code == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  throw Error(fmt::format("nccl: {} failed on rank {}{}: {}{}", call, rank,
                          peer >= 0 ? fmt::format(" (peer rank {})", peer) : std::string(), ncclGetErrorString(code),
                          last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : std::string()));
}

#define CUDA_CHECK(call) ::trainlab::comm::cuda_check((call), #call, rank_)
#define NCCL_CHECK(call) ::trainlab::comm::nccl_check((call), #call, rank_, comm_)
#define NCCL_CHECK_PEER(call, peer) ::trainlab::comm::nccl_check((call), #call, rank_, comm_, (peer))

// A point-to-point operation: queued until the next flush, then an event recorded after its group.
// In a named namespace, not the anonymous one: NcclCommunicator::Pending holds it, and a unity
// build (CI's) would see a class with external linkage using an internal type (-Wsubobject-linkage).
namespace nccl_detail {
struct P2pState {
  cudaEvent_t done = nullptr;
  bool launched = false;
  std::string description;
  ~P2pState() {
    if (done != nullptr) cudaEventDestroy(done);
  }
};
}  // namespace nccl_detail
using nccl_detail::P2pState;

namespace {

class NcclRequest final : public Request {
 public:
  NcclRequest(NcclCommunicator& comm, std::shared_ptr<P2pState> state) : comm_(comm), state_(std::move(state)) {}
  bool test() override {
    if (!state_->launched) comm_.flush();
    const cudaError_t status = cudaEventQuery(state_->done);
    if (status == cudaErrorNotReady) {
      // "Not ready" is an answer, not an error, but the runtime keeps it as this thread's last
      // error, and the next kernel launch check (cudaGetLastError) would report it as a failed launch.
      (void)cudaGetLastError();
      comm_.check_async(state_->description.c_str());
      return false;
    }
    cuda_check(status, "cudaEventQuery", comm_.rank());
    return true;
  }
  std::string describe() const override { return state_->description; }

 private:
  NcclCommunicator& comm_;
  std::shared_ptr<P2pState> state_;
};

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i64:
      return ncclInt64;
  }
  throw Error("nccl: unsupported dtype");
}

}  // namespace

struct NcclCommunicator::Pending {
  bool send;
  void* data;
  std::size_t bytes;
  int peer;
  std::shared_ptr<P2pState> state;
};

std::string NcclCommunicator::device_name() const {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device_) != cudaSuccess) return fmt::format("GPU {}", device_);
  return fmt::format("{} (device {})", properties.name, device_);
}

std::string NcclCommunicator::library_version() const {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return fmt::format("NCCL {}.{}.{}", version / 10000, (version / 100) % 100, version % 100);
}

std::string NcclCommunicator::interconnect() const {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return "unknown (cudaGetDeviceCount failed)";
  std::string text =
      fmt::format("{} GPU{} on this host, this rank on {}", devices, devices == 1 ? "" : "s", device_name());
  std::string pairs;
  for (int a = 0; a < devices; ++a) {
    for (int b = a + 1; b < devices; ++b) {
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess) can = -1;
      pairs += fmt::format("{}{}<->{}: {}", pairs.empty() ? "" : ", ", a, b,
                           can == 1   ? "peer access"
                           : can == 0 ? "no peer access (through the host)"
                                      : "unknown");
    }
  }
  return text + (pairs.empty() ? "; no GPU pairs (one rank per GPU: world size 1 here)" : "; " + pairs) +
         "; NCCL picks the transport (NVLink, PCIe P2P, shared memory or the network)";
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::world() {
  auto bootstrap = MpiCommunicator::world();
  const int rank_ = bootstrap->rank();

  // This rank's index among the ranks on its host picks its GPU.
  MPI_Comm local = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(bootstrap->handle(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), rank_);
  int local_rank = 0, local_size = 1;
  MPI_CHECK(MPI_Comm_rank(local, &local_rank), rank_);
  MPI_CHECK(MPI_Comm_size(local, &local_size), rank_);
  MPI_CHECK(MPI_Comm_free(&local), rank_);

  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess) {
    throw Error(
        fmt::format("nccl: rank {} finds no usable GPU (cudaGetDeviceCount: {}); the nccl communicator needs "
                    "one GPU per rank; use --comm mpi on this machine",
                    rank_, cudaGetErrorString(counted)));
  }
  // The process's one GPU, the same the cuda backend uses (or a clear error when they differ).
  LocalPlacement placement;
  placement.local_rank = local_rank;
  placement.local_size = local_size;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  placement.source = fmt::format("MPI_Comm_split_type on host {}", host);
  const int device = process_device().claim(
      choose_device(placement, devices, std::getenv("TRAINLAB_CUDA_DEVICE"), std::getenv("CUDA_VISIBLE_DEVICES")),
      "nccl communicator");
  CUDA_CHECK(cudaSetDevice(device));

  ncclUniqueId id{};
  if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", rank_, nullptr);
  bootstrap->broadcast(&id, sizeof id, 0);
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, bootstrap->size(), id, rank_), "ncclCommInitRank", rank_, nullptr);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(bootstrap), device, comm));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> bootstrap, int device, ncclComm_t comm)
    : bootstrap_(std::move(bootstrap)), device_(device), comm_(comm) {
  rank_ = bootstrap_->rank();
  NCCL_CHECK(ncclCommCount(comm_, &size_));
  int nccl_rank = -1;
  NCCL_CHECK(ncclCommUserRank(comm_, &nccl_rank));
  TL_CHECK(nccl_rank == rank_ && size_ == bootstrap_->size(),
           fmt::format("nccl: communicator rank {} of {} does not match MPI rank {} of {}", nccl_rank, size_, rank_,
                       bootstrap_->size()));
  timeout_s_ = bootstrap_->timeout();
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  // Destructors do not throw: a failure here is reported and the rest is still released.
  if (stream_ != nullptr) {
    if (cudaStreamSynchronize(stream_) != cudaSuccess || cudaStreamDestroy(stream_) != cudaSuccess) {
      fmt::print(stderr, "trainlab: warning: rank {}: releasing the NCCL stream failed\n", rank_);
    }
  }
  if (comm_ != nullptr && ncclCommDestroy(comm_) != ncclSuccess) {
    fmt::print(stderr, "trainlab: warning: rank {}: ncclCommDestroy failed\n", rank_);
  }
}

void NcclCommunicator::check_async(const char* during) const {
  ncclResult_t async = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", rank_, comm_);
  if (async != ncclSuccess && async != ncclInProgress) {
    throw Error(
        fmt::format("nccl: asynchronous error on rank {} during {}: {}", rank_, during, ncclGetErrorString(async)));
  }
}

void NcclCommunicator::synchronize(const std::string& what) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  while (true) {
    const cudaError_t status = cudaStreamQuery(stream_);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) cuda_check(status, "cudaStreamQuery", rank_);
    (void)cudaGetLastError();  // clear "not ready" (see NcclRequest::test)
    check_async(what.c_str());
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (waited > timeout_s_) {
      abort(fmt::format("timed out after {:.1f} s waiting for {} (rank {} of {} in this nccl communicator): a peer "
                        "is stalled or dead; ending the job (--comm-timeout {})",
                        waited, what, rank_, size_, timeout_s_),
            3);
    }
    std::this_thread::yield();
  }
}

std::unique_ptr<Request> NcclCommunicator::isend(const void* data, std::size_t bytes, int peer, const char* what) {
  TL_CHECK(peer >= 0 && peer < size_, fmt::format("nccl: isend to rank {} (world size {})", peer, size_));
  auto state = std::make_shared<P2pState>();
  state->description = fmt::format("send of {} bytes to rank {} ({})", bytes, peer, what);
  pending_.push_back({true, const_cast<void*>(data), bytes, peer, state});
  return std::make_unique<NcclRequest>(*this, std::move(state));
}

std::unique_ptr<Request> NcclCommunicator::irecv(void* data, std::size_t bytes, int peer, const char* what) {
  TL_CHECK(peer >= 0 && peer < size_, fmt::format("nccl: irecv from rank {} (world size {})", peer, size_));
  auto state = std::make_shared<P2pState>();
  state->description = fmt::format("receive of {} bytes from rank {} ({})", bytes, peer, what);
  pending_.push_back({false, data, bytes, peer, state});
  return std::make_unique<NcclRequest>(*this, std::move(state));
}

void NcclCommunicator::flush() {
  if (pending_.empty()) return;
  NCCL_CHECK(ncclGroupStart());
  for (const Pending& op : pending_) {
    if (op.send) {
      NCCL_CHECK_PEER(ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm_, stream_), op.peer);
    } else {
      NCCL_CHECK_PEER(ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm_, stream_), op.peer);
    }
  }
  NCCL_CHECK(ncclGroupEnd());
  // One event after the group completes every request of the group.
  for (const Pending& op : pending_) {
    CUDA_CHECK(cudaEventCreateWithFlags(&op.state->done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(op.state->done, stream_));
    op.state->launched = true;
  }
  pending_.clear();
}

std::unique_ptr<Request> NcclCommunicator::sendrecv(const void* send, std::size_t send_bytes, int to, void* recv,
                                                    std::size_t recv_bytes, int from, const char* what) {
  flush();  // what was posted before is a group of its own, ahead of this one
  auto out = send_bytes > 0 ? isend(send, send_bytes, to, what) : nullptr;
  auto in = recv_bytes > 0 ? irecv(recv, recv_bytes, from, what) : nullptr;
  flush();
  if (in) return in;  // one event after the group completes both
  if (out) return out;
  return Communicator::sendrecv(nullptr, 0, to, nullptr, 0, from, what);  // nothing to move: complete
}

bool NcclCommunicator::reaches(Backend& backend) const {
  StreamEvents* events = backend.stream_events();
  return backend.device_type() == DeviceType::cuda && events != nullptr && events->device_index() == device_;
}

void NcclCommunicator::wait_for(DeviceEvent& event) {
  CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event.native()), 0));
}

namespace {
// An event on the NCCL stream, comparable with the cuda backend's (the same device).
class NcclEvent final : public DeviceEvent {
 public:
  NcclEvent(cudaStream_t stream, int rank) : rank_(rank) {
    cuda_check(cudaEventCreate(&event_), "cudaEventCreate", rank_);
    cuda_check(cudaEventRecord(event_, stream), "cudaEventRecord", rank_);
  }
  ~NcclEvent() override { cudaEventDestroy(event_); }
  void synchronize() override { cuda_check(cudaEventSynchronize(event_), "cudaEventSynchronize", rank_); }
  void* native() override { return event_; }
  double seconds_since(DeviceEvent& earlier) override {
    synchronize();
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(earlier.native()), event_), "cudaEventElapsedTime",
               rank_);
    return ms * 1e-3;
  }

 private:
  cudaEvent_t event_ = nullptr;
  int rank_ = 0;
};
}  // namespace

void NcclCommunicator::use_on_this_thread() { CUDA_CHECK(cudaSetDevice(device_)); }

std::shared_ptr<DeviceEvent> NcclCommunicator::record_event() {
  flush();
  return std::make_shared<NcclEvent>(stream_, rank_);
}

void NcclCommunicator::wait_stream(const std::string& what) {
  flush();
  synchronize(what);
}

void NcclCommunicator::wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  flush();
  Communicator::wait_all(requests);
}

void NcclCommunicator::barrier() {
  flush();
  synchronize("the stream before a barrier");
  bootstrap_->barrier();
}

void NcclCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  TL_CHECK(root >= 0 && root < size_, fmt::format("nccl: broadcast root {} (world size {})", root, size_));
  flush();
  NCCL_CHECK_PEER(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), root);
  synchronize(fmt::format("ncclBroadcast of {} bytes from rank {}", bytes, root));
}

void NcclCommunicator::allreduce_native(void* data, std::int64_t count, DType dtype, ReduceOp op) {
  TL_CHECK(count >= 0, "nccl: all-reduce of a negative count");
  if (count == 0) return;
  flush();
  NCCL_CHECK(ncclAllReduce(data, data, static_cast<std::size_t>(count), nccl_type(dtype),
                           op == ReduceOp::sum ? ncclSum : ncclAvg, comm_, stream_));
  synchronize(fmt::format("ncclAllReduce of {} {} elements", count, dtype_name(dtype)));
}

// NCCL's reduce-scatter and all-gather take equal chunks; shard_chunk's are uneven when the world
// size does not divide the count, so those go through a padded buffer of size x ceil(count/size).
unsigned char* NcclCommunicator::padded_scratch(std::size_t bytes) {
  if (scratch_bytes_ < bytes) {
    scratch_ = allocate(bytes);
    scratch_bytes_ = bytes;
  }
  return static_cast<unsigned char*>(scratch_.get());
}

void NcclCommunicator::reduce_scatter_native(void* data, std::int64_t count, DType dtype, ReduceOp op) {
  TL_CHECK(count >= 0, "nccl: reduce-scatter of a negative count");
  if (count == 0) return;
  flush();
  const std::size_t elem = dtype_size(dtype);
  const std::int64_t chunk = (count + size_ - 1) / size_;
  auto* bytes = static_cast<unsigned char*>(data);
  const ChunkRange mine = shard_chunk(count, size_, rank_);
  const ncclRedOp_t nccl_op = op == ReduceOp::sum ? ncclSum : ncclAvg;
  if (count % size_ == 0) {
    NCCL_CHECK(ncclReduceScatter(bytes, bytes + mine.begin * static_cast<std::int64_t>(elem),
                                 static_cast<std::size_t>(chunk), nccl_type(dtype), nccl_op, comm_, stream_));
  } else {
    unsigned char* padded = padded_scratch(static_cast<std::size_t>(chunk * size_) * elem);
    CUDA_CHECK(cudaMemsetAsync(padded, 0, static_cast<std::size_t>(chunk * size_) * elem, stream_));
    for (int c = 0; c < size_; ++c) {
      const ChunkRange range = shard_chunk(count, size_, c);
      CUDA_CHECK(cudaMemcpyAsync(padded + c * chunk * static_cast<std::int64_t>(elem),
                                 bytes + range.begin * static_cast<std::int64_t>(elem), range.count * elem,
                                 cudaMemcpyDeviceToDevice, stream_));
    }
    unsigned char* own = padded + rank_ * chunk * static_cast<std::int64_t>(elem);
    NCCL_CHECK(
        ncclReduceScatter(padded, own, static_cast<std::size_t>(chunk), nccl_type(dtype), nccl_op, comm_, stream_));
    CUDA_CHECK(cudaMemcpyAsync(bytes + mine.begin * static_cast<std::int64_t>(elem), own, mine.count * elem,
                               cudaMemcpyDeviceToDevice, stream_));
  }
  synchronize(fmt::format("ncclReduceScatter of {} {} elements", count, dtype_name(dtype)));
}

void NcclCommunicator::allgather_native(void* data, std::int64_t count, DType dtype) {
  TL_CHECK(count >= 0, "nccl: all-gather of a negative count");
  if (count == 0) return;
  flush();
  const std::size_t elem = dtype_size(dtype);
  const std::int64_t chunk = (count + size_ - 1) / size_;
  auto* bytes = static_cast<unsigned char*>(data);
  const ChunkRange mine = shard_chunk(count, size_, rank_);
  if (count % size_ == 0) {
    NCCL_CHECK(ncclAllGather(bytes + mine.begin * static_cast<std::int64_t>(elem), bytes,
                             static_cast<std::size_t>(chunk), nccl_type(dtype), comm_, stream_));
  } else {
    unsigned char* padded = padded_scratch(static_cast<std::size_t>(chunk * size_) * elem);
    unsigned char* own = padded + rank_ * chunk * static_cast<std::int64_t>(elem);
    CUDA_CHECK(cudaMemcpyAsync(own, bytes + mine.begin * static_cast<std::int64_t>(elem), mine.count * elem,
                               cudaMemcpyDeviceToDevice, stream_));
    NCCL_CHECK(ncclAllGather(own, padded, static_cast<std::size_t>(chunk), nccl_type(dtype), comm_, stream_));
    for (int c = 0; c < size_; ++c) {
      const ChunkRange range = shard_chunk(count, size_, c);
      CUDA_CHECK(cudaMemcpyAsync(bytes + range.begin * static_cast<std::int64_t>(elem),
                                 padded + c * chunk * static_cast<std::int64_t>(elem), range.count * elem,
                                 cudaMemcpyDeviceToDevice, stream_));
    }
  }
  synchronize(fmt::format("ncclAllGather of {} {} elements", count, dtype_name(dtype)));
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  flush();
  auto sub_mpi = bootstrap_->split(color, key);
  ncclComm_t sub = nullptr;
  NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr));
  if (color < 0) return nullptr;
  std::unique_ptr<MpiCommunicator> bootstrap(static_cast<MpiCommunicator*>(sub_mpi.release()));
  auto result = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(bootstrap), device_, sub));
  result->set_timeout(timeout_s_);
  return result;
}

void NcclCommunicator::abort(const std::string& message, int status) {
  // Unblock this rank's kernels first, so the job can end, then end it through MPI.
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  bootstrap_->abort(message, status);
}

std::shared_ptr<void> NcclCommunicator::allocate(std::size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
  const auto counted = static_cast<std::int64_t>(bytes);
  memory_allocated(DeviceType::cuda, MemoryCategory::communication, counted);
  return {p, [counted](void* q) {
            memory_freed(DeviceType::cuda, MemoryCategory::communication, counted);
            cudaFree(q);
          }};
}

void NcclCommunicator::reduce_local(DType dtype, void* y, const void* x, std::int64_t count, double scale) {
  flush();  // the receive that filled x is enqueued before the kernel that reads it
  kernels::ring_reduce(dtype, y, x, count, scale, stream_);
}

void NcclCommunicator::convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t count,
                               double scale) {
  flush();
  kernels::convert_scaled(src_dtype, src, dst_dtype, dst, count, scale, stream_);
}

// On the communicator's own stream, after the work queued on it (a blocking cudaMemcpy runs on the
// legacy stream, which a non-blocking stream does not synchronise with), then waited for.
void NcclCommunicator::copy_in(void* dst, const void* host, std::size_t bytes) {
  ++host_copies_;
  if (bytes == 0) return;
  flush();
  CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
  synchronize(fmt::format("a copy of {} bytes to the device", bytes));
}

void NcclCommunicator::copy_out(void* host, const void* src, std::size_t bytes) {
  ++host_copies_;
  if (bytes == 0) return;
  flush();
  CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  synchronize(fmt::format("a copy of {} bytes to the host", bytes));
}

}  // namespace trainlab::comm
