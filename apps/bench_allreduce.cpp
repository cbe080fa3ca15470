// bench_allreduce: the hand-written all-reduces (the ring; with --algorithms recursive doubling,
// halving-doubling and the single-copy one in a shared window too) against MPI_Allreduce, size by
// size, side by side.
//   scripts/mpirun -np 2 build/bin/bench_allreduce --sizes 4K..256M
// Per size: a correctness check (ring and native on the same integer-valued data must agree bit
// for bit), then iterations alternating ring and native (warm-up excluded); each iteration starts
// after a barrier and its time is the slowest rank's. algbw = S / t, busbw = algbw * 2 (P - 1) / P
// (nccl-tests' definitions); every busbw is also a fraction of the single-core memcpy rate
// measured in the same run. Timed buffers hold zeros (so repeated sums stay finite); every row goes
// to the ledger.
//
// --comm nccl (a CUDA build, one GPU per rank) times ncclAllReduce on device buffers instead; the
// ring's reduction runs on the host, so its column is skipped there (with the reason) when the
// world has more than one rank. Each NCCL call returns once its stream has finished it.
//
// Over MPI the process records the MPI variant it runs under (Open MPI's forced all-reduce
// algorithm, glibc's malloc tunables: mpi_variant_of_environment); bench/allreduce_variants.py
// launches one process per variant, round after round, into one run.
//
// --write-tuning FILE times the hand-written all-reduces (single-copy where the ranks share a window)
// and writes the thresholds `allreduce: auto` chooses by (comm/tuning.h) for this world size:
//   scripts/mpirun -np 4 build/bin/bench_allreduce --write-tuning results/allreduce_tuning.json
// --node-size N adds the two-level (hierarchical) all-reduce, N consecutive ranks per node; over
// TCP on one host it is the stand-in for a cluster (shared memory inside a node, TCP between):
//   scripts/mpirun -np 4 --mca btl tcp,self build/bin/bench_allreduce --node-size 2
// (Not `--tune`: Open MPI's mpirun has a `--tune FILE` of its own, an MCA parameter file, and finds
// it among the application's arguments too: given an existing file it parsed it as MCA parameters.)
#include "apps/cli_parse.h"
#include "comm/mpi_communicator.h"
#include "studies/allreduce/allreduce_study.h"

using namespace trainlab;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{"bench_allreduce: the ring all-reduce against MPI_Allreduce, side by side", "bench_allreduce"};
  bench::AllreduceOptions o;
  app.add_option("--sizes", o.sizes_spec, "bytes per rank: LO..HI in powers of two, or a list (4K,1M,...)");
  app.add_option("--dtype", o.dtype_name_, "f32 | bf16 | f16 | f64")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "f64"}));
  app.add_option("--seconds-per-size", o.seconds_per_size, "measured time per algorithm and size")
      ->check(FiniteRange(0.01, 60.0));
  app.add_option("--warmup", o.warmup, "warm-up iterations per algorithm and size")->check(FiniteRange(0, 100));
  app.add_option("--min-iters", o.min_iters, "at least this many iterations")->check(FiniteRange(1, 100000));
  app.add_option("--max-iters", o.max_iters, "at most this many iterations")->check(FiniteRange(1, 100000));
  app.add_flag("--routes", o.routes,
               "seed 004's routes for the same buffer: to_one (to rank 0, then broadcast), sharded (the library's "
               "reduce-scatter and all-gather), ring, single_copy, each against the alpha-beta model fitted to this "
               "run's ring");
  app.add_option("--routes-device", o.routes_device,
                 "with --routes: the via-host route too, its data in this backend's memory (cuda: copied to a "
                 "host staging buffer, summed there, copied back; several ranks on one GPU need "
                 "TRAINLAB_CUDA_DEVICE=0)");
  app.add_option("--algorithms", o.algorithms,
                 "the hand-written all-reduces timed beside MPI's, comma-separated: ring, recursive_doubling, "
                 "halving_doubling, single_copy (its data in a window the host's ranks share; the ring where they "
                 "cannot), to_one, sharded (seed 004's routes)")
      ->capture_default_str();
  app.add_option("--collective", o.collective,
                 "all_reduce, or reduce_scatter (ring, halving_doubling against MPI's), all_gather (ring, "
                 "recursive_doubling against MPI's), broadcast (MPI's alone)")
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "broadcast"}))
      ->capture_default_str();
  app.add_option("--segment-bytes", o.segment_bytes, "the ring's pipeline segment")->check(FiniteRange(256, 1 << 30));
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take before the job is ended")
      ->check(FiniteRange(0.1, 86400.0));
  app.add_option("--comm", o.comm_kind, "communicator: mpi, or nccl (CUDA builds, one GPU per rank)")
      ->capture_default_str();
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_<cpu|cuda>.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  app.add_option("--run-id", o.run_id,
                 "the run the rows join (a variant sweep's processes share one: bench/allreduce_variants.py)");
  app.add_option("--round", o.round, "the sweep's round this process is (recorded in its rows)")
      ->check(FiniteRange(1, 100000));
  app.add_option("--write-tuning", o.tune_path,
                 "time ring, recursive_doubling, halving_doubling and single_copy (where the ranks share a window) "
                 "and write allreduce auto's thresholds for this world size into this file (its other world sizes "
                 "kept); the config's allreduce_tuning reads it")
      ->check(NonEmptyPath());
  app.add_option("--node-size", o.node_size,
                 "time the hierarchical all-reduce with this many consecutive ranks per node (dividing the world), "
                 "and the two links its prediction is fitted to; the run ends on prediction against measurement")
      ->check(FiniteRange(1, 1 << 20));
  app.add_option("--intra-node", o.intra_node, "with --node-size: shared_memory or point_to_point inside a node")
      ->check(CLI::IsMember({"shared_memory", "point_to_point"}))
      ->capture_default_str();
  if (const auto status = parse_command_line(app, argc, argv, "bench_allreduce")) return *status;
  return bench::run_allreduce_study(o);
}
