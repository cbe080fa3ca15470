#include "comm/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/error.h"
#include "comm/watchdog.h"

#include <fmt/format.h>

namespace trainlab::comm {

namespace {

bool session_active = false;
int thread_level = MPI_THREAD_SINGLE;
// Point-to-point tag of the presence exchange (absent_ranks); the ring uses tag 7.
constexpr int kPresenceTag = 911;
MPI_Op bf16_sum = MPI_OP_NULL, f16_sum = MPI_OP_NULL;

// Sums of bf16/f16 buffers for MPI's native all-reduce: added in f32, rounded back.
template <typename H>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const H*>(in);
  auto* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = H(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

// The description is built only when a deadline expires: a ring sends thousands of messages.
class MpiRequest final : public Request {
 public:
  enum class Kind { send, receive, collective };
  MpiRequest(MPI_Request request, Kind kind, const char* what, int rank, int peer)
      : request_(request), kind_(kind), what_(what), rank_(rank), peer_(peer) {}
  ~MpiRequest() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
  }
  MPI_Request* handle() { return &request_; }
  bool test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    mpi_check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test", rank_, peer_);
    return done != 0;
  }
  std::string describe() const override {
    switch (kind_) {
      case Kind::send:
        return "send to rank " + std::to_string(peer_) + " (" + what_ + ")";
      case Kind::receive:
        return "receive from rank " + std::to_string(peer_) + " (" + what_ + ")";
      case Kind::collective:
        break;
    }
    return what_;
  }

 private:
  MPI_Request request_;
  Kind kind_;
  std::string what_;  // for collectives, built once per call; for messages, the static label
  int rank_, peer_;
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;
    case DType::i64:
      return MPI_INT64_T;
  }
  throw Error("mpi: no MPI type for dtype " + std::string(dtype_name(dtype)));
}

// In place: data *= 1 / size (the average after a sum).
void scale(void* data, std::int64_t count, DType dtype, double factor) {
  switch (dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(data);
      const auto f = static_cast<float>(factor);
      for (std::int64_t i = 0; i < count; ++i) p[i] *= f;
      return;
    }
    case DType::f64: {
      auto* p = static_cast<double*>(data);
      for (std::int64_t i = 0; i < count; ++i) p[i] *= factor;
      return;
    }
    case DType::bf16: {
      auto* p = static_cast<bf16*>(data);
      for (std::int64_t i = 0; i < count; ++i) p[i] = bf16(static_cast<float>(p[i]) * static_cast<float>(factor));
      return;
    }
    case DType::f16: {
      auto* p = static_cast<f16*>(data);
      for (std::int64_t i = 0; i < count; ++i) p[i] = f16(static_cast<float>(p[i]) * static_cast<float>(factor));
      return;
    }
    case DType::i64:
      throw Error("mpi: an average of i64 data is not defined");
  }
}

}  // namespace

void mpi_check(int code, const char* call, int rank, int peer) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string(call) + " failed on rank " + std::to_string(rank) +
              (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : "") + ": " + std::string(text, length));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", -1);
  thread_level = provided;
  TL_CHECK(provided >= MPI_THREAD_SERIALIZED,
           "MPI provides thread level " + std::to_string(provided) + "; trainlab needs MPI_THREAD_SERIALIZED or more");
  // Errors come back as codes (turned into trainlab::Error by mpi_check), not as an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Op_create(&half_sum<bf16>, 1, &bf16_sum);
  MPI_Op_create(&half_sum<f16>, 1, &f16_sum);
  session_active = true;
}

MpiSession::~MpiSession() {
  MPI_Op_free(&bf16_sum);
  MPI_Op_free(&f16_sum);
  session_active = false;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool MpiSession::active() { return session_active; }

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  TL_CHECK(MpiSession::active(), "MPI is not initialised (construct an MpiSession in main)");
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(MPI_COMM_WORLD, false));
}

namespace {

// Open MPI's shared-memory transport's eager limit (the control variable btl_vader_eager_limit,
// which exists only while that transport is open), 0 when there is none; read once per process.
std::size_t shared_memory_eager_limit() {
  static const std::size_t limit = [] {
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return std::size_t{0};
    std::size_t value = 0;
    int index = 0, count = 0;
    MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
    if (MPI_T_cvar_get_index("btl_vader_eager_limit", &index) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      char name[256];
      char description[1024];
      int name_length = sizeof name, description_length = sizeof description, verbosity = 0, binding = 0, scope = 0;
      MPI_Datatype type = MPI_DATATYPE_NULL;
      MPI_T_enum values = MPI_T_ENUM_NULL;
      unsigned long read = 0;  // Open MPI declares size_t variables as MPI_UNSIGNED_LONG
      if (MPI_T_cvar_get_info(index, name, &name_length, &verbosity, &type, &values, description, &description_length,
                              &binding, &scope) == MPI_SUCCESS &&
          type == MPI_UNSIGNED_LONG && count == 1 && MPI_T_cvar_read(handle, &read) == MPI_SUCCESS)
        value = read;
      MPI_T_cvar_handle_free(&handle);
    }
    MPI_T_finalize();
    return value;
  }();
  return limit;
}

// The eager limit counts Open MPI's match header (ob1's, 14-24 bytes) with the data: the payload
// that travels eagerly is this much smaller, with room to spare.
constexpr std::size_t kEagerHeaderBytes = 64;

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  // Which ranks share this one's host, and the shared-memory eager limit every rank agrees on (the
  // smallest: the algorithms cut a message by it on both sides, so it must be the same everywhere).
  MPI_Comm host = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host), rank_);
  std::vector<int> host_of(static_cast<std::size_t>(size_));
  int leader = rank_;  // the host's lowest rank in this communicator names the host
  const int reduced = MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, host);
  MPI_Comm_free(&host);  // before any check can throw
  mpi_check(reduced, "MPI_Allreduce(host leader)", rank_);
  MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, host_of.data(), 1, MPI_INT, comm_), rank_);
  on_host_.resize(host_of.size());
  for (std::size_t r = 0; r < host_of.size(); ++r) on_host_[r] = host_of[r] == leader ? 1 : 0;
  const std::size_t own = shared_memory_eager_limit();
  unsigned long limit = own > kEagerHeaderBytes ? own - kEagerHeaderBytes : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &limit, 1, MPI_UNSIGNED_LONG, MPI_MIN, comm_), rank_);
  host_eager_limit_ = limit;
}

std::size_t MpiCommunicator::eager_limit(int peer) const {
  return peer >= 0 && peer < size_ && peer != rank_ && on_host_[static_cast<std::size_t>(peer)] != 0 ? host_eager_limit_
                                                                                                     : 0;
}

MpiCommunicator::~MpiCommunicator() {
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::maybe_stall() {
  // TRAINLAB_DEBUG_STALL="<world rank>:<seconds>[:<operation>]": that rank stalls once, before its
  // operation number <operation> (counted from 0 over every communicator in the process; default 0).
  static std::atomic<long> operations{0};
  static long stall_at = -1;  // -1: no stall
  static double seconds = 0;
  static std::once_flag read_knob;
  std::call_once(read_knob, [this] {
    if (const char* knob = std::getenv("TRAINLAB_DEBUG_STALL")) {
      const std::string spec(knob);
      const auto colon = spec.find(':');
      TL_CHECK(colon != std::string::npos,
               "TRAINLAB_DEBUG_STALL must be '<rank>:<seconds>[:<operation>]', got '" + spec + "'");
      const auto second = spec.find(':', colon + 1);
      if (std::stoi(spec.substr(0, colon)) == world_rank_) {
        seconds =
            std::stod(spec.substr(colon + 1, second == std::string::npos ? std::string::npos : second - colon - 1));
        stall_at = second == std::string::npos ? 0 : std::stol(spec.substr(second + 1));
      }
    }
  });
  if (operations++ != stall_at) return;
  std::fprintf(stderr, "trainlab: rank %d: stalling for %.1f s before operation %ld (TRAINLAB_DEBUG_STALL)\n",
               world_rank_, seconds, stall_at);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

std::unique_ptr<Request> MpiCommunicator::isend(const void* data, std::size_t bytes, int peer, const char* what) {
  maybe_stall();
  TL_CHECK(bytes <= static_cast<std::size_t>(INT32_MAX), "mpi: a single send is limited to 2 GiB");
  MPI_Request request;
  MPI_CHECK_PEER(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, 7, comm_, &request), rank_, peer);
  return std::make_unique<MpiRequest>(request, MpiRequest::Kind::send, what, rank_, peer);
}

std::unique_ptr<Request> MpiCommunicator::irecv(void* data, std::size_t bytes, int peer, const char* what) {
  maybe_stall();
  TL_CHECK(bytes <= static_cast<std::size_t>(INT32_MAX), "mpi: a single receive is limited to 2 GiB");
  MPI_Request request;
  MPI_CHECK_PEER(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, 7, comm_, &request), rank_, peer);
  return std::make_unique<MpiRequest>(request, MpiRequest::Kind::receive, what, rank_, peer);
}

void MpiCommunicator::wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  if (requests.empty()) return;
  // Our own requests (sendrecv's pairs taken apart): block in MPI_Waitall (MPI's progress engine, no
  // polling loop of ours) under a deadline guard that names the first one if it expires.
  thread_local std::vector<Request*> parts;
  thread_local std::vector<MpiRequest*> mpi;
  thread_local std::vector<MPI_Request> handles;
  parts.clear();
  mpi.clear();
  handles.clear();
  for (auto& request : requests) request->parts(parts);
  for (Request* part : parts) {
    auto* own = dynamic_cast<MpiRequest*>(part);
    if (!own) {
      Communicator::wait_all(requests);
      return;
    }
    mpi.push_back(own);
    handles.push_back(*own->handle());
  }
  {
    DeadlineGuard guard(*this, [&requests] {
      return requests.front()->describe() +
             (requests.size() > 1 ? fmt::format(" and {} more", requests.size() - 1) : "");
    });
    MPI_CHECK(MPI_Waitall(static_cast<int>(handles.size()), handles.data(), MPI_STATUSES_IGNORE), rank_);
  }
  for (std::size_t i = 0; i < mpi.size(); ++i) *mpi[i]->handle() = handles[i];
  requests.clear();
}

// Called on the watchdog thread once a collective has waited past the deadline, while this rank's
// own thread is still inside it: every rank that is waiting says so to every other (a message on
// its own tag), and listens for a grace period. The ranks not heard from are the ones that never
// arrived. Needs MPI_THREAD_MULTIPLE (two threads in MPI at once); otherwise nothing is named.
std::string MpiCommunicator::absent_ranks() {
  if (thread_level < MPI_THREAD_MULTIPLE || size_ < 2) return "";
  const double grace_s = std::clamp(timeout_s_ / 4, 0.5, 3.0);
  static int token = 0;  // the payload is not read; the source is the message
  std::vector<MPI_Request> sends;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request request;
    if (MPI_Isend(&token, 1, MPI_INT, peer, kPresenceTag, comm_, &request) == MPI_SUCCESS) sends.push_back(request);
  }
  std::vector<bool> heard(static_cast<std::size_t>(size_), false);
  heard[static_cast<std::size_t>(rank_)] = true;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < grace_s) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPresenceTag, comm_, &flag, &status) != MPI_SUCCESS) break;
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int payload = 0;
    MPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kPresenceTag, comm_, MPI_STATUS_IGNORE);
    heard[static_cast<std::size_t>(status.MPI_SOURCE)] = true;
  }
  std::string absent;
  int count = 0;
  for (int r = 0; r < size_; ++r) {
    if (heard[static_cast<std::size_t>(r)]) continue;
    absent += (absent.empty() ? "" : ", ") + std::to_string(r);
    ++count;
  }
  if (count == 0) return ": every rank checked in after the deadline";
  return fmt::format(
      ": rank{} {} did not arrive (no word from {} in {:.1f} s after the deadline, while the others "
      "waited)",
      count > 1 ? "s" : "", absent, count > 1 ? "them" : "it", grace_s);
}

void MpiCommunicator::barrier() {
  maybe_stall();
  DeadlineGuard guard(
      *this, [this] { return "a barrier (every one of the " + std::to_string(size_) + " ranks)" + absent_ranks(); });
  MPI_CHECK(MPI_Barrier(comm_), rank_);
}

void MpiCommunicator::rendezvous() {
  maybe_stall();
  sleeping_barrier(20e-6);
}

void MpiCommunicator::sleeping_barrier(double poll_interval_s) {
  MPI_Request request;
  MPI_CHECK(MPI_Ibarrier(comm_, &request), rank_);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int done = 0;
  while (true) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE), rank_);
    if (done) return;
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (waited > timeout_s_) {
      abort(fmt::format("timed out after {:.1f} s waiting at a rendezvous of every one of the {} ranks (rank {}){}: a "
                        "peer is stalled or dead; ending the job (--comm-timeout {})",
                        waited, size_, rank_, absent_ranks(), timeout_s_),
            3);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_interval_s));
  }
}

void MpiCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  maybe_stall();
  TL_CHECK(bytes <= static_cast<std::size_t>(INT32_MAX), "mpi: a broadcast is limited to 2 GiB");
  DeadlineGuard guard(*this, [this, root] { return "a broadcast from rank " + std::to_string(root) + absent_ranks(); });
  MPI_CHECK_PEER(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_), rank_, root);
}

void MpiCommunicator::allreduce_native(void* data, std::int64_t count, DType dtype, ReduceOp op) {
  maybe_stall();
  TL_CHECK(count <= INT32_MAX, "mpi: a native all-reduce is limited to 2^31 elements");
  MPI_Op mpi_op = MPI_SUM;
  if (dtype == DType::bf16) mpi_op = bf16_sum;
  if (dtype == DType::f16) mpi_op = f16_sum;
  {
    // MPI_Allreduce itself (the tuned collective), blocking under a deadline guard: the
    // non-blocking MPI_Iallreduce is a different, slower implementation in OpenMPI.
    DeadlineGuard guard(*this, [count, this] {
      return "MPI_Allreduce of " + std::to_string(count) + " elements (every one of the " + std::to_string(size_) +
             " ranks)" + absent_ranks();
    });
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(dtype), mpi_op, comm_), rank_);
  }
  if (op == ReduceOp::average) scale(data, count, dtype, 1.0 / size_);
}

void MpiCommunicator::reduce_scatter_native(void* data, std::int64_t count, DType dtype, ReduceOp op) {
  maybe_stall();
  TL_CHECK(count <= INT32_MAX, "mpi: a native reduce-scatter is limited to 2^31 elements");
  std::vector<int> counts(static_cast<std::size_t>(size_));
  for (int c = 0; c < size_; ++c)
    counts[static_cast<std::size_t>(c)] = static_cast<int>(shard_chunk(count, size_, c).count);
  MPI_Op mpi_op = MPI_SUM;
  if (dtype == DType::bf16) mpi_op = bf16_sum;
  if (dtype == DType::f16) mpi_op = f16_sum;
  {
    DeadlineGuard guard(*this, [count, this] {
      return "MPI_Reduce_scatter of " + std::to_string(count) + " elements (every one of the " + std::to_string(size_) +
             " ranks)" + absent_ranks();
    });
    MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, data, counts.data(), mpi_type(dtype), mpi_op, comm_), rank_);
  }
  // In place, MPI leaves this rank's chunk at the start of the buffer: moved to where it belongs.
  const ChunkRange mine = shard_chunk(count, size_, rank_);
  const std::size_t elem = dtype_size(dtype);
  auto* bytes = static_cast<unsigned char*>(data);
  if (mine.begin > 0) std::memmove(bytes + mine.begin * static_cast<std::int64_t>(elem), bytes, mine.count * elem);
  if (op == ReduceOp::average)
    scale(bytes + mine.begin * static_cast<std::int64_t>(elem), mine.count, dtype, 1.0 / size_);
}

void MpiCommunicator::allgather_native(void* data, std::int64_t count, DType dtype) {
  maybe_stall();
  TL_CHECK(count <= INT32_MAX, "mpi: a native all-gather is limited to 2^31 elements");
  std::vector<int> counts(static_cast<std::size_t>(size_)), displacements(static_cast<std::size_t>(size_));
  for (int c = 0; c < size_; ++c) {
    const ChunkRange chunk = shard_chunk(count, size_, c);
    counts[static_cast<std::size_t>(c)] = static_cast<int>(chunk.count);
    displacements[static_cast<std::size_t>(c)] = static_cast<int>(chunk.begin);
  }
  DeadlineGuard guard(*this, [count, this] {
    return "MPI_Allgatherv of " + std::to_string(count) + " elements (every one of the " + std::to_string(size_) +
           " ranks)" + absent_ranks();
  });
  MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displacements.data(),
                           mpi_type(dtype), comm_),
            rank_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), rank_);
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<Communicator>(new MpiCommunicator(sub, true));
}

namespace {

// One MPI shared-memory window, locked for the whole of its life (passive target, no checks). Each
// rank's segment starts with a cache line of its own holding its fence count; fence() is a barrier
// on those counts in the shared memory itself (a release store of this rank's count, acquire loads
// of the others'), so the ranks of a node meet without a message: over a job forced onto TCP an MPI
// barrier would cost a round trip of the wire per fence.
class MpiSharedMemory final : public SharedMemory {
 public:
  static constexpr std::size_t kHeader = 64;
  MpiSharedMemory(MpiCommunicator& comm, std::size_t bytes) : comm_(comm), bytes_(bytes) {
    const int rank = comm.rank();
    MPI_Info info = MPI_INFO_NULL;
    MPI_CHECK(MPI_Info_create(&info), rank);
    MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"), rank);  // each segment on its rank's pages
    void* base = nullptr;
    const int created =
        MPI_Win_allocate_shared(static_cast<MPI_Aint>(kHeader + bytes), 1, info, comm.handle(), &base, &win_);
    MPI_Info_free(&info);
    MPI_CHECK(created, rank);
    MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), rank);
    for (int r = 0; r < comm.size(); ++r) {
      MPI_Aint size = 0;
      int unit = 0;
      void* segment = nullptr;
      MPI_CHECK(MPI_Win_shared_query(win_, r, &size, &unit, &segment), rank);
      bases_.push_back(static_cast<unsigned char*>(segment));
    }
    count(rank).store(0, std::memory_order_relaxed);
    MPI_CHECK(MPI_Win_sync(win_), rank);
    comm.barrier();  // every count is 0 before anyone fences
  }
  ~MpiSharedMemory() override {
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  MpiSharedMemory(const MpiSharedMemory&) = delete;
  MpiSharedMemory& operator=(const MpiSharedMemory&) = delete;
  void* segment(int rank) override { return bases_.at(static_cast<std::size_t>(rank)) + kHeader; }
  std::size_t bytes() const override { return bytes_; }
  void fence() override {
    const std::uint64_t epoch = ++fences_;
    count(comm_.rank()).store(epoch, std::memory_order_release);
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < comm_.size(); ++r) {
      // Spin briefly, then yield: the ranks of a node may share a core.
      for (std::uint64_t spins = 0; count(r).load(std::memory_order_acquire) < epoch; ++spins) {
        if (spins < 64) continue;
        std::this_thread::yield();
        if (spins % 1024 != 0) continue;
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (waited > comm_.timeout())
          comm_.abort(fmt::format("timed out after {:.1f} s at a shared-memory fence (rank {} of this node waits for "
                                  "rank {}): that rank is stalled or dead; ending the job (--comm-timeout {})",
                                  waited, comm_.rank(), r, comm_.timeout()),
                      3);
      }
    }
  }

 private:
  std::atomic_ref<std::uint64_t> count(int rank) {
    return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(bases_.at(static_cast<std::size_t>(rank))));
  }
  MpiCommunicator& comm_;
  std::size_t bytes_;
  MPI_Win win_ = MPI_WIN_NULL;
  std::vector<unsigned char*> bases_;
  std::uint64_t fences_ = 0;
};

}  // namespace

std::unique_ptr<SharedMemory> MpiCommunicator::share_memory(std::size_t bytes) {
  // Every rank on one host, or none of them shares: the answer is the same on every rank.
  MPI_Comm host = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host), rank_);
  int host_size = 0;
  MPI_CHECK(MPI_Comm_size(host, &host_size), rank_);
  MPI_CHECK(MPI_Comm_free(&host), rank_);
  int together = host_size == size_ ? 1 : 0, all_together = 0;
  MPI_CHECK(MPI_Allreduce(&together, &all_together, 1, MPI_INT, MPI_MIN, comm_), rank_);
  if (all_together == 0) return nullptr;
  return std::make_unique<MpiSharedMemory>(*this, bytes);
}

std::string MpiCommunicator::library_version() const { return mpi_library_version(); }

void MpiCommunicator::abort(const std::string& message, int status) {
  std::fprintf(stderr, "trainlab: rank %d: %s\n", world_rank_, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

double MpiCommunicator::max_over_ranks(double value) {
  double out = value;
  MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_), rank_);
  return out;
}

std::string mpi_library_version() {
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_CHECK(MPI_Get_library_version(library, &length), -1);
  const std::string text(library, static_cast<std::size_t>(length));
  return text.substr(0, text.find_first_of(",\n"));
}

}  // namespace trainlab::comm
