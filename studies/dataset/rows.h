// The data set study's ledger rows: one `dataset_study_repeat` row per arm and round, written as it
// ends (studies/dataset/driver.cpp). An ok row carries what the loader alone and training on it
// measured; a failed row says why instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"

namespace trainlab::bench {

// One round of one arm (an ok row's fields, at the row's top level).
struct DatasetMeasurement {
  double loader_samples_per_s = 0;
  double read_cpu_us_per_sample = 0, decode_cpu_us_per_sample = 0;
  double page_cache_resident = 0;  // the fraction cached before the loader's timing
  double train_samples_per_s = 0;
  double data_wait_ms_per_step = 0;
  std::vector<double> step_seconds;
  template <class F>
  void fields(F& f) {
    f("loader_samples_per_s", loader_samples_per_s);
    f("read_cpu_us_per_sample", read_cpu_us_per_sample);
    f("decode_cpu_us_per_sample", decode_cpu_us_per_sample);
    f.optional("page_cache_resident", page_cache_resident);
    f("train_samples_per_s", train_samples_per_s);
    f("data_wait_ms_per_step", data_wait_ms_per_step);
    f.optional("step_seconds", step_seconds);
  }
};

struct DatasetRepeatRow {
  static constexpr const char* kKind = "dataset_study_repeat";
  RowHeader header;
  std::string arm;           // "shards-raw", "shards-raw (again)", ...
  bool calibration = false;  // the control measured again: its gap to the control is the noise floor
  int round = 0;
  std::string layout, codec;  // engine/data/disk_dataset.h's names
  int image_size = 0;
  std::int64_t samples = 0;
  int workers = 0;
  std::int64_t batch = 0;
  bool cold = true;                // the page cache dropped before each loader measurement
  std::string model = "smallcnn";  // the registered model trained on it (rows before --model: SmallCNN)
  std::string model_options;       // its keys, "hidden=64" ("" none)
  // The data set's files and bytes per sample (absent from rows written before they were recorded).
  std::optional<std::int64_t> files;
  std::optional<double> bytes_per_sample;
  DatasetMeasurement measurement;  // ok rows
  std::string error;               // the other rows: why
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("arm", arm);
    f.optional("calibration", calibration);
    f.optional("round", round);
    f.optional("layout", layout);
    f.optional("codec", codec);
    f.optional("image_size", image_size);
    f.optional("samples", samples);
    f.optional("workers", workers);
    f.optional("batch", batch);
    f.optional("cold", cold);
    f.optional("model", model);
    f.optional("model_options", model_options);
    f.optional("files", files);
    f.optional("bytes_per_sample", bytes_per_sample);
    // The header is read first: its status says which of the two a row holds.
    if (header.ok()) {
      measurement.fields(f);
    } else {
      f.optional("error", error);
    }
  }
};

}  // namespace trainlab::bench
