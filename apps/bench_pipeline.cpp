// bench_pipeline: pipeline parallelism (a stage per rank; GPipe and 1F1B) against seed 003's
// fill-and-drain bound, for each micro-batch count (studies/pipeline/pipeline_study.h).
//   scripts/mpirun -np 2 build/bin/bench_pipeline                      # SmallCNN, 2 stages
//   scripts/mpirun -np 4 build/bin/bench_pipeline --model gpt --trace pipeline.json
//   scripts/mpirun -np 2 build/bin/bench_pipeline --cut 0,3            # an imbalanced cut
//   scripts/mpirun -np 4 build/bin/bench_pipeline --data-parallel 2    # 2 pipelines x 2 stages
#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "comm/mpi_communicator.h"
#include "studies/pipeline/pipeline_study.h"

using namespace trainlab;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{"bench_pipeline: pipeline parallelism, a stage per rank, against the fill-and-drain bound",
               "bench_pipeline"};
  bench::PipelineStudyOptions o;
  add_model_options(app, o.model, "the model cut into stages (its parts: `trainlab models` lists the models)");
  app.add_option("--schedules", o.schedules, "gpipe | 1f1b, comma-separated")->capture_default_str();
  app.add_option("--micro-batches", o.micro_batches, "micro-batch counts m per step, comma-separated")
      ->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "samples per micro-batch")
      ->check(FiniteRange(1, 65536))
      ->capture_default_str();
  app.add_option("--cut", o.cut,
                 "each stage's first part, comma-separated (0,2), or balanced (by each part's measured time); "
                 "default: the parts spread evenly by count");
  app.add_option("--dtype", o.dtype, "f32, or bf16 (autocast over f32 master weights; activations cross in bf16)")
      ->capture_default_str();
  app.add_option("--data-parallel", o.data_parallel,
                 "pipelines: the ranks as this many data-parallel replicas of a pipeline of ranks / N stages, each "
                 "stage's gradients averaged over them (2 at 4 ranks: 2 x 2)")
      ->check(FiniteRange(1, 4096))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "the CPU backend each stage runs on")->capture_default_str();
  app.add_option("--threads", o.threads, "threads per rank")->check(FiniteRange(1, 1024))->capture_default_str();
  app.add_option("--steps", o.steps, "measured steps per configuration")
      ->check(FiniteRange(1, 10000))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "warm-up steps per configuration (excluded)")
      ->check(FiniteRange(0, 1000))
      ->capture_default_str();
  app.add_option("--trace", o.trace_path, "write each configuration's last step as a Perfetto timeline (JSON)")
      ->check(NonEmptyPath());
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take before the job is ended")
      ->check(FiniteRange(0.1, 86400.0));
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  if (const auto status = parse_command_line(app, argc, argv, "bench_pipeline")) return *status;
  return bench::run_pipeline_study(o);
}
