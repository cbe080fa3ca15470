// bench_allreduce as a library call: the options its command line sets and the run itself (the
// executable, apps/bench_allreduce.cpp, parses the command line and calls run_allreduce_study).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/report/section.h"
#include "comm/ring_allreduce.h"

namespace trainlab::bench {

struct AllreduceOptions {
  std::string sizes_spec = "4K..256M", dtype_name_ = "f32", ledger_path, comm_kind = "mpi";
  // The hand-written all-reduces timed beside native: ring, recursive_doubling, halving_doubling.
  std::string algorithms = "ring";
  // all_reduce, or one of the collectives beside it (studies/allreduce/collectives.h): reduce_scatter,
  // all_gather, broadcast; each has its own hand-written arms (--algorithms is the all-reduce's).
  std::string collective = "all_reduce";
  double seconds_per_size = 0.4, timeout = 300;
  int warmup = 3, min_iters = 5, max_iters = 500;
  std::size_t segment_bytes = comm::RingOptions{}.segment_bytes;
  bool no_ledger = false;
  // A process of a variant sweep (bench/allreduce_variants.py): the sweep's run id and round.
  std::string run_id;
  int round = 0;
  // --write-tuning FILE: time the three hand-written all-reduces, derive allreduce auto's thresholds for
  // this world size from their medians (comm::derive_thresholds) and write them into FILE (its
  // entries for other world sizes kept).
  std::string tune_path;
  // --node-size N (0: off): N consecutive ranks per "node"; the hierarchical all-reduce joins the
  // arms, with the two links its prediction is fitted to (within_nodes, across_nodes), and the run
  // ends on the prediction against the measurement (studies/allreduce/hierarchical.h). --intra-node:
  // how data moves inside a node (shared_memory, point_to_point).
  int node_size = 0;
  std::string intra_node = "shared_memory";
  // --routes: seed 004's routes for the same gradients (to_one, sharded, ring, single_copy; the
  // library's all-reduce last), each against the alpha-beta model fitted to this run's ring
  // (studies/allreduce/routes.h). Its rows say study "routes" and stay out of the all-reduce section.
  bool routes = false;
  // --routes-device NAME: with --routes, the via-host route too, its data in this backend's memory
  // (cuda; a backend whose tensors are host memory is refused).
  std::string routes_device;
};

// The MPI variant a process runs under, read from its environment as Open MPI and glibc read it:
// the all-reduce algorithm forced through OMPI_MCA_coll_tuned_use_dynamic_rules=1 and
// OMPI_MCA_coll_tuned_allreduce_algorithm=N ("decision" when none is: Open MPI's own choice per
// size), and the malloc (GLIBC_TUNABLES raising glibc.malloc.mmap_threshold: "tuned", else
// "default"). Throws Error naming a forced algorithm number Open MPI 4.1 does not have.
struct MpiVariant {
  std::string algorithm = "decision";  // decision | basic_linear | nonoverlapping | recursive_doubling | ring |
                                       // segmented_ring | rabenseifner
  std::string malloc = "default";      // default | tuned
  // Open MPI's byte transfer layers as forced (OMPI_MCA_btl, which mpirun --mca btl sets: "tcp,self"
  // is the wire between machines, even on one); "default" when not forced (shared memory on one host).
  std::string transport = "default";
  std::string settings;  // what set them, for the header line
};
MpiVariant mpi_variant_of_environment();

// Runs it on the launched ranks (MPI is initialised by the caller); returns the exit status.
int run_allreduce_study(const AllreduceOptions& options);

// The report's sections for this study (studies/registry.h): the all-reduce, the other
// collectives (--collective) and the two-level run (--node-size).
SectionDef allreduce_report_section();
SectionDef collectives_report_section();
SectionDef allreduce_hierarchical_report_section();  // --node-size (hierarchical_section.cpp)
SectionDef allreduce_routes_report_section();        // --routes (routes_section.cpp)

}  // namespace trainlab::bench
