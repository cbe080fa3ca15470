// The MPI communicator (OpenMPI). Every MPI call is checked: a failure throws Error naming the
// call, the rank and (for point-to-point) the peer. Collectives and waits are the blocking calls
// (MPI_Allreduce, MPI_Barrier, MPI_Bcast, MPI_Waitall) under a deadline guard (watchdog.h).
//
// A debug knob for the stall tests: TRAINLAB_DEBUG_STALL="<world rank>:<seconds>[:<operation>]"
// makes that rank sleep that long before its operation number <operation> (collective or
// point-to-point, counted from 0 in the process; default 0, the first).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace trainlab::comm {

// Initialises MPI (MPI_THREAD_MULTIPLE) on construction and finalises it on destruction; one per
// process, made by main().
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  static bool active();
};

class MpiCommunicator final : public Communicator {
 public:
  // The world (MPI_COMM_WORLD); MPI must be initialised (MpiSession).
  static std::unique_ptr<MpiCommunicator> world();

  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  int world_rank() const override { return world_rank_; }

  std::unique_ptr<Request> isend(const void* data, std::size_t bytes, int peer, const char* what) override;
  std::unique_ptr<Request> irecv(void* data, std::size_t bytes, int peer, const char* what) override;
  void barrier() override;
  void rendezvous() override;  // sleeping_barrier(20 us)
  // A barrier that sleeps between polls (MPI_Ibarrier, then MPI_Test every `poll_interval_s`), so
  // that waiting ranks leave the cores to the ones still working; ends the job past the timeout.
  void sleeping_barrier(double poll_interval_s);
  void broadcast(void* data, std::size_t bytes, int root) override;
  void allreduce_native(void* data, std::int64_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter_native(void* data, std::int64_t count, DType dtype, ReduceOp op) override;
  void allgather_native(void* data, std::int64_t count, DType dtype) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  // MPI_Win_allocate_shared over the communicator, when every rank is on one host (MPI_Comm_split_type
  // with MPI_COMM_TYPE_SHARED keeps them all together); works whatever byte transfer layer carries
  // the messages (a run forced onto TCP still shares memory inside a host).
  std::unique_ptr<SharedMemory> share_memory(std::size_t bytes) override;
  void wait_all(std::vector<std::unique_ptr<Request>>& requests) override;
  // To a peer on this host, Open MPI's shared-memory transport's eager limit (btl_vader_eager_limit,
  // read through MPI_T, the smallest over the ranks) less its header; 0 to other peers, and when
  // that transport is not in use (--mca btl tcp,self) or the library is not Open MPI.
  std::size_t eager_limit(int peer) const override;
  [[noreturn]] void abort(const std::string& message, int status) override;
  std::string library_version() const override;

  MPI_Comm handle() const { return comm_; }
  // The largest of each rank's `value` (for the slowest rank's time).
  double max_over_ranks(double value);

 private:
  MpiCommunicator(MPI_Comm comm, bool owned);
  void maybe_stall();
  // After a collective's deadline: which ranks never arrived (text for the error; see the .cpp).
  std::string absent_ranks();
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1, world_rank_ = 0;
  std::size_t host_eager_limit_ = 0;  // see eager_limit()
  std::vector<char> on_host_;         // per rank: shares this rank's host
};

// The MPI library's version line ("Open MPI v4.1.4").
std::string mpi_library_version();

// Checks an MPI call: throws Error naming the call, this rank and the MPI error string.
void mpi_check(int code, const char* call, int rank, int peer = -1);
#define MPI_CHECK(call, rank) ::trainlab::comm::mpi_check((call), #call, (rank))
#define MPI_CHECK_PEER(call, rank, peer) ::trainlab::comm::mpi_check((call), #call, (rank), (peer))

}  // namespace trainlab::comm
