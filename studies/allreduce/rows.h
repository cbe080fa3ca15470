// The all-reduce study's ledger rows: one `allreduce` row per algorithm and size (bench_allreduce),
// also written by bench_buckets for the single all-reduces its model is fitted to (tool
// "bench_buckets"); collective-cost --fit reads both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"

namespace trainlab::bench {

struct AllreduceConfig {
  int ranks = 0;
  std::int64_t bytes = 0;  // per rank
  std::int64_t count = 0;  // elements
  std::string dtype;
  std::string algorithm;                      // "ring" | "recursive_doubling" | "halving_doubling" | "native"
  std::optional<std::int64_t> segment_bytes;  // the ring's pipeline segment (bench_allreduce)
  std::optional<std::string> communicator;    // "mpi" | "nccl" (bench_allreduce)
  // Over MPI (bench_allreduce): the library's all-reduce algorithm the process ran under ("decision":
  // Open MPI's own choice per size; else the one forced through coll_tuned_allreduce_algorithm),
  // and its malloc ("default": glibc's; "tuned": GLIBC_TUNABLES' mmap and trim thresholds raised).
  std::optional<std::string> mpi_algorithm;  // every row of the process (the ring is timed beside it)
  std::optional<std::string> malloc;         // every row of the process
  std::optional<std::string> mpi_transport;  // OMPI_MCA_btl when forced ("tcp,self"); absent: the default
  // bench_allreduce --collective: reduce_scatter | all_gather | broadcast; absent: the all-reduce.
  std::optional<std::string> collective;
  // bench_allreduce --node-size: the two-level run's rows (its flat arms too), the ranks per node and
  // how data moved inside a node (shared_memory | point_to_point). The arms within_nodes and
  // across_nodes are the two links the prediction is fitted to; across_nodes' bytes are its message,
  // S / node_size.
  std::optional<int> node_size;
  std::optional<std::string> intra_node;
  // bench_allreduce --routes: "routes" (seed 004's routes side by side; its own table, not the
  // all-reduce section's run).
  std::optional<std::string> study;
  bool is_allreduce() const { return !collective || *collective == "all_reduce"; }
  bool two_level() const { return node_size.has_value(); }
  template <class F>
  void fields(F& f) {
    f("ranks", ranks);
    f("bytes", bytes);
    f.optional("count", count);
    f.optional("dtype", dtype);
    f("algorithm", algorithm);
    f.optional("segment_bytes", segment_bytes);
    f.optional("communicator", communicator);
    f.optional("mpi_algorithm", mpi_algorithm);
    f.optional("malloc", malloc);
    f.optional("mpi_transport", mpi_transport);
    f.optional("collective", collective);
    f.optional("node_size", node_size);
    f.optional("intra_node", intra_node);
    f.optional("study", study);
  }
};

struct AllreduceRow {
  static constexpr const char* kKind = "allreduce";
  RowHeader header;
  std::optional<std::string> communicator;  // bench_allreduce's environment: the communicator timed
  std::optional<std::string> tool;          // "bench_buckets": the points of a bucket sweep's fit
  AllreduceConfig config;
  std::vector<double> repeats;  // seconds, every measured iteration (the slowest rank's)
  Summary stats;
  int warmup_iterations_excluded = 0;
  std::optional<double> algbw_gbps, busbw_gbps;  // at the median (bench_allreduce)
  std::optional<double> memcpy_gbps;             // the single-core memcpy rate of the same run
  std::optional<double> device_copy_gbps;        // --routes-device: its device-host copy rate, one way
  std::optional<bool> correct;                   // bench_allreduce: every arm's result exact
  std::optional<std::int64_t> wrong;             // its #wrong: elements that differed, over arms and ranks
  std::optional<double> noise_floor_percent;     // native's even against its odd iterations
  std::optional<int> round;                      // a variant sweep's round (bench/allreduce_variants.py)
  std::string error;                             // status failed: why (the variant's process failed)
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f.optional("communicator", communicator);
    f.optional("tool", tool);
    f("config", config);
    f.optional("round", round);
    if (!header.ok() && !header.status.empty()) {
      f.optional("error", error);
      return;
    }
    f.optional("repeats", repeats);
    f("stats", stats);
    f.optional("warmup_iterations_excluded", warmup_iterations_excluded);
    f.optional("algbw_gbps", algbw_gbps);
    f.optional("busbw_gbps", busbw_gbps);
    f.optional("memcpy_gbps", memcpy_gbps);
    f.optional("device_copy_gbps", device_copy_gbps);
    f.optional("correct", correct);
    f.optional("wrong", wrong);
    f.optional("noise_floor_percent", noise_floor_percent);
  }
  bool from_bench_buckets() const { return tool && *tool == "bench_buckets"; }
};

// The (bytes, median seconds) points of one all-reduce run in a ledger, for the cost model's fit
// (trainlab collective-cost --fit): the run `run` (the latest all-reduce run when empty; a
// bench_buckets run's single all-reduces count), the `algorithm` ("ring" | "native") rows. Throws
// Error naming what is missing.
struct LedgerPoints {
  std::string run_id, dtype;
  int ranks = 0;
  std::vector<std::pair<double, double>> points;
  std::vector<std::string> warnings;  // the ledger's (skipped rows and the like)
};
LedgerPoints allreduce_points(const std::string& path, const std::string& run, const std::string& algorithm);

}  // namespace trainlab::bench
