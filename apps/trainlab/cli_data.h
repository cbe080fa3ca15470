// trainlab's data set and diagnosis commands: make-dataset (a data set on disk from SyntheticImages,
// imported from a user's images: engine/data/dataset_import.h, or token streams from a text corpus:
// engine/data/token_dataset.h),
// verify-dataset (every file against the manifest), loader-bench (bench/measure/loader_bench.h),
// throughput-budget, inspect and diagnose (bench/measure/diagnosis.h). Registered on the trainlab app by cli.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "bench/measure/diagnosis.h"
#include "bench/measure/loader_bench.h"
#include "engine/data/dataset_import.h"
#include "engine/data/disk_dataset.h"

namespace trainlab {

struct DataCommands {
  CLI::App* make = nullptr;
  CLI::App* verify = nullptr;
  DatasetWriteOptions write;
  std::string layout = "shards", codec = "jpeg";
  std::int64_t samples = 50000, held_out = 1000;
  std::uint64_t seed = 0;
  std::string from;  // imagefolder:ROOT | idx:DIR | cifar10:DIR | text:FILE|DIR ("": SyntheticImages)
  ImportOptions import;
  std::string vocabulary = "chars";  // text: chars | bytes
  double held_out_fraction = 0.1;    // text: the corpus's last fraction held out
  std::string verify_dir;
  CLI::App* loader = nullptr;
  bench::LoaderBenchOptions bench;
  std::string workers = "0,1,2,4";
  CLI::App* budget = nullptr;
  bench::BudgetInput budget_input;
  bool budget_seed_case = false;
  CLI::App* inspect = nullptr;
  std::string inspect_dir;
  CLI::App* diagnose = nullptr;
  bench::DiagnoseOptions diagnose_options;
};

void add_data_commands(CLI::App& app, DataCommands& c);
// The exit status of the data command the command line chose; nullopt when it chose another.
std::optional<int> run_data_command(DataCommands& c);

}  // namespace trainlab
