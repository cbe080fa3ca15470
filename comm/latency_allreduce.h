// The latency-optimal all-reduces beside the ring (comm/ring_allreduce.h), over the same
// communicator operations (sendrecv, reduce_local) in the communicator's memory:
//
//   recursive doubling    log2(P) steps, each exchanging the whole buffer with the partner at
//                         distance 1, 2, 4, ... and adding: the fewest steps, the most bytes
//                         (n log2 P per rank). For small messages, where a step's latency is the cost.
//   halving-doubling      Rabenseifner's: a reduce-scatter by recursive halving (the halves
//                         exchanged at distance P/2, P/4, ..., each rank keeping the half that holds
//                         its own chunk) then an all-gather by recursive doubling: 2 log2(P) steps
//                         and the ring's 2(P-1)/P x n bytes. For the middle sizes.
//
// A world that is not a power of two is folded: with p the largest power of two <= P, rank p + i
// first sends its buffer to rank i, which adds it (its own first), the p ranks run the algorithm,
// and rank i sends the result back to rank p + i (the standard fold-in and fold-out).
//
// Halving-doubling's halves run alone for sharded optimiser state (ZeRO-1), with the ring's
// ownership: the buffer is cut into P chunks (shard_chunk), rank i of the p holding chunk i and,
// when folded into, chunk p + i; the reduce-scatter leaves every rank r its chunk r reduced (bit for
// bit what halving_doubling_allreduce leaves there) and the all-gather gives every rank every
// rank's chunk. Recursive doubling has no reduce-scatter of its own: its all-reduce serves (more
// bytes, the fewest steps), and its all-gather is the one here.
//
// Every element's sum is formed in one fixed order on one rank, or on two ranks as a + b and b + a
// (IEEE addition commutes; bf16 and f16 add in f32 and round once per step, which commutes too),
// and then copied: every rank ends with the same bits. On integer-valued data they equal the
// ring's result and MPI_Allreduce's exactly. An average is the sum scaled by 1/P at the last
// reduction, once.
#pragma once

#include <cstdint>

#include "comm/communicator.h"

namespace trainlab::comm {

// In place; f32, f64, bf16 or f16; every rank passes the same count.
void recursive_doubling_allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op);
void halving_doubling_allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op);
// Rank r ends with chunk r (shard_chunk(count, P, r)) reduced over every rank; the rest is scratch.
void halving_doubling_reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op);
// Every rank ends with every rank r's chunk r (taken from rank r's buffer).
void recursive_doubling_allgather(Communicator& comm, void* data, std::int64_t count, DType dtype);

}  // namespace trainlab::comm
