// The loader benchmark (trainlab loader-bench): how fast a data set on disk can be loaded, at each
// worker count, and what that means for a training step. For each worker count, interleaved in
// every round: the loader alone (samples/s, the readers' CPU seconds per sample for reading and for
// decoding), then training the model (--model; SmallCNN by default) at that worker count (samples/s
// and the data wait per step, warm-up excluded). The loader's cap is the best worker count's median.
// Cold runs drop the data set's pages from the page cache before each measurement and record how
// much stayed cached.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "engine/train/trainer.h"

namespace trainlab::bench {

// One measurement's setting: the data set, the loader's workers and batch, the samples the loader
// alone is timed over (after one batch that starts the workers), a cold page cache or not.
struct LoaderRun {
  std::string data;
  int workers = 2;
  std::int64_t batch = 64;
  std::int64_t samples = 4096;
  bool cold = false;
  std::uint64_t seed = 0;
};
struct LoaderMeasurement {
  double samples_per_s = 0, read_us = 0, decode_us = 0;  // CPU microseconds per sample
  double resident = 0;                                   // page-cache fraction before the timing
};
// The loader alone over run.data's training split.
LoaderMeasurement measure_loader(const LoaderRun& run);
// `model` (built for the data set's sample shape and classes) trained on run.data at run.workers:
// `warmup` steps excluded, then `steps` measured.
TrainResult train_on_data(const LoaderRun& run, std::int64_t steps, std::int64_t warmup, const std::string& backend,
                          int threads, const ModelConfig& model = {});

// One loader-bench measurement: a worker count in a round, the loader alone and, with training
// steps, the training step on it.
struct LoaderDatasetFields {
  std::string dir, layout, codec;
  int quality = 0, image_size = 0;
  std::int64_t files = 0, bytes = 0;
  template <class F>
  void fields(F& f) {
    f("dir", dir);
    f.optional("layout", layout);
    f.optional("codec", codec);
    f.optional("quality", quality);
    f.optional("image_size", image_size);
    f.optional("files", files);
    f.optional("bytes", bytes);
  }
};
struct LoaderRepeatRow {
  static constexpr const char* kKind = "loader_repeat";
  RowHeader header;
  int round = 0, workers = 0;
  std::int64_t batch = 0;
  bool cold = false;
  LoaderDatasetFields dataset;
  std::optional<double> loader_samples_per_s, read_cpu_us_per_sample, decode_cpu_us_per_sample, page_cache_resident;
  std::optional<double> train_samples_per_s, data_wait_ms_per_step;
  std::int64_t train_steps = 0, warmup_steps = 0;
  std::vector<double> step_seconds;
  std::string model = "smallcnn";  // the registered model the training steps ran (rows before --model: SmallCNN)
  std::string model_options;       // its keys, "hidden=64" ("" none)
  std::string error;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f.optional("round", round);
    f("workers", workers);
    f.optional("batch", batch);
    f.optional("cold", cold);
    f("dataset", dataset);
    f.optional("loader_samples_per_s", loader_samples_per_s);
    f.optional("read_cpu_us_per_sample", read_cpu_us_per_sample);
    f.optional("decode_cpu_us_per_sample", decode_cpu_us_per_sample);
    f.optional("page_cache_resident", page_cache_resident);
    f.optional("train_samples_per_s", train_samples_per_s);
    f.optional("data_wait_ms_per_step", data_wait_ms_per_step);
    f.optional("train_steps", train_steps);
    f.optional("warmup_steps", warmup_steps);
    f.optional("step_seconds", step_seconds);
    f.optional("model", model);
    f.optional("model_options", model_options);
    f.optional("error", error);
    if (header.ok() && !loader_samples_per_s) throw RowError("no loader_samples_per_s");
  }
};

struct LoaderBenchOptions {
  std::string data;  // the data set's directory (trainlab make-dataset)
  std::vector<int> workers{0, 1, 2, 4};
  bool cold = false;
  std::int64_t batch = 64;
  std::int64_t samples = 4096;    // loaded per loader measurement (whole batches; the first excluded)
  std::int64_t train_steps = 30;  // measured training steps per worker count (0: the loader alone)
  std::int64_t train_warmup = 5;
  int repeats = 3;
  std::string backend;  // empty: the default CPU backend
  int threads = 0;      // the training step's compute threads (0: the backend's default)
  std::uint64_t seed = 0;
  std::string ledger;  // empty: results/ledger_cpu.jsonl
  ModelConfig model;   // what the training steps train
};

struct LoaderBenchArm {
  int workers = 0;
  std::vector<double> samples_per_s;        // the loader alone, one per round
  std::vector<double> read_us, decode_us;   // CPU microseconds per sample, one per round
  std::vector<double> resident;             // page-cache fraction before each loader measurement
  std::vector<double> train_samples_per_s;  // training at this worker count, one per round
  std::vector<double> data_wait_ms;         // per training step, one per round
  std::vector<std::string> errors;          // failed measurements (kept, with the reason)
};

struct LoaderBenchResult {
  std::string run_id, dataset, describe, ledger;
  std::vector<LoaderBenchArm> arms;
};

LoaderBenchResult run_loader_bench(const LoaderBenchOptions& options, std::ostream& log);
// The table as printed: per worker count the medians (min-max), the cap and its verdict line.
std::string loader_bench_table(const LoaderBenchResult& result, const LoaderBenchOptions& options);

}  // namespace trainlab::bench
