// bench_allreduce: the hand-written ring against MPI_Allreduce, size by size, side by side.
//   scripts/mpirun -np 2 build/bin/bench_allreduce --sizes 4K..256M
// Per size: a correctness check (ring and native on the same integer-valued data must agree bit
// for bit), then iterations alternating ring and native (warm-up excluded); each iteration starts
// after a barrier and its time is the slowest rank's. algbw = S / t, busbw = algbw * 2 (P - 1) / P
// (nccl-tests' definitions); every busbw is also a fraction of the single-core memcpy rate
// measured in the same run. Timed buffers hold zeros (so repeated sums stay finite); every row goes
// to the ledger. The timing is the comm-bench harness's (bench/measure/comm_bench.h).
//
// --comm nccl (a CUDA build, one GPU per rank) times ncclAllReduce on device buffers instead; the
// ring's reduction runs on the host, so its column is skipped there (with the reason) when the
// world has more than one rank. Each NCCL call returns once its stream has finished it.
#include "studies/allreduce/allreduce_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>
#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "bench/report/table.h"
#include "comm/hierarchical_allreduce.h"
#include "comm/latency_allreduce.h"
#include "comm/mpi_communicator.h"
#include "comm/ring_allreduce.h"
#include "comm/single_copy_allreduce.h"
#include "comm/tuning.h"
#include "engine/core/rng.h"
#include "engine/io/fileio.h"
#include "studies/allreduce/collectives.h"
#include "studies/allreduce/hierarchical.h"
#include "studies/allreduce/routes.h"
#include "studies/allreduce/rows.h"

namespace trainlab::bench {

namespace {

using comm::ReduceOp;

// Open MPI 4.1's coll_tuned_allreduce_algorithm values (ompi_info --param coll tuned --level 9).
constexpr const char* kOpenMpiAllreduce[] = {"decision", "basic_linear",   "nonoverlapping", "recursive_doubling",
                                             "ring",     "segmented_ring", "rabenseifner"};

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// --algorithms: a comma-separated list of the hand-written all-reduces, each once.
std::vector<std::string> parse_algorithms(const std::string& spec) {
  static const std::vector<std::string> known = {
      "ring", "recursive_doubling", "halving_doubling", "single_copy", "to_one", "sharded"};
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string name = spec.substr(at, comma - at);
    TL_CHECK(std::find(known.begin(), known.end(), name) != known.end(),
             "--algorithms '" + spec + "': '" + name +
                 "' is not one of ring, recursive_doubling, halving_doubling, single_copy, to_one, sharded");
    TL_CHECK(std::find(out.begin(), out.end(), name) == out.end(),
             "--algorithms '" + spec + "': '" + name + "' is listed twice");
    out.push_back(name);
    at = comma + 1;
  }
  return out;
}

// One run: what every size needs.
struct AllreduceRun {
  const AllreduceOptions& o;
  comm::MpiCommunicator& world;  // host-side bookkeeping: slowest rank, checks, abort
  comm::Communicator& comm;      // what is measured (MPI, or NCCL on the device)
  DType dtype = DType::f32;
  std::int64_t elem = 4;
  comm::RingOptions ring_options;
  double copy_rate = 0;  // single-core memcpy, GB/s
  Environment env;
  std::string run_id;
  Ledger ledger;
  Collective collective = Collective::allreduce;  // --collective
  MpiVariant variant;                             // over MPI
  std::vector<std::string> algorithms;            // the hand-written ones timed beside native (--algorithms)
  comm::Hierarchy* hierarchy = nullptr;           // --node-size: the two-level arms
  // single_copy among --algorithms: its window (a segment of the largest size per rank), where its
  // arm's data lies.
  comm::SingleCopyAllreduce* single_copy = nullptr;
  // --routes-device: the backend whose memory via_host's data lies in, the host staging buffer (the
  // largest size; pinned where the backend has it) and the device-host copy rate (GB/s, one way).
  Backend* route_device = nullptr;
  void* staging = nullptr;
  double device_copy_rate = 0;
};

// The arms of a two-level run (--node-size) that are not all-reduces of the whole world: the two
// links the prediction is fitted to. Left out of the table's lines and of the targets.
bool link_arm(const std::string& name) { return name == "within_nodes" || name == "across_nodes"; }

// One hand-written algorithm, by name (--algorithms); single_copy reduces its window, where `data`
// lies; via_host's `data` is in the route device's memory.
void hand_written(const AllreduceRun& run, const std::string& algorithm, void* data, std::int64_t count) {
  comm::Communicator& comm = run.comm;
  const DType dtype = run.dtype;
  comm::SingleCopyAllreduce* single_copy = run.single_copy;
  if (algorithm == "via_host") {
    TL_CHECK(run.route_device != nullptr && run.staging != nullptr, "bench_allreduce: via_host without its device");
    route_via_host(comm, *run.route_device, data, run.staging, count, dtype);
  } else if (algorithm == "single_copy") {
    TL_CHECK(single_copy != nullptr && data == single_copy->buffer(),
             "bench_allreduce: single_copy without its window");
    single_copy->allreduce(count, dtype, ReduceOp::sum);
  } else if (algorithm == "to_one") {
    route_to_one(comm, data, count, dtype);
  } else if (algorithm == "sharded") {
    route_sharded(comm, data, count, dtype);
  } else if (algorithm == "ring") {
    comm::ring_allreduce(comm, data, count, dtype, ReduceOp::sum, run.ring_options);
  } else if (algorithm == "recursive_doubling") {
    comm::recursive_doubling_allreduce(comm, data, count, dtype, ReduceOp::sum);
  } else {
    comm::halving_doubling_allreduce(comm, data, count, dtype, ReduceOp::sum);
  }
}

// The flat arms of a size: each hand-written algorithm (--algorithms) on memory[i]; native on `last`.
void add_hand_written_arms(SizeCase& size, const AllreduceRun& run, const std::vector<std::shared_ptr<void>>& memory,
                           std::int64_t count) {
  for (std::size_t i = 0; i < run.algorithms.size(); ++i) {
    const std::string algorithm = run.algorithms[i];
    std::shared_ptr<void> m = memory[i];
    size.arms.push_back({algorithm, count * run.elem,
                         [&run, m, count, algorithm](int) { hand_written(run, algorithm, m.get(), count); }});
  }
}
void add_native_arm(SizeCase& size, const AllreduceRun& run, std::shared_ptr<void> last, std::int64_t count) {
  const auto dtype = run.dtype;
  size.arms.push_back({"native", count * run.elem, [&run, last, count, dtype](int) {
                         run.comm.allreduce_native(last.get(), count, dtype, ReduceOp::sum);
                       }});
}

SizeCase two_level_case(const AllreduceRun& run, std::int64_t count, std::vector<std::shared_ptr<void>> memory);

// One size: each hand-written algorithm and native on the communicator's own memory, and the
// check. The native result is checked against the host's exact sum (integer-valued data), each
// hand-written result against it bit for bit; then every buffer holds zeros for the timing. The
// arms: the hand-written ones in --algorithms' order, native last.
SizeCase size_case(const AllreduceRun& run, std::int64_t bytes) {
  const std::int64_t count = std::max<std::int64_t>(1, bytes / run.elem);
  const auto actual = static_cast<std::size_t>(count * run.elem);
  std::vector<std::shared_ptr<void>> memory;
  std::vector<bool> on_device;  // via_host's buffer, in the route device's memory
  for (std::size_t i = 0; i <= run.algorithms.size(); ++i) {
    // single_copy's data lies in its window (not owned here); every other arm's in its own buffer.
    const std::string algorithm = i < run.algorithms.size() ? run.algorithms[i] : "native";
    on_device.push_back(algorithm == "via_host");
    if (algorithm == "single_copy") {
      memory.emplace_back(run.single_copy->buffer(), [](void*) {});
    } else if (algorithm == "via_host") {
      Backend* device = run.route_device;
      memory.emplace_back(device->allocate(actual), [device, actual](void* p) { device->deallocate(p, actual); });
    } else {
      memory.push_back(run.comm.allocate(actual));
    }
  }
  if (run.hierarchy != nullptr) return two_level_case(run, count, std::move(memory));
  SizeCase size;
  size.check = [&run, count, actual, memory, on_device] {
    comm::Communicator& comm = run.comm;
    const auto put = [&](std::size_t i, const void* host) {
      if (on_device[i]) {
        run.route_device->copy_from_host(memory[i].get(), host, actual);
        run.route_device->synchronize();
      } else {
        comm.copy_in(memory[i].get(), host, actual);
      }
    };
    const auto get = [&](std::size_t i, void* host) {
      if (on_device[i]) {
        run.route_device->copy_to_host(host, memory[i].get(), actual);
      } else {
        comm.copy_out(host, memory[i].get(), actual);
      }
    };
    std::vector<unsigned char> data(actual), expected(actual), result(actual);
    fill_integers(data, count, run.dtype, run.world.rank(), run.world.size());
    for (std::size_t i = 0; i < memory.size(); ++i) put(i, data.data());
    for (std::size_t i = 0; i < run.algorithms.size(); ++i)
      hand_written(run, run.algorithms[i], memory[i].get(), count);
    expected = data;
    run.world.allreduce_native(expected.data(), count, run.dtype, ReduceOp::sum);  // MPI on the host: exact
    comm.allreduce_native(memory.back().get(), count, run.dtype, ReduceOp::sum);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < memory.size(); ++i) {
      get(i, result.data());
      wrong += count_wrong(result, expected, 0, count, run.elem);
    }
    std::fill(data.begin(), data.end(), 0);
    for (std::size_t i = 0; i < memory.size(); ++i) put(i, data.data());
    return wrong;
  };
  add_hand_written_arms(size, run, memory, count);
  add_native_arm(size, run, memory.back(), count);
  return size;
}

// --node-size: the hierarchical all-reduce beside the flat arms, and its two links (each node's
// all-reduce inside; each local rank's all-reduce of its chunk across the nodes). The check: every
// arm against its own exact answer (the world's sum, the node's, the chunk's across the nodes).
SizeCase two_level_case(const AllreduceRun& run, std::int64_t count, std::vector<std::shared_ptr<void>> memory) {
  const auto actual = static_cast<std::size_t>(count * run.elem);
  comm::Hierarchy& h = *run.hierarchy;
  for (int i = 0; i < 3; ++i) memory.push_back(run.comm.allocate(actual));
  const std::size_t flat = run.algorithms.size() + 1, two = flat, within = flat + 1, across = flat + 2;
  const comm::ChunkRange chunk = comm::node_chunk(h, count);
  const std::size_t chunk_at = static_cast<std::size_t>(chunk.begin * run.elem);
  SizeCase size;
  size.check = [&run, &h, count, actual, memory, flat, two, within, across, chunk, chunk_at] {
    comm::Communicator& comm = run.comm;
    std::vector<unsigned char> data(actual), result(actual);
    fill_integers(data, count, run.dtype, run.world.rank(), run.world.size());
    for (const auto& m : memory) comm.copy_in(m.get(), data.data(), actual);
    for (std::size_t i = 0; i + 1 < flat; ++i) hand_written(run, run.algorithms[i], memory[i].get(), count);
    comm.allreduce_native(memory[flat - 1].get(), count, run.dtype, ReduceOp::sum);
    comm::hierarchical_allreduce(h, memory[two].get(), count, run.dtype, ReduceOp::sum);
    h.reduce_scatter_inside(memory[within].get(), count, run.dtype, ReduceOp::sum);
    h.allgather_inside(memory[within].get(), count, run.dtype);
    comm::allreduce(h.across(), static_cast<unsigned char*>(memory[across].get()) + chunk_at, chunk.count, run.dtype,
                    ReduceOp::sum, comm::Algorithm::ring);
    // The exact answers, by MPI on the host: the world's, the node's, the chunk's across the nodes.
    std::vector<unsigned char> world_sum = data, node_sum = data, chunk_sum = data;
    run.world.allreduce_native(world_sum.data(), count, run.dtype, ReduceOp::sum);
    h.node().allreduce_native(node_sum.data(), count, run.dtype, ReduceOp::sum);
    h.across().allreduce_native(chunk_sum.data() + chunk_at, chunk.count, run.dtype, ReduceOp::sum);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < memory.size(); ++i) {
      comm.copy_out(result.data(), memory[i].get(), actual);
      if (i == within) {
        wrong += count_wrong(result, node_sum, 0, count, run.elem);
      } else if (i == across) {
        wrong += count_wrong(result, chunk_sum, chunk.begin, chunk.count, run.elem);
      } else {
        wrong += count_wrong(result, world_sum, 0, count, run.elem);
      }
    }
    std::fill(data.begin(), data.end(), 0);
    for (const auto& m : memory) comm.copy_in(m.get(), data.data(), actual);
    return wrong;
  };
  const auto dtype = run.dtype;
  add_hand_written_arms(size, run, memory, count);
  std::shared_ptr<void> m_two = memory[two], m_within = memory[within], m_across = memory[across];
  size.arms.push_back({"hierarchical", count * run.elem, [&h, m_two, count, dtype](int) {
                         comm::hierarchical_allreduce(h, m_two.get(), count, dtype, ReduceOp::sum);
                       }});
  size.arms.push_back({"within_nodes", count * run.elem, [&h, m_within, count, dtype](int) {
                         h.reduce_scatter_inside(m_within.get(), count, dtype, ReduceOp::sum);
                         h.allgather_inside(m_within.get(), count, dtype);
                       }});
  size.arms.push_back({"across_nodes", chunk.count * run.elem, [&h, m_across, chunk, chunk_at, dtype](int) {
                         comm::allreduce(h.across(), static_cast<unsigned char*>(m_across.get()) + chunk_at,
                                         chunk.count, dtype, ReduceOp::sum, comm::Algorithm::ring);
                       }});
  add_native_arm(size, run, memory[flat - 1], count);
  return size;
}

void print_header(const AllreduceRun& run) {
  const comm::Communicator& comm = run.comm;
  std::cout << fmt::format(
      "# bench_allreduce: {}, {} ranks, {} communicator{}, dtype {}, ring segment {}, {}; single-core memcpy {:.2f} "
      "GB/s\n",
      collective_name(run.collective), run.world.size(), comm.backend(),
      comm.device_memory() ? " on " + comm.device_name() : std::string(), run.o.dtype_name_,
      human_bytes(static_cast<std::int64_t>(run.o.segment_bytes)), comm.library_version(), run.copy_rate);
  if (comm.backend() == "mpi")
    std::cout << fmt::format("# MPI variant: all-reduce algorithm {}, malloc {}, transport {} ({})\n",
                             run.variant.algorithm, run.variant.malloc, run.variant.transport, run.variant.settings);
  if (const std::size_t eager = comm.size() > 1 ? comm.eager_limit((comm.rank() + 1) % comm.size()) : 0; eager > 0)
    std::cout << fmt::format(
        "# eager pieces: recursive doubling's and halving-doubling's messages to a rank on this host of {} to {} "
        "bytes go as up to 4 pieces of at most {} (the transport's eager limit less its header), not through a "
        "rendezvous\n",
        eager + 1, 4 * eager, eager);
  if (run.single_copy != nullptr) std::cout << "# single_copy: " << run.single_copy->describe() << "\n";
  if (run.hierarchy != nullptr)
    std::cout << "# two levels: " << run.hierarchy->describe()
              << "; the links within_nodes and across_nodes (its message S / node size) are timed too, for the "
                 "prediction at the end\n";
  const char* factor = run.collective == Collective::allreduce   ? "2(P-1)/P"
                       : run.collective == Collective::broadcast ? "1"
                                                                 : "(P-1)/P";
  std::cout << "# time: median (min-max) over iterations, each the slowest rank's; size: the whole buffer; busbw = "
               "algbw * "
            << factor
            << " (nccl-tests'); GB/s = 1e9 bytes/s; #wrong: elements that differ from the exact answer on "
               "integer-valued data, over every arm and rank\n# ratio: the algorithm's time / native time; x floor: "
               "its effect against native "
               "in units of the noise floor (native's even against its odd iterations, the same configuration "
               "interleaved), then separable or not\n";
  std::cout << fmt::format(
      "{:>7} {:>11} {:<18} | {:>27} {:>7} {:>7} {:>6} | {:>27} {:>7} {:>7} | {:>6} {:>7} {:>13} | {}\n", "size",
      "count", "algorithm", "time us", "algbw", "busbw", "%copy", "native time us", "algbw", "busbw", "ratio",
      "x floor", "separable", "#wrong");
}

// One line of the table: a hand-written algorithm, native, their ratio in units of native's noise floor.
void print_size(const AllreduceRun& run, const ArmTiming& ring, const ArmTiming& native, std::int64_t wrong) {
  const Summary &r = ring.stats, &n = native.stats;
  const double ratio = r.median / n.median;
  const std::string ring_columns =
      fmt::format("{:>9.1f} ({:>7.1f}-{:>8.1f}) {:>7.2f} {:>7.2f} {:>5.0f}%", r.median * 1e6, r.min * 1e6, r.max * 1e6,
                  ring.algbw_gbps, ring.busbw_gbps, 100 * ring.busbw_gbps / run.copy_rate);
  const double effect = (ratio - 1) * 100;  // + : the ring takes longer
  const std::string ratio_column =
      fmt::format("{:.2f} {:>7} {:>13}", ratio, floor_multiple_text(effect, native.noise_floor),
                  verdict_words(verdict(r, n, native.noise_floor)));
  std::cout << fmt::format("{:>7} {:>11} {:<18} | {} | {:>9.1f} ({:>7.1f}-{:>8.1f}) {:>7.2f} {:>7.2f} | {:>6} | {}\n",
                           human_bytes(ring.bytes), ring.bytes / run.elem, ring.name, ring_columns, n.median * 1e6,
                           n.min * 1e6, n.max * 1e6, native.algbw_gbps, native.busbw_gbps, ratio_column, wrong);
  std::cout.flush();
}

// A collective with no hand-written arm (broadcast): native's columns alone.
void print_native(const AllreduceRun& run, const ArmTiming& native, std::int64_t wrong) {
  const Summary& n = native.stats;
  std::cout << fmt::format(
      "{:>7} {:>11} {:<18} | {:>56} | {:>9.1f} ({:>7.1f}-{:>8.1f}) {:>7.2f} {:>7.2f} | {:>29} | {}\n",
      human_bytes(native.bytes), native.bytes / run.elem, "-", "", n.median * 1e6, n.min * 1e6, n.max * 1e6,
      native.algbw_gbps, native.busbw_gbps, fmt::format("{:.0f}% of memcpy", 100 * native.busbw_gbps / run.copy_rate),
      wrong);
  std::cout.flush();
}

// A row per algorithm; both carry native's noise floor.
void append_rows(const AllreduceRun& run, const std::vector<ArmTiming>& arms, std::int64_t wrong) {
  for (const ArmTiming& t : arms) {
    AllreduceRow row;
    row.header.env = run.env;
    row.header.kind = AllreduceRow::kKind;
    row.header.run_id = run.run_id;
    row.header.status = "ok";
    row.communicator = run.comm.backend();
    row.config.ranks = run.world.size();
    row.config.bytes = t.bytes;
    row.config.count = t.bytes / run.elem;
    row.config.dtype = run.o.dtype_name_;
    row.config.algorithm = t.name;
    if (run.collective != Collective::allreduce) row.config.collective = collective_name(run.collective);
    row.config.segment_bytes = static_cast<std::int64_t>(run.o.segment_bytes);
    row.config.communicator = run.comm.backend();
    if (run.comm.backend() == "mpi") {
      row.config.malloc = run.variant.malloc;
      row.config.mpi_algorithm = run.variant.algorithm;  // the process's (its ring rows too)
      if (run.variant.transport != "default") row.config.mpi_transport = run.variant.transport;
    }
    if (run.hierarchy != nullptr) {
      row.config.node_size = run.hierarchy->map().node_size;
      row.config.intra_node = comm::intra_node_name(run.hierarchy->intra());
    }
    if (run.o.round > 0) row.round = run.o.round;
    if (run.o.routes) row.config.study = "routes";
    row.repeats = t.seconds;
    row.stats = t.stats;
    row.warmup_iterations_excluded = run.o.warmup;
    row.algbw_gbps = t.algbw_gbps;
    row.busbw_gbps = t.busbw_gbps;
    row.memcpy_gbps = run.copy_rate;
    if (run.device_copy_rate > 0) row.device_copy_gbps = run.device_copy_rate;
    row.correct = wrong == 0;
    row.wrong = wrong;
    if (arms.back().noise_floor) row.noise_floor_percent = arms.back().noise_floor->noise_floor_percent;
    run.ledger.append(row);
  }
}

// Issue 27's targets, as measured here against the MPI library as this process runs it (the
// variant sweep, bench/allreduce_variants.py, judges against the strongest variant of each size):
// the best hand-written all-reduce at or below 1.0x native at every size from 4K to 256M, and its
// busbw from 16M up at or above 0.5x the single-core memcpy of the same run.
void print_targets(const std::vector<SizeTiming>& sizes, double copy_rate, bool all_correct) {
  bool ok_time = true, ok_bw = true;
  double worst_ratio = 0, worst_bw = 1e300;
  for (const SizeTiming& s : sizes) {
    // The best hand-written all-reduce of the size against native (the links of a two-level run are not).
    const ArmTiming& native = s.arms.back();
    const ArmTiming* best = &s.arms.front();
    for (std::size_t i = 0; i + 1 < s.arms.size(); ++i)
      if (!link_arm(s.arms[i].name) && s.arms[i].stats.median < best->stats.median) best = &s.arms[i];
    const std::int64_t bytes = best->bytes;
    const double r = best->stats.median / native.stats.median, f = best->busbw_gbps / copy_rate;
    if (bytes >= 4096 && bytes <= (std::int64_t{256} << 20)) {
      ok_time = ok_time && r <= 1.0;
      worst_ratio = std::max(worst_ratio, r);
    }
    if (bytes >= (16 << 20)) {
      ok_bw = ok_bw && f >= 0.5;
      worst_bw = std::min(worst_bw, f);
    }
  }
  std::cout << fmt::format(
      "targets (the best hand-written all-reduce of each size): best/native <= 1.0 from 4K to "
      "256M: {} (worst {:.2f})",
      ok_time ? "met" : "MISSED", worst_ratio);
  if (worst_bw < 1e300)
    std::cout << fmt::format("; busbw >= 0.5x memcpy from 16M: {} (lowest {:.2f}x)", ok_bw ? "met" : "MISSED",
                             worst_bw);
  std::cout << fmt::format("; results {}\n", all_correct ? "all correct" : "MISMATCHED");
}

// The environment of the rows: the host run's, or the device's under NCCL.
Environment measured_environment(Environment env, const comm::Communicator& comm) {
  if (comm.device_memory()) {
    env.device = {"cuda", comm.device_name()};
    env.versions[comm.backend()] = comm.library_version();
    env.timer = "steady_clock around stream-synchronised calls (slowest rank per iteration)";
  } else {
    env.timer = "steady_clock (slowest rank per iteration)";
  }
  return env;
}

// --node-size: where the hierarchical all-reduce's time goes, phase by phase, at every size of the
// sweep (a collective: every rank). Each phase's time is the slowest rank's, the median of 7 calls
// after 2 warm-ups, each call after a barrier; the timing arms are not affected (this runs after).
std::vector<comm::HierarchicalPhases> profile_phases(const AllreduceRun& run, const std::vector<SizeTiming>& sizes) {
  std::vector<comm::HierarchicalPhases> out;
  for (const SizeTiming& s : sizes) {
    const std::int64_t count = std::max<std::int64_t>(1, s.arms.front().bytes / run.elem);
    const auto actual = static_cast<std::size_t>(count * run.elem);
    std::shared_ptr<void> m = run.comm.allocate(actual);
    const std::vector<unsigned char> zeros(actual, 0);
    run.comm.copy_in(m.get(), zeros.data(), actual);
    std::vector<double> inside_rs, across, inside_ag;
    for (int i = 0; i < 9; ++i) {
      run.world.barrier();
      comm::HierarchicalPhases p;
      comm::hierarchical_allreduce(*run.hierarchy, m.get(), count, run.dtype, ReduceOp::sum, comm::Algorithm::ring, {},
                                   &p);
      const double a = run.world.max_over_ranks(p.reduce_scatter_inside_s);
      const double b = run.world.max_over_ranks(p.across_s);
      const double c = run.world.max_over_ranks(p.allgather_inside_s);
      if (i < 2) continue;
      inside_rs.push_back(a);
      across.push_back(b);
      inside_ag.push_back(c);
    }
    out.push_back({summarize(inside_rs).median, summarize(across).median, summarize(inside_ag).median});
  }
  return out;
}

// --node-size: the hierarchical all-reduce against the flat ring and the model's prediction from the
// two links (studies/allreduce/hierarchical.h), then each phase against the model's.
void print_prediction(const comm::Hierarchy& h, const std::vector<SizeTiming>& sizes,
                      const std::vector<comm::HierarchicalPhases>& phases) {
  std::vector<HierarchicalPoint> points;
  for (const SizeTiming& s : sizes) {
    HierarchicalPoint p;
    for (const ArmTiming& arm : s.arms) {
      if (arm.name == "ring") p.flat_s = arm.stats.median;
      if (arm.name == "hierarchical") {
        p.hierarchical_s = arm.stats.median;
        p.bytes = arm.bytes;
      }
      if (arm.name == "within_nodes") p.within_s = arm.stats.median;
      if (arm.name == "across_nodes") p.across_s = arm.stats.median;
    }
    points.push_back(p);
  }
  const comm::NodeMap& m = h.map();
  if (m.nodes < 2 || m.node_size < 2 || points.size() < 2 || points.front().flat_s <= 0) {
    std::cout << "prediction: none (it needs two levels, two sizes or more and the ring among --algorithms)\n";
    return;
  }
  const HierarchicalPrediction p = predict_hierarchical(m.nodes, m.node_size, points);
  std::cout << "\n# the two-level all-reduce against the flat ring and seed 001's model, fitted to the two links\n"
            << render_table(hierarchical_head(), hierarchical_table(p), true) << hierarchical_fit_text(p)
            << fmt::format("target: the prediction within 25% of the measured time at every size: {}\n",
                           p.all_within(0.25) ? "met" : "MISSED");
  // Phase by phase (the profile of a miss): measured inside the hierarchical all-reduce, against the model.
  std::vector<std::vector<std::string>> table;
  for (std::size_t i = 0; i < p.lines.size() && i < phases.size(); ++i) {
    const auto& l = p.lines[i];
    const comm::HierarchicalPhases& ph = phases[i];
    const auto cell = [](double measured, double model) {
      return fmt::format("{:.1f} ({:.1f}, {:+.0f}%)", measured * 1e6, model * 1e6, 100 * (model - measured) / measured);
    };
    table.push_back({human_bytes(l.bytes), cell(ph.reduce_scatter_inside_s, l.predicted.intra_reduce_scatter_s),
                     cell(ph.across_s, l.predicted.inter_allreduce_s),
                     cell(ph.allgather_inside_s, l.predicted.intra_all_gather_s),
                     fmt::format("{:.1f}", (ph.reduce_scatter_inside_s + ph.across_s + ph.allgather_inside_s) * 1e6)});
  }
  std::cout << "\n# phase by phase: measured inside the hierarchical all-reduce (slowest rank, median of 7 calls), the "
               "model's in brackets with its error\n"
            << render_table({"size", "reduce-scatter inside us", "across us", "all-gather inside us", "sum us"}, table,
                            true);
}

// --write-tuning: the thresholds from this run's medians, printed and written (rank 0).
void write_tuning(const AllreduceRun& run, const std::vector<SizeTiming>& sizes) {
  std::vector<comm::TuningPoint> points;
  for (const SizeTiming& s : sizes) {
    comm::TuningPoint p;
    p.bytes = s.arms.front().bytes;
    // single_copy's arm is the ring where the ranks could not share a window: then it is not measured.
    const bool window = run.single_copy != nullptr && run.single_copy->shared();
    for (const ArmTiming& arm : s.arms)
      if (arm.name != "native" && (arm.name != "single_copy" || window)) p.median_s[arm.name] = arm.stats.median;
    points.push_back(p);
  }
  std::vector<std::string> disagreements;
  comm::TuningEntry entry = comm::derive_thresholds(run.world.size(), points, &disagreements);
  entry.run_id = run.run_id;
  entry.communicator = run.comm.backend();
  entry.library = run.comm.library_version();
  comm::TuningFile file;
  if (file_kind(run.o.tune_path) == "a regular file") file = comm::read_tuning(run.o.tune_path);
  comm::merge_entry(file, entry);
  comm::write_tuning(run.o.tune_path, file);
  std::cout << fmt::format("tuning, world {}: {}\n", run.world.size(),
                           comm::describe_thresholds(comm::thresholds_of(entry, run.o.tune_path)));
  for (const std::string& d : disagreements) std::cout << "  tuning: " << d << "\n";
}

// --routes: seed 004's routes against the model fitted to this run's ring (studies/allreduce/routes.h).
void print_routes(const AllreduceRun& run, const std::vector<SizeTiming>& sizes) {
  std::vector<RoutePoint> points;
  for (const SizeTiming& s : sizes) {
    RoutePoint p;
    p.bytes = s.arms.front().bytes;
    for (const ArmTiming& arm : s.arms) p.medians.emplace_back(arm.name, arm.stats.median);
    points.push_back(std::move(p));
  }
  if (points.size() < 2) {
    std::cout << "routes: no prediction (the fit needs two sizes or more)\n";
    return;
  }
  const RouteTable table = route_table(run.world.size(), points, run.copy_rate, run.device_copy_rate);
  std::cout << "\n# seed 004's routes: measured (median) against seed 001's alpha-beta model; " << table.fit
            << "; single_copy against one memcpy of S at " << fmt::format("{:.2f}", run.copy_rate)
            << " GB/s; native is modelled as the ring; "
            << (run.route_device != nullptr
                    ? fmt::format("via_host as native plus S down and S up at {:.2f} GB/s ({} memory)",
                                  run.device_copy_rate, run.route_device->name())
                    : std::string("via host staging needs a device: --routes-device cuda on a GPU box"))
            << "\n"
            << render_table(table.head, table.rows, true);
}

// Options that cannot go together, and --write-tuning's file, are refused before the run: a path it may
// write, and an existing file a tuning file.
void check_options(const AllreduceOptions& o) {
  TL_CHECK(o.routes_device.empty() || o.routes,
           "--routes-device " + o.routes_device + " adds the via-host route to --routes: give --routes too");
  TL_CHECK(!o.routes || (o.algorithms == "ring" && o.collective == "all_reduce" && o.node_size == 0 &&
                         o.tune_path.empty() && o.comm_kind == "mpi"),
           "--routes times its own arms (to_one, sharded, ring, single_copy) over MPI: not with --algorithms, "
           "--collective, --node-size, --write-tuning or --comm nccl");
  std::string arms;
  for (const std::string& a : hand_written_arms(parse_collective(o.collective))) arms += a + ", ";
  TL_CHECK(
      o.collective == "all_reduce" || o.algorithms == "ring",
      "--algorithms chooses the all-reduce's arms; --collective " + o.collective + " has its own (" + arms + "native)");
  TL_CHECK(o.node_size == 0 || o.collective == "all_reduce",
           "--node-size times the hierarchical all-reduce; --collective " + o.collective + " cannot go with it");
  TL_CHECK(o.node_size == 0 || o.tune_path.empty(), "--node-size and --write-tuning cannot go together");
  TL_CHECK(o.node_size == 0 || o.comm_kind == "mpi",
           "--node-size runs over MPI (its links are host memory); --comm " + o.comm_kind + " cannot go with it");
  comm::parse_intra_node(o.intra_node);
  if (o.tune_path.empty()) return;
  TL_CHECK(o.collective == "all_reduce",
           "--write-tuning tunes the all-reduce; --collective " + o.collective + " cannot go with it");
  TL_CHECK(o.algorithms == "ring" || o.algorithms == "ring,recursive_doubling,halving_doubling",
           "--write-tuning times ring, recursive_doubling, halving_doubling and single_copy; --algorithms " +
               o.algorithms + " cannot go with it");
  check_output_file(o.tune_path, "--write-tuning");
  if (file_kind(o.tune_path) == "a regular file") comm::read_tuning(o.tune_path);
}

// --routes-device: the backend via_host's data lies in (one with its own memory), a host staging
// buffer of the largest size (pinned where the backend has it) and the device-host copy rate at
// that size, one way (the best of four round trips, the first one warm-up).
struct RouteDevice {
  Backend* backend = nullptr;
  std::shared_ptr<void> staging;
  double copy_gbps = 0;
};
RouteDevice route_device(const AllreduceOptions& o, const std::vector<std::int64_t>& sizes, std::int64_t elem) {
  RouteDevice d;
  if (o.routes_device.empty()) return d;
  Backend& backend = get_backend(o.routes_device);
  // Its own memory: a device (cuda), or a backend that stages host data through pinned buffers
  // into memory of its own (the tests' emulated device); the CPU backends' tensors are host memory.
  TL_CHECK(backend.device_type() != DeviceType::cpu || backend.pinned_uploads() != nullptr,
           "--routes-device " + o.routes_device +
               ": its tensors are host memory already; the via-host route needs a backend with its own memory "
               "(cuda)");
  std::size_t largest = 0;
  for (std::int64_t bytes : sizes)
    largest = std::max(largest, static_cast<std::size_t>(std::max<std::int64_t>(1, bytes / elem) * elem));
  if (PinnedUploads* pinned = backend.pinned_uploads()) {
    d.staging = {pinned->allocate_pinned(largest), [pinned](void* p) { pinned->deallocate_pinned(p); }};
  } else {
    d.staging = {std::aligned_alloc(64, (largest + 63) / 64 * 64), [](void* p) { std::free(p); }};
  }
  void* on_device = backend.allocate(largest);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto start = std::chrono::steady_clock::now();
    backend.copy_to_host(d.staging.get(), on_device, largest);
    backend.copy_from_host(on_device, d.staging.get(), largest);
    backend.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0 && (best == 0 || seconds < best)) best = seconds;
  }
  backend.deallocate(on_device, largest);
  d.backend = &backend;
  d.copy_gbps = best > 0 ? 2.0 * static_cast<double>(largest) / best / 1e9 : 0;
  TL_CHECK(d.copy_gbps > 0, "--routes-device " + o.routes_device + ": the device-host copy took no measurable time");
  return d;
}

int run_sizes(const AllreduceOptions& o, comm::MpiCommunicator& world) {
  check_options(o);
  std::unique_ptr<comm::Communicator> measured = comm::make_world(o.comm_kind);
  comm::Communicator& comm = *measured;
  comm.set_timeout(o.timeout);
  const DType dtype = parse_dtype(o.dtype_name_);
  const auto elem = static_cast<std::int64_t>(dtype_size(dtype));
  const auto sizes = parse_byte_sizes(o.sizes_spec, "bench_allreduce: --sizes");
  // Two host buffers and two of the communicator's (on the device with NCCL: counted anyway).
  check_message_sizes(sizes, elem, o.dtype_name_, 4, "bench_allreduce: --sizes");
  const CommSetup setup = comm_setup(world);
  const Environment env = measured_environment(setup.env, comm);
  std::unique_ptr<comm::Hierarchy> hierarchy;
  if (o.node_size > 0)
    hierarchy = std::make_unique<comm::Hierarchy>(comm, comm::node_map_by_size(comm, o.node_size),
                                                  comm::parse_intra_node(o.intra_node));
  const std::vector<std::string> algorithms =
      parse_algorithms(o.routes              ? "to_one,sharded,ring,single_copy"
                       : o.tune_path.empty() ? o.algorithms
                                             : "ring,recursive_doubling,halving_doubling,single_copy");
  std::unique_ptr<comm::SingleCopyAllreduce> single_copy;
  if (std::find(algorithms.begin(), algorithms.end(), "single_copy") != algorithms.end()) {
    std::int64_t largest = 0;
    for (std::int64_t bytes : sizes) largest = std::max(largest, std::max<std::int64_t>(1, bytes / elem) * elem);
    single_copy = std::make_unique<comm::SingleCopyAllreduce>(comm, static_cast<std::size_t>(largest));
  }
  RouteDevice device = route_device(o, sizes, elem);
  std::vector<std::string> arms = algorithms;
  if (device.backend != nullptr) arms.push_back("via_host");
  const AllreduceRun run{
      o,
      world,
      comm,
      dtype,
      elem,
      comm::RingOptions{o.segment_bytes},
      setup.memcpy_gbps,
      env,
      o.run_id.empty() ? new_run_id() : o.run_id,
      Ledger(o.ledger_path.empty() ? default_ledger_path(comm.device_memory() ? "cuda" : "cpu") : o.ledger_path),
      parse_collective(o.collective),
      comm.backend() == "mpi" ? mpi_variant_of_environment() : MpiVariant{},
      arms,
      hierarchy.get(),
      single_copy.get(),
      device.backend,
      device.staging.get(),
      device.copy_gbps};
  const int rank = world.rank();
  if (rank == 0) print_header(run);
  CommHarness harness(world, run.collective);
  const CaseInputs inputs{comm, world, dtype, elem, run.ring_options};
  const auto prepare = [&](std::int64_t bytes) {
    return run.collective == Collective::allreduce
               ? size_case(run, bytes)
               : collective_case(run.collective, inputs, std::max<std::int64_t>(1, bytes / elem));
  };
  CommSchedule schedule;
  schedule.warmup = o.warmup;
  schedule.seconds_per_arm = o.seconds_per_size;
  schedule.min_iters = o.min_iters;
  schedule.max_iters = o.max_iters;
  schedule.paired = true;
  bool all_correct = true;
  const auto timings = harness.sweep(sizes, prepare, schedule, [&](const SizeTiming& t) {
    all_correct = all_correct && t.correct;
    if (rank != 0) return;
    for (std::size_t i = 0; i + 1 < t.arms.size(); ++i)
      if (!link_arm(t.arms[i].name)) print_size(run, t.arms[i], t.arms.back(), t.wrong);
    if (t.arms.size() == 1) print_native(run, t.arms.back(), t.wrong);
    if (!o.no_ledger) append_rows(run, t.arms, t.wrong);
  });
  std::vector<comm::HierarchicalPhases> phases;
  if (run.hierarchy != nullptr && all_correct) phases = profile_phases(run, timings);
  if (rank == 0) {
    if (run.collective == Collective::allreduce) print_targets(timings, run.copy_rate, all_correct);
    if (run.hierarchy != nullptr) print_prediction(*run.hierarchy, timings, phases);
    if (o.routes && all_correct) print_routes(run, timings);
    if (run.collective != Collective::allreduce)
      std::cout << fmt::format("results {}\n", all_correct ? "all correct" : "MISMATCHED");
    if (!o.tune_path.empty() && all_correct) write_tuning(run, timings);
    if (!o.tune_path.empty() && !all_correct)
      std::cout << "tuning: " << o.tune_path << " not written (a result mismatched)\n";
    if (!o.no_ledger) std::cout << "ledger: " << run.ledger.path() << " (run " << run.run_id << ")\n";
  }
  return all_correct ? 0 : 1;
}

}  // namespace

MpiVariant mpi_variant_of_environment() {
  MpiVariant v;
  const std::string dynamic = env_or_empty("OMPI_MCA_coll_tuned_use_dynamic_rules");
  const std::string forced = env_or_empty("OMPI_MCA_coll_tuned_allreduce_algorithm");
  if (!forced.empty()) {
    int n = -1;
    try {
      std::size_t used = 0;
      n = std::stoi(forced, &used);
      if (used != forced.size()) n = -1;
    } catch (const std::exception&) {
      n = -1;
    }
    TL_CHECK(n >= 0 && n <= 6, "OMPI_MCA_coll_tuned_allreduce_algorithm=" + forced +
                                   " is not one of Open MPI 4.1's all-reduce algorithms (0 its own decision, 1 "
                                   "basic_linear, 2 nonoverlapping, 3 recursive_doubling, 4 ring, 5 segmented_ring, 6 "
                                   "rabenseifner)");
    // Open MPI ignores a forced algorithm unless the dynamic rules are on: so does the record.
    if (dynamic == "1" || dynamic == "true") v.algorithm = kOpenMpiAllreduce[n];
    v.settings = "coll_tuned_use_dynamic_rules=" + (dynamic.empty() ? std::string("unset") : dynamic) +
                 ", coll_tuned_allreduce_algorithm=" + forced;
  } else {
    v.settings = "Open MPI's own decision";
  }
  const std::string btl = env_or_empty("OMPI_MCA_btl");
  if (!btl.empty()) v.transport = btl;
  v.settings += "; btl " + (btl.empty() ? std::string("Open MPI's default") : btl);
  const std::string tunables = env_or_empty("GLIBC_TUNABLES");
  if (tunables.find("glibc.malloc.mmap_threshold=") != std::string::npos) v.malloc = "tuned";
  v.settings += "; GLIBC_TUNABLES=" + (tunables.empty() ? std::string("unset") : tunables);
  return v;
}

int run_allreduce_study(const AllreduceOptions& options) {
  auto world = comm::MpiCommunicator::world();
  try {
    world->set_timeout(options.timeout);
    return run_sizes(options, *world);
  } catch (const Error& e) {
    world->abort(std::string("error: ") + e.what(), 2);
  }
}

}  // namespace trainlab::bench
