// bench_buckets: a gradient buffer all-reduced in buckets, for each bucket size of a sweep,
// measured beside the alpha-beta model fitted in the same run (seed 001, part f).
//   scripts/mpirun -np 2 build/bin/bench_buckets                 # SmallCNN's gradient (~4.3 MB)
//   scripts/mpirun -np 2 build/bin/bench_buckets --model mlp     # a registered model's gradient
//   scripts/mpirun -np 4 build/bin/bench_buckets --params 25e6   # a larger model
// First the fit: single all-reduces at every bucket size and at the whole buffer, fitted with
// T(S) = 2(P-1) alpha + 2(P-1)/P S/B (one line, or two regimes when one line fits poorly). Then the
// sweep: the buffer cut into ceil(S/b) buckets, all-reduced one after another. (The single
// all-reduces walk through the buffer, so their data is as cold as the sweep's.) All configurations
// are timed round-robin (so drift hits them alike), each sample the slowest rank's, warm-up
// excluded. The ideal is the fitted bandwidth term of the whole buffer (no latency at all); the
// seed's rule picks the smallest bucket within 15% of it.
#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "comm/mpi_communicator.h"
#include "studies/buckets/buckets_study.h"

using namespace trainlab;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{"bench_buckets: a gradient buffer all-reduced in buckets, measured beside the fitted alpha-beta model",
               "bench_buckets"};
  bench::BucketsOptions o;
  const ModelFlags model_flags = add_model_options(
      app, o.model, "the model whose gradient is all-reduced: its parameter count at its default input");
  app.add_option("--params", o.params,
                 "gradient elements (e.g. 25e6), instead of --model's parameter count (SmallCNN's by default, about "
                 "4.3 MB in f32)")
      ->check(FiniteRange(1.0, 4e9))
      ->excludes(model_flags.model)
      ->excludes(model_flags.options);
  app.add_option("--buckets", o.buckets_spec, "bucket sizes in bytes: LO..HI in powers of two, or a list (64K,1M)")
      ->capture_default_str();
  app.add_option("--dtype", o.dtype_name, "f32 | bf16 | f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--allreduce", o.algorithm_name_, "ring (hand-written) | native (MPI_Allreduce)")
      ->check(CLI::IsMember({"ring", "native"}))
      ->capture_default_str();
  app.add_option("--seconds-per-config", o.seconds_per_config, "measured time per configuration")
      ->check(FiniteRange(0.01, 60.0))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "warm-up samples per configuration")->check(FiniteRange(0, 100));
  app.add_option("--min-iters", o.min_iters, "at least this many samples")->check(FiniteRange(1, 100000));
  app.add_option("--max-iters", o.max_iters, "at most this many samples")->check(FiniteRange(1, 100000));
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take before the job is ended")
      ->check(FiniteRange(0.1, 86400.0));
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  if (const auto status = parse_command_line(app, argc, argv, "bench_buckets")) return *status;
  return bench::run_buckets_study(o);
}
