// Seed 004's routes (bench_allreduce --routes): the same gradients summed four ways on one host,
// each against a prediction. The book's worked example routes 160 MB to one GPU, via the host,
// sharded, or around a ring, and the route decides the step; here:
//   to_one       every rank sends its whole buffer to rank 0, which adds them in rank order, and
//                rank 0 broadcasts the sum (the library's broadcast): (P - 1) + ceil(log2 P)
//                messages of S on rank 0's link
//   sharded      parameter-server style over every rank: the library's reduce-scatter (rank r
//                serves chunk r) and all-gather: 2 (P - 1) messages of S / P per rank
//   ring         the hand-written ring: the same bytes as sharded, in 2 (P - 1) pipelined steps
//   single_copy  no messages: the data lies in a window the ranks share (comm/single_copy_allreduce.h)
// The prediction is seed 001's alpha-beta model with this machine's alpha and B fitted to the ring's
// own medians in the same run (one line, or two regimes where one does not fit): the ring's row is
// the fit's residual, the others' a prediction. single_copy is predicted by memory traffic instead:
// S read and S written per rank, one memcpy of S at this run's single-core rate (a bound: the ranks
// share one memory bus).
//   via_host     (--routes-device, a backend with its own memory: cuda) the buffer lies in the
//                device's memory: copied to a host staging buffer, summed there by the library's
//                all-reduce, copied back; predicted as the library's all-reduce (modelled as the
//                ring) plus S down and S up at the device-host copy rate measured at the run's start.
//                On a CPU backend there is no such route: the buffers are host memory already.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "comm/communicator.h"

namespace trainlab::bench {

// The two routes that are not all-reduces of their own elsewhere: in place, every rank ends with the
// sum (the same bits everywhere: one rank adds, then copies go out).
void route_to_one(comm::Communicator& comm, void* data, std::int64_t count, DType dtype);
void route_sharded(comm::Communicator& comm, void* data, std::int64_t count, DType dtype);
// `data` in `device`'s memory, `staging` host memory of the same bytes; returns when the sum is back
// in `data` on the device.
void route_via_host(comm::Communicator& comm, Backend& device, void* data, void* staging, std::int64_t count,
                    DType dtype);

// One size's measured medians (seconds) by route name.
struct RoutePoint {
  std::int64_t bytes = 0;
  std::vector<std::pair<std::string, double>> medians;  // route -> seconds
};

// The table: per size and route the measured time, the prediction, their ratio; and the fit as a
// line of text. Throws Error without the ring at two sizes or more (nothing to fit).
struct RouteTable {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::string fit;  // "alpha 2.1 us, B 6.3 GB/s (one line within 20%)"
};
// `device_copy_gbps`: the device-host copy rate (one direction) via_host is predicted with (0: no
// via_host route).
RouteTable route_table(int ranks, const std::vector<RoutePoint>& points, double memcpy_gbps,
                       double device_copy_gbps = 0);

}  // namespace trainlab::bench
