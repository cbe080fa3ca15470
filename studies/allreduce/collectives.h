// The collectives bench_allreduce times besides the all-reduce (--collective, nccl-tests' four):
// reduce-scatter (trainlab's ring and halving-doubling halves against the library's), all-gather
// (the ring's and recursive doubling's against the library's) and broadcast (the library's alone:
// trainlab has no broadcast of its own). Each size is checked first, element by element, against
// the exact answer on integer-valued data (the #wrong column), then timed on zeros.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure/comm_bench.h"
#include "comm/mpi_communicator.h"
#include "comm/ring_allreduce.h"

namespace trainlab::bench {

// What a size's arms and check need.
struct CaseInputs {
  comm::Communicator& comm;      // what is measured (MPI, or NCCL on the device)
  comm::MpiCommunicator& world;  // host-side: the exact expected results
  DType dtype = DType::f32;
  std::int64_t elem = 4;
  comm::RingOptions ring_options;
};

// Integer-valued data of rank `rank` (exact in every dtype, and so are the sums over `ranks` ranks).
void fill_integers(std::vector<unsigned char>& data, std::int64_t count, DType dtype, int rank, int ranks);
// Elements [begin, begin + count) of `got` that differ from `expected`'s, bit for bit.
std::int64_t count_wrong(const std::vector<unsigned char>& got, const std::vector<unsigned char>& expected,
                         std::int64_t begin, std::int64_t count, std::int64_t elem);

// The hand-written arms of a collective other than the all-reduce, in timing order (native last).
std::vector<std::string> hand_written_arms(Collective collective);
// One size of reduce_scatter, allgather or broadcast: the arms (in-place on `count` elements,
// which is the whole buffer: the bytes nccl-tests counts) and the check.
SizeCase collective_case(Collective collective, const CaseInputs& in, std::int64_t count);

}  // namespace trainlab::bench
