// The memory study (issue 13, seed 003's capacity levers): how much memory each lever takes off a
// rank, and what it costs in step time.
//
//   scripts/mpirun -np 2 build/bin/memory_study [--batches 32,128,512] [--recompute none,convs,all]
//                                               [--zero 0,1,2,3] [--repeats 7] [--quick] [--model NAME]
//
// Every arm (batch x recompute x zero) is a short DDP training run over the launched ranks: warm-up
// steps excluded, then the measured steps, the tensor memory of each rank by category (the engine's
// accounting: engine/instrument/memory_usage.h) and the median step time of the slowest rank. The repeats are
// interleaved across arms; the control arm (the middle batch, recompute none, zero 0) runs twice per
// round, and the gap between its two copies is the noise floor. Every repeat is a ledger row
// ("memory_repeat"); the tables come from those rows (studies/memory/memory_study.h), here and in
// bench_report. Every arm trains --model (SmallCNN by default); the recompute levels the model marks no
// blocks for are left out of the default list (and refused when --recompute names them).
#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "comm/mpi_communicator.h"
#include "studies/memory/driver.h"

using namespace trainlab;
using namespace trainlab::bench;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{"memory_study: batch x recompute x ZeRO stage, memory per rank by category and step time, interleaved",
               "memory_study"};
  MemoryOptions o;
  add_model_options(app, o.model, "the model every arm trains");
  app.add_option("--batches", o.batches, "global batch sizes (each split over the ranks)")->capture_default_str();
  app.add_option("--recompute", o.recompute, "recompute levels: none, convs, all (by default, those the model takes)")
      ->capture_default_str();
  app.add_option("--zero", o.zero, "ZeRO stages: 0, 1, 2, 3 (default: 0,1,2,3 over two or more ranks, 0 alone on one)");
  app.add_option("--repeats", o.repeats, "repeats per arm, interleaved")
      ->capture_default_str()
      ->check(FiniteRange(1, 100));
  app.add_option("--steps", o.steps, "measured steps per run")->capture_default_str()->check(FiniteRange(1, 100000));
  app.add_option("--warmup", o.warmup, "warm-up steps per run (excluded; at least 1)")
      ->capture_default_str()
      ->check(FiniteRange(1, 1000));
  app.add_option("--threads", o.threads, "compute threads per rank")
      ->capture_default_str()
      ->check(FiniteRange(1, 1024));
  app.add_option("--backend", o.backend, "engine backend (default: the default CPU backend)");
  app.add_option("--dtype", o.dtype, "f32 | bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--optimizer", o.optimizer, "sgd (momentum 0.9) | adamw")->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take")->check(FiniteRange(0.1, 86400.0));
  app.add_flag("--quick", o.quick,
               "a smoke run: batches 32,128, recompute none,convs, 2 repeats of 2 + 3 steps (unless given)");
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  if (const auto status = parse_command_line(app, argc, argv, "memory_study")) return *status;
  o.recompute_given = app.count("--recompute") > 0;
  if (o.quick) {  // the smoke run's sizes, where not given explicitly
    if (app.count("--batches") == 0) o.batches = "32,128";
    if (app.count("--recompute") == 0) o.recompute = "none,convs";
    if (app.count("--repeats") == 0) o.repeats = 2;
    if (app.count("--steps") == 0) o.steps = 3;
    if (app.count("--warmup") == 0) o.warmup = 2;
  }
  return run_memory_study(o);
}
