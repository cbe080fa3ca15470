// The Fashion-MNIST study's ledger rows: one `fashion_run` row per training run (trainlab's or its
// PyTorch peer's, one seed), written as the run ends (studies/fashion/fashion_study.cpp). An ok row
// carries the test accuracy (overall and per class), the training time and the samples/s; a
// failed row says why instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"

namespace trainlab::bench {

struct FashionRunRow {
  static constexpr const char* kKind = "fashion_run";
  RowHeader header;
  std::string framework;  // "trainlab" | "pytorch"
  std::string variant;    // what ran: trainlab's backend and layout, PyTorch's fastest variant and version
  std::int64_t seed = 0, epochs = 0, steps = 0, batch = 0;
  double lr = 0, momentum = 0;
  std::string schedule;
  std::string dataset;             // the data set: its source and its manifest's CRC-32
  std::string model = "smallcnn";  // the registered model trained (rows before --model: SmallCNN)
  std::string model_options;       // its keys, "hidden=64" ("" none)
  double weight_decay = 0;         // on the model's decayed parameters (its groups: Module::decays)
  std::int64_t warmup_steps = 0;   // the schedule's linear warm-up
  double goal = 0.90;              // the test accuracy the run is held to
  double budget_seconds = 0;       // and the training time (0: none)
  // ok rows
  double test_accuracy = 0;
  std::int64_t test_samples = 0;
  std::vector<double> per_class_accuracy;
  std::vector<std::string> class_names;
  std::vector<std::int64_t> confusion;  // trainlab's: classes x classes, true label (row) by prediction
  double train_seconds = 0, samples_per_s = 0;
  std::vector<double> first_losses;  // the training loss of each of the first (up to 200) steps
  std::string error;                 // failed rows
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("framework", framework);
    f.optional("variant", variant);
    f.optional("seed", seed);
    f.optional("epochs", epochs);
    f.optional("steps", steps);
    f.optional("batch", batch);
    f.optional("lr", lr);
    f.optional("momentum", momentum);
    f.optional("schedule", schedule);
    f.optional("dataset", dataset);
    f.optional("model", model);
    f.optional("model_options", model_options);
    f.optional("weight_decay", weight_decay);
    f.optional("warmup_steps", warmup_steps);
    f.optional("goal", goal);
    f.optional("budget_seconds", budget_seconds);
    if (header.ok()) {
      f("test_accuracy", test_accuracy);
      f.optional("test_samples", test_samples);
      f.optional("per_class_accuracy", per_class_accuracy);
      f.optional("class_names", class_names);
      f.optional("confusion", confusion);
      f("train_seconds", train_seconds);
      f("samples_per_s", samples_per_s);
      f.optional("first_losses", first_losses);
    } else {
      f.optional("error", error);
    }
  }
};

}  // namespace trainlab::bench
