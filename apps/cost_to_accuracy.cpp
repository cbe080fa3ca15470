// cost_to_accuracy: the cost-to-accuracy study (seed 000), what it costs to reach a model this good.
//
//   build/bin/cost_to_accuracy --rate 0.35 [--config configs/cost_cpu.yaml] [--quick] [--model NAME]
//                              [--data DIR] [--target 0.87] [--scaling-ledger results/ledger_cpu.jsonl]
//
// The study is studies/cost_to_accuracy/ (cost_driver.cpp: each configuration trained from scratch
// to the target, repeats interleaved, a ledger row per repeat); this main parses the command line.
#include <cmath>
#include <cstdio>

#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "studies/cost_to_accuracy/cost_study.h"

using namespace trainlab;

int main(int argc, char** argv) {
  CLI::App app{"cost_to_accuracy: what it costs to reach held-out accuracy, per configuration (seed 000)",
               "cost_to_accuracy"};
  bench::CostOptions o;
  app.add_option("--rate", o.rate,
                 "the machine's price in $/hour (required: there is no honest default price; a made-up rate makes a "
                 "made-up cost)")
      ->check(FiniteRange(1e-9, 1e9));
  app.add_option("--config", o.config_path,
                 "the study file (default: configs/cost_cuda.yaml where a GPU is found, else configs/cost_cpu.yaml)");
  app.add_flag("--quick", o.quick, "the study file's quick form (a lower target, fewer steps and repeats)");
  app.add_option("--repeats", o.repeats, "repeats per configuration (default: the study file's)")
      ->check(FiniteRange(1, 100));
  app.add_option("--data", o.data,
                 "a data set on disk (trainlab make-dataset) to train and evaluate on instead of the study file's "
                 "(its data: key, else SyntheticImages); its held-out split is the held-out set");
  app.add_option("--target", o.target,
                 "the target in the study file's metric: held-out accuracy in (0, 1], or held-out loss > 0 (nats) "
                 "for a loss study such as configs/cost_gpt.yaml (default: the study file's; a real data set needs "
                 "its own, chosen from a pilot run)")
      ->check(FiniteRange(1e-9, 1e9));
  const ModelFlags model_flags = add_model_options(
      app, o.model,
      "the model every configuration trains, in place of the study file's (its model: key, else smallcnn); a "
      "target is a property of the model too");
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_<device>.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  app.add_option("--scaling-ledger", o.scaling_ledger,
                 "a ledger with a bench_scaling run: the time and $ to target at each world size")
      ->check(NonEmptyPath());
  if (const auto status = parse_command_line(app, argc, argv, "cost_to_accuracy")) return *status;
  if (app.count("--rate") > 0 && !std::isfinite(o.rate)) {
    std::fprintf(stderr, "cost_to_accuracy: error: --rate %g is not a price in $/hour (a finite number > 0)\n", o.rate);
    return 2;
  }
  if (app.count("--rate") == 0) {
    std::fprintf(stderr,
                 "cost_to_accuracy: error: --rate is required: the price of this machine in $/hour (e.g. --rate 0.35). "
                 "There is no default: a made-up price would make up the cost this study exists to measure\n");
    return 2;
  }
  o.model_given = model_flags.given();
  return bench::run_cost_study(o);
}
