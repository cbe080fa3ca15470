#include "studies/allreduce/routes.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "backends/error.h"
#include "bench/measure/comm_bench.h"
#include "comm/cost_model.h"
#include "studies/allreduce/hierarchical.h"

namespace trainlab::bench {

void route_to_one(comm::Communicator& comm, void* data, std::int64_t count, DType dtype) {
  const int P = comm.size();
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (P == 1 || bytes == 0) return;
  if (comm.rank() == 0) {
    void* incoming = comm.scratch(bytes);
    for (int q = 1; q < P; ++q) {  // one at a time, in rank order: rank 0's link carries them all
      std::vector<std::unique_ptr<comm::Request>> requests;
      requests.push_back(comm.irecv(incoming, bytes, q, "route to one: a rank's buffer"));
      comm.wait_all(requests);
      comm.reduce_local(dtype, data, incoming, count, 1.0);
    }
  } else {
    std::vector<std::unique_ptr<comm::Request>> requests;
    requests.push_back(comm.isend(data, bytes, 0, "route to one: this buffer to rank 0"));
    comm.wait_all(requests);
  }
  comm.broadcast(data, bytes, 0);
}

void route_sharded(comm::Communicator& comm, void* data, std::int64_t count, DType dtype) {
  comm.reduce_scatter_native(data, count, dtype, comm::ReduceOp::sum);
  comm.allgather_native(data, count, dtype);
}

void route_via_host(comm::Communicator& comm, Backend& device, void* data, void* staging, std::int64_t count,
                    DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (bytes == 0) return;
  device.copy_to_host(staging, data, bytes);  // after the device's work so far
  comm.allreduce_native(staging, count, dtype, comm::ReduceOp::sum);
  device.copy_from_host(data, staging, bytes);
  device.synchronize();  // the sum is on the device when the route returns
}

namespace {

// The route's alpha-beta terms over P ranks (comm::AllreduceCost: T = steps alpha + factor S / B).
comm::AllreduceCost route_cost(const std::string& route, int P) {
  const double log2p = std::ceil(std::log2(static_cast<double>(P)));
  if (route == "to_one") return {(P - 1) + log2p, (P - 1) + log2p};
  return {2.0 * (P - 1), 2.0 * (P - 1) / P};  // sharded, ring
}

}  // namespace

RouteTable route_table(int ranks, const std::vector<RoutePoint>& points, double memcpy_gbps, double device_copy_gbps) {
  std::vector<std::pair<double, double>> ring;
  for (const RoutePoint& p : points) {
    for (const auto& [route, seconds] : p.medians)
      if (route == "ring") ring.emplace_back(static_cast<double>(p.bytes), seconds);
  }
  TL_CHECK(ring.size() >= 2, fmt::format("routes: the fit needs the ring at two sizes or more, got {}", ring.size()));
  const comm::FitAnalysis fit = comm::analyse_fit(ranks, ring);
  RouteTable table;
  table.head = {"size", "route", "measured us", "predicted us", "measured / predicted", "algbw GB/s"};
  for (const RoutePoint& p : points) {
    const double S = static_cast<double>(p.bytes);
    const comm::RingModel link = link_model(fit, S);
    for (const auto& [route, seconds] : p.medians) {
      TL_CHECK(route != "via_host" || device_copy_gbps > 0,
               "routes: via_host needs the device-host copy rate it is predicted with");
      double predicted = route == "single_copy" ? S / (memcpy_gbps * 1e9)
                                                : route_cost(route, ranks).time_s(link.alpha_s, link.bandwidth_Bps, S);
      if (route == "via_host") predicted += 2 * S / (device_copy_gbps * 1e9);
      table.rows.push_back({human_bytes(p.bytes), route, fmt::format("{:.1f}", seconds * 1e6),
                            fmt::format("{:.1f}", predicted * 1e6), fmt::format("{:.2f}", seconds / predicted),
                            fmt::format("{:.2f}", S / seconds / 1e9)});
    }
  }
  const auto line = [](const comm::Fit& f) {
    return fmt::format("alpha {:.2f} us, B {:.2f} GB/s", f.model.alpha_s * 1e6, f.model.bandwidth_Bps / 1e9);
  };
  table.fit =
      fit.one_line_fits || !fit.split
          ? fmt::format("the ring's medians fitted as one line: {} (largest residual {:.0f}%)", line(fit.one_line),
                        100 * fit.one_line.max_abs_relative_residual)
          : fmt::format("the ring's medians fitted as two regimes split at {}: below {}, from there {}",
                        human_bytes(static_cast<std::int64_t>(fit.split_bytes)), line(fit.lower), line(fit.upper));
  return table;
}

}  // namespace trainlab::bench
