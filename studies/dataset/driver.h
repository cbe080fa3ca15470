// The data set study's driver (issue 15, seed 002's re-export regression; apps/dataset_study.cpp is
// its command line): the same images exported as large raw shards, PNG shards and one file per
// sample, every round measuring every arm in turn (the loader alone, then the model trained on it),
// each measurement a ledger row (studies/dataset/rows.h), and the table of
// studies/dataset/dataset_study.h printed from those rows.
#pragma once

#include <cstdint>
#include <string>

#include "engine/train/config.h"

namespace trainlab::bench {

struct DatasetStudyOptions {
  ModelConfig model;  // what every arm's training steps train (SmallCNN by default)
  std::string work = "build/dataset-study", ledger_path, backend;
  std::int64_t samples = 8000, loader_samples = 4096, steps = 40, warmup = 5, batch = 64;
  int image_size = 64, repeats = 7, workers = 2, threads = 0;
  bool warm = false, quick = false, no_ledger = false;
};

// Writes the data sets under options.work (a directory, made when missing; never a file or a
// device), measures every arm in every round, and prints the table. Returns 0; throws Error (and
// std::filesystem::filesystem_error) naming what is wrong.
int run_dataset_study(const DatasetStudyOptions& options);

}  // namespace trainlab::bench
