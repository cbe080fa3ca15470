// The data set study (issue 15, seed 002's re-export regression): the same images, exported three
// ways, measured side by side for what the loader can supply and what training gets.
//
//   build/bin/dataset_study [--work DIR] [--samples 8000] [--image-size 64] [--repeats 7] [--workers 2]
//                           [--warm] [--quick] [--ledger FILE | --no-ledger]
//
// Arms, all SyntheticImages' same training samples stored at --image-size pixels:
//   shards-raw          large shards, raw pixels (no decode): the layout before the "re-export"
//   shards-raw (again)  the same data set measured again: the calibration arm (the noise floor)
//   shards-png          the same shards with an expensive codec (zlib inflate in every sample)
//   files-raw           one small file per sample (an open, a read and a close per sample)
// Every round measures every arm in turn (interleaved): the loader alone (cold page cache unless
// --warm), then the model (--model; SmallCNN by default) trained on it for the measured steps after a
// warm-up. Each measurement
// is a ledger row ("dataset_study_repeat"); the table gives medians (min-max), each arm's effect
// against shards-raw in percent and in units of the noise floor, and whether it is separable.
#include <filesystem>
#include <iostream>

#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "backends/error.h"
#include "studies/dataset/driver.h"

using namespace trainlab;
using namespace trainlab::bench;

int main(int argc, char** argv) {
  CLI::App app{
      "dataset_study: the same images as large raw shards, PNG shards and one file per sample, loader and "
      "training measured side by side (seed 002's re-export regression)",
      "dataset_study"};
  DatasetStudyOptions o;
  app.add_option("--work", o.work, "where the data sets are written (replaced on each run)")->capture_default_str();
  app.add_option("--samples", o.samples, "training samples per data set [256..1000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{256}, std::int64_t{1000000}));
  app.add_option("--image-size", o.image_size, "stored pixels (a multiple of 32) [32..512]")
      ->capture_default_str()
      ->check(FiniteRange(32, 512));
  app.add_option("--repeats", o.repeats, "rounds, every arm measured in each [2..100]")
      ->capture_default_str()
      ->check(FiniteRange(2, 100));
  app.add_option("--workers", o.workers, "loader workers [0..64]")->capture_default_str()->check(FiniteRange(0, 64));
  app.add_option("--steps", o.steps, "measured training steps per arm and round [1..100000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{100000}));
  app.add_option("--loader-samples", o.loader_samples, "samples the loader alone is timed over [64..10000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{64}, std::int64_t{10000000}));
  add_model_options(app, o.model, "the model the training steps train on each arm");
  app.add_option("--backend", o.backend, "the training step's backend (default: the best CPU backend)");
  app.add_option("--threads", o.threads, "the training step's compute threads (0: all cores)")
      ->check(FiniteRange(0, 1024));
  app.add_flag("--warm", o.warm, "keep the page cache (default: cold, dropped before each loader measurement)");
  app.add_flag("--quick", o.quick, "a small run for tests: 512 samples at 32 px, 2 rounds, 5 steps");
  app.add_option("--ledger", o.ledger_path, "ledger to append to (default: results/ledger_cpu.jsonl)")
      ->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "write no ledger rows");
  if (const auto status = parse_command_line(app, argc, argv, "dataset_study")) return *status;
  try {
    TL_CHECK(o.image_size % 32 == 0, "--image-size " + std::to_string(o.image_size) + " is not a multiple of 32");
    if (o.quick) {  // small defaults; a flag given beside --quick keeps its value
      if (!app.count("--samples")) o.samples = 512;
      if (!app.count("--image-size")) o.image_size = 32;
      if (!app.count("--repeats")) o.repeats = 2;
      if (!app.count("--steps")) o.steps = 5;
      if (!app.count("--loader-samples")) o.loader_samples = 256;
      o.warmup = 2;
      o.batch = 32;
    }
    return run_dataset_study(o);
  } catch (const Error& e) {
    std::cerr << "dataset_study: error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "dataset_study: error: " << e.what() << "\n";  // one line, never a terminate
    return 2;
  }
}
