// The hand-written ring all-reduce (reduce-scatter, then all-gather) over a communicator's
// point-to-point operations and its local reduction (Communicator::sendrecv, reduce_local), in the
// communicator's memory: host memory over MPI, device memory over NCCL (the reduction a kernel of
// our own, kernels::ring_reduce).
//
// The buffer is cut into P chunks (uneven when P does not divide the length); the 2(P-1) stages
// stream at segment granularity: each segment a rank finishes (reduced during the reduce-scatter,
// received during the all-gather) is sent on to its right neighbour at once, while the next segment
// is being received into the other half of a double buffer. So sending, receiving and the local
// reduction overlap, all the way round the ring.
//
// The same ring runs in halves for sharded optimiser state (ZeRO-1): the reduce-scatter leaves rank
// r owning chunk r (shard_chunk) reduced, and the all-gather sends each rank's chunk to every rank.
//
// On a stream-ordered communicator (NCCL) the same stages run as steps enqueued on its stream,
// each one send and one receive launched together and the reduction of what arrived; the host
// waits once, at the end.
//
// Every element is reduced in one fixed order (along the ring, ending at the chunk's owner) and
// then copied to every rank, so all ranks end with bitwise identical buffers. bf16 and f16 are
// added in f32 and rounded back to their type at each hop (P - 1 roundings for a sum); an average
// is the sum scaled by 1/P at the owner, once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"

namespace trainlab::comm {

struct RingOptions {
  // Pipeline granularity. Each message costs an MPI rendezvous handshake, so small segments lose
  // more to latency than they gain in overlap: 2 MiB measured best here (bench_allreduce
  // --segment-bytes, np 2 and 4, 64 KiB to 256 MiB).
  std::size_t segment_bytes = 2u << 20;
};

// In place; f32, f64, bf16 or f16; every rank passes the same count.
void ring_allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op,
                    const RingOptions& options = {});
// The first half: rank r ends with chunk r (shard_chunk(count, size, r)) reduced over every rank,
// bit for bit what ring_allreduce would leave there; the rest of the buffer is scratch.
void ring_reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op,
                         const RingOptions& options = {});
// The second half: every rank ends with every rank's chunk r (taken from rank r's buffer).
void ring_allgather(Communicator& comm, void* data, std::int64_t count, DType dtype, const RingOptions& options = {});

}  // namespace trainlab::comm
