// The CPU pinning study (seed 000): does confining training and its loader workers to cores help,
// and does the effect survive its own noise floor?
//
//   build/bin/pinning [--repeats 7] [--contend N] [--quick] [--model NAME]
//
// Five arms (studies/pinning/pinning_study.h): default twice (calibration A and B), threads_capped,
// pinned_split and pinned_half_shared, on a workload where loader work competes with compute
// (workers > 0, a per-sample decode cost). The halves come from the machine's topology (hwloc).
// Every repeat of every arm is its own process, started with its CPU mask already set (so that
// the compute library sizes and places its thread pool inside it), repeats interleaved across arms;
// the loader workers are confined by the trainer's worker hook, and every thread's mask is read
// back during the measured steps and recorded. With --contend N the same rounds also run with N
// busy threads of unpinned background load, so one command shows the quiet and the contended
// machine side by side, each with its own noise floor. The workload trains --model (SmallCNN by
// default); each child is started with the same --model and --model-options.
#include <cstdio>
#include <exception>

#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "engine/io/fileio.h"
#include "studies/pinning/driver.h"

using namespace trainlab;
using namespace trainlab::bench;

int main(int argc, char** argv) {
  CLI::App app{"pinning: CPU affinity arms against their own noise floor (seed 000)", "pinning"};
  PinningOptions o;
  app.add_option("--repeats", o.repeats, "repeats per arm, interleaved (the seed: 3 is too few to read)")
      ->check(FiniteRange(1, 100))
      ->capture_default_str();
  app.add_option("--contend", o.contend, "also run every round with N busy threads of unpinned background load")
      ->check(FiniteRange(0, 1024));
  app.add_flag("--quick", o.quick, "3 repeats of 10 measured steps (make test's form)");
  add_model_options(app, o.workload.model, "the model the workload trains (each repeat's child is given it)");
  app.add_option("--batch", o.workload.batch, "batch size")->check(FiniteRange(1, 65536))->capture_default_str();
  app.add_option("--decode-cost", o.workload.decode_cost, "per-sample loader work")
      ->check(FiniteRange(0, 100000))
      ->capture_default_str();
  app.add_option("--workers", o.workload.workers, "loader workers (default: the physical cores of the workers' half)")
      ->check(FiniteRange(1, 64));
  app.add_option("--steps", o.workload.steps, "measured steps per repeat")
      ->check(FiniteRange(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", o.workload.warmup, "warm-up steps per repeat (excluded)")
      ->check(FiniteRange(0, 1000))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "CPU backend (default: the best one)");
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  app.add_option("--trace", o.trace_path,
                 "a Chrome trace of pinned_split, an extra repeat before the rounds (not counted)");
  app.add_option("--timeout", o.timeout, "seconds one repeat may take before it is ended")
      ->check(FiniteRange(1.0, 86400.0));
  // The child's side: set by the study when it starts an arm.
  app.add_option("--child-arm", o.child_arm)->group("");
  app.add_option("--child-threads", o.child_threads)->group("");
  app.add_option("--child-worker-cpus", o.child_workers_cpus)->group("");
  int spin = 0;
  app.add_option("--child-spin", spin)->group("");
  if (const auto status = parse_command_line(app, argc, argv, "pinning")) return *status;
  try {
    if (!o.child_arm.empty()) return run_pinning_child(o);
    if (spin > 0) return run_pinning_spinners(spin);
    // Refused before any arm runs (a directory as --trace printed its error and went on, exit 0).
    if (!o.trace_path.empty()) check_output_file(o.trace_path, "--trace");
    if (o.quick) {
      if (app.count("--repeats") == 0) o.repeats = 3;
      if (app.count("--steps") == 0) o.workload.steps = 10;
      if (app.count("--warmup") == 0) o.workload.warmup = 2;
    }
    return run_pinning(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pinning: error: %s\n", e.what());
    return 2;
  }
}
