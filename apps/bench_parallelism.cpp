// bench_parallelism: seed 004's doors (data, pipeline, tensor parallelism) against one process at
// the same global batch, round-robin in one run (studies/parallelism/parallelism_study.h).
//   scripts/mpirun -np 2 build/bin/bench_parallelism --model gpt --fuse
//   scripts/mpirun -np 2 build/bin/bench_parallelism --model smallcnn --batch 64
#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "comm/mpi_communicator.h"
#include "studies/parallelism/parallelism_study.h"

using namespace trainlab;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{"bench_parallelism: data, pipeline and tensor parallelism side by side at one global batch",
               "bench_parallelism"};
  bench::ParallelismStudyOptions o;
  add_model_options(app, o.model, "the model every door trains (pipeline: one with parts; tensor: one with a split)");
  app.add_option("--batch", o.batch, "the global batch of every door")
      ->check(FiniteRange(1, 65536))
      ->capture_default_str();
  app.add_option(
         "--doors", o.doors,
         "one (the unsplit model in one process), data, zero1, zero2, zero3 (DDP with ZeRO-1, 2 or 3), pipeline, "
         "tensor, data-pipeline, data-tensor (2 replicas of the split over half the ranks: an even world >= "
         "4); comma-separated")
      ->capture_default_str();
  app.add_option("--micro-batches", o.micro_batches, "the pipeline door's micro-batches (1F1B)")
      ->check(FiniteRange(1, 4096))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "the CPU backend every rank runs on")->capture_default_str();
  app.add_option("--threads", o.threads, "threads per rank (the one-process doors: 1 and ranks x threads)")
      ->check(FiniteRange(1, 1024))
      ->capture_default_str();
  app.add_flag("--fuse", o.fuse, "the backend's fused ops, every door alike");
  app.add_option("--steps", o.steps, "measured steps per door")->check(FiniteRange(1, 100000))->capture_default_str();
  app.add_option("--warmup", o.warmup, "warm-up steps per door (excluded)")
      ->check(FiniteRange(0, 1000))
      ->capture_default_str();
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take before the job is ended")
      ->check(FiniteRange(0.1, 86400.0));
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  app.add_option("--memory-gib", o.memory_gib,
                 "the memory per rank the \"fits\" column divides: the largest model whose state (parameters, "
                 "gradients, optimiser state, at each door's bytes per parameter) fits in it")
      ->check(FiniteRange(0.001, 1e6))
      ->capture_default_str();
  if (const auto status = parse_command_line(app, argc, argv, "bench_parallelism")) return *status;
  return bench::run_parallelism_study(o);
}
