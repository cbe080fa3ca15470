// bench_tensor_parallel: Megatron's tensor parallelism over the launched ranks against the unsplit
// model on the same cores, and its all-reduces against the alpha-beta model
// (studies/tensor_parallel/tensor_parallel_study.h).
//   scripts/mpirun -np 2 build/bin/bench_tensor_parallel --model gpt
//   scripts/mpirun -np 4 build/bin/bench_tensor_parallel --model smallcnn --batch 64
#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "comm/mpi_communicator.h"
#include "studies/tensor_parallel/tensor_parallel_study.h"

using namespace trainlab;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{
      "bench_tensor_parallel: tensor parallelism (Megatron's split) against the unsplit model and the "
      "cost model",
      "bench_tensor_parallel"};
  bench::TensorParallelStudyOptions o;
  add_model_options(app, o.model, "the model split across the ranks (gpt, smallcnn, resnet)");
  app.add_option("--batch", o.batch, "samples per step (the whole batch on every rank)")
      ->check(FiniteRange(1, 65536))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "the CPU backend each rank runs on")->capture_default_str();
  app.add_option("--threads", o.threads, "threads per rank (the unsplit model gets ranks x threads)")
      ->check(FiniteRange(1, 1024))
      ->capture_default_str();
  app.add_option("--allreduce", o.algorithm,
                 "the sums' all-reduce: auto (by size: recursive doubling, halving-doubling, ring), ring, "
                 "recursive_doubling, halving_doubling, native")
      ->capture_default_str();
  app.add_flag("--fuse", o.fuse, "the backend's fused ops (the GPT's attention in one call), split and unsplit alike");
  app.add_option("--steps", o.steps, "measured steps")->check(FiniteRange(1, 100000))->capture_default_str();
  app.add_option("--warmup", o.warmup, "warm-up steps (excluded)")->check(FiniteRange(0, 1000))->capture_default_str();
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take before the job is ended")
      ->check(FiniteRange(0.1, 86400.0));
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  if (const auto status = parse_command_line(app, argc, argv, "bench_tensor_parallel")) return *status;
  return bench::run_tensor_parallel_study(o);
}
