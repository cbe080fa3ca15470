#include "comm/communicator.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "backends/error.h"
#include "comm/mpi_communicator.h"
#include "comm/ring_allreduce.h"
#include "engine/memory_usage.h"
#ifdef TRAINLAB_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace trainlab::comm {

Algorithm parse_algorithm(const std::string& name) {
  if (name == "ring") return Algorithm::ring;
  if (name == "native") return Algorithm::native;
  throw Error("unknown all-reduce '" + name + "' (allowed: ring, native)");
}

const char* algorithm_name(Algorithm algorithm) { return algorithm == Algorithm::ring ? "ring" : "native"; }

void Communicator::set_timeout(double seconds) {
  TL_CHECK(std::isfinite(seconds) && seconds > 0, "comm timeout must be > 0 seconds, got " + std::to_string(seconds));
  timeout_s_ = seconds;
}

std::shared_ptr<void> Communicator::allocate(std::size_t bytes) {
  // 64-byte aligned host memory, like the engine's buffers.
  void* p = std::aligned_alloc(64, std::max<std::size_t>(64, (bytes + 63) / 64 * 64));
  if (p == nullptr) throw std::bad_alloc();
  const auto counted = static_cast<std::int64_t>(bytes);
  memory_allocated(DeviceType::cpu, MemoryCategory::communication, counted);
  return {p, [counted](void* q) {
            memory_freed(DeviceType::cpu, MemoryCategory::communication, counted);
            std::free(q);
          }};
}

void Communicator::copy_in(void* dst, const void* host, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host, bytes);
}

void Communicator::copy_out(void* host, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(host, src, bytes);
}

std::vector<std::string> communicator_names() {
#ifdef TRAINLAB_HAVE_NCCL
  return {"mpi", "nccl"};
#else
  return {"mpi"};
#endif
}

std::unique_ptr<Communicator> make_world(const std::string& kind) {
  if (kind == "mpi") return MpiCommunicator::world();
  if (kind == "nccl") {
#ifdef TRAINLAB_HAVE_NCCL
    return NcclCommunicator::world();
#else
    throw Error(
        "communicator 'nccl' is not in this build: it is compiled with CUDA (configure with --preset cuda, "
        "or -DTRAINLAB_CUDA=ON, on a machine with the CUDA toolkit and NCCL); allowed here: mpi");
#endif
  }
  std::string allowed;
  for (const auto& name : communicator_names()) allowed += (allowed.empty() ? "" : ", ") + name;
  throw Error("unknown communicator '" + kind + "' (allowed: " + allowed + ")");
}

void Communicator::wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s_));
  // Completed requests are released as they finish; what remains is what is still pending.
  while (true) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (!requests[i]->test()) requests[kept++] = std::move(requests[i]);
    }
    requests.resize(kept);
    if (requests.empty()) return;
    if (clock::now() > deadline) {
      const std::size_t first = 0;
      abort(fmt::format("timed out after {:.1f} s waiting for {} (rank {} of {} in this communicator): that peer is "
                        "stalled or dead; ending the job (--comm-timeout {})",
                        std::chrono::duration<double>(clock::now() - start).count(), requests[first]->describe(),
                        rank(), size(), timeout_s_),
            3);
    }
    std::this_thread::yield();  // a ring step may wait on a rank sharing this core
  }
}

ChunkRange shard_chunk(std::int64_t count, int ranks, int chunk) {
  const std::int64_t base = count / ranks, rem = count % ranks;
  return {chunk * base + std::min<std::int64_t>(chunk, rem), base + (chunk < rem ? 1 : 0)};
}

void allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm) {
  if (algorithm == Algorithm::ring) {
    ring_allreduce(comm, data, count, dtype, op);
  } else {
    comm.allreduce_native(data, count, dtype, op);
  }
}

void reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm) {
  if (algorithm == Algorithm::ring) {
    ring_reduce_scatter(comm, data, count, dtype, op);
  } else {
    comm.reduce_scatter_native(data, count, dtype, op);
  }
}

void allgather(Communicator& comm, void* data, std::int64_t count, DType dtype, Algorithm algorithm) {
  if (algorithm == Algorithm::ring) {
    ring_allgather(comm, data, count, dtype);
  } else {
    comm.allgather_native(data, count, dtype);
  }
}

}  // namespace trainlab::comm
