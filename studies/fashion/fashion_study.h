// The Fashion-MNIST study (`make fashion`, and `make resnet` for the residual network;
// apps/fashion_study.cpp is its command line): a model (SmallCNN by default) on real data, trainlab
// against PyTorch. The four IDX files of Debian's dataset-fashion-mnist are imported once (cached:
// `data`), then for each seed trainlab trains the model on them and the PyTorch peer
// (bench/peers/torch_fashion.py, its fastest variant) trains the same architecture with the same
// hyperparameters, initialisation scheme, batch rule, parameter groups and epochs on the same files,
// one after the other (interleaved by seed). The peer trains the models with a twin there (SmallCNN
// and ResNet, with their options); for another model trainlab runs alone, and the study says the
// peer was skipped and why. Each run is a ledger row (studies/fashion/rows.h); the table puts both
// test accuracies (median, min-max over seeds), both samples/s and both training times side by side
// against the run's goal and budget, the first 200 steps' loss curves against each other, and the
// published baselines (the package's two-convolution rows; He et al.'s ResNet-20 beside a ResNet).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/report/section.h"
#include "engine/train/config.h"
#include "studies/fashion/rows.h"

namespace trainlab::bench {

struct FashionStudyOptions {
  ModelConfig model;  // what trainlab trains (built for 1x28x28, 10 classes); the peer only beside SmallCNN
  std::string source = "/usr/share/datasets/fashion-mnist";  // the IDX files
  std::string data = "build/fashion-mnist";                  // the imported data set (made when missing)
  std::string readme = "/usr/share/doc/dataset-fashion-mnist/README.md.gz";  // the published baselines
  std::string ledger_path, backend, python = "/usr/bin/python3", peer_script = "bench/peers/torch_fashion.py";
  std::int64_t epochs = 3, batch = 64, seeds = 3;
  double lr = 0.05, momentum = 0.9;
  double weight_decay = 0;                         // on the model's decayed parameters (its parameter groups)
  double warmup_epochs = 0;                        // the cosine schedule's linear warm-up, in epochs
  MemoryFormat layout = MemoryFormat::contiguous;  // trainlab's activations
  bool fuse = false;                               // trainlab's fused patterns
  double goal = 0.90;                              // the test accuracy the verdict holds trainlab to
  double budget_minutes = 0;                       // and its training time (0: none)
  int threads = 2, workers = 1;
  bool no_peer = false, no_ledger = false;
};

// Why the Fashion-MNIST peer cannot train `model` ("" when it can: a model with a twin there,
// SmallCNN without options or ResNet with any).
std::string fashion_peer_mismatch(const ModelConfig& model);

// Imports the data set if needed, runs every seed (trainlab, then PyTorch), prints the table.
// Returns 0 when every run finished, 1 when one failed (its row says why); throws Error for bad
// options or a source that cannot be imported.
int run_fashion_study(const FashionStudyOptions& options);

// A published result: the model, its test accuracy and where it is quoted from.
struct FashionBaseline {
  std::string model;
  double accuracy = 0;
  std::string source;
};
// The two-convolution rows of Fashion-MNIST's benchmark table, read from the package's README
// (gzipped or not) when it is there, else quoted from the project's README on GitHub.
std::vector<FashionBaseline> fashion_baselines(const std::string& readme);

// Loss curves over the first steps (FashionRunRow::first_losses), each the mean of a trailing
// window of kCurveWindow steps, one per run of `framework`.
inline constexpr std::size_t kCurveWindow = 20;
std::vector<std::vector<double>> smoothed_curves(const std::vector<FashionRunRow>& rows, const std::string& framework);
// trainlab's median smoothed loss against PyTorch's seeds' spread, step by step.
struct CurveAgreement {
  std::size_t seeds = 0;  // the fewer of the two frameworks' runs with curves
  std::size_t steps = 0, within = 0;
  double worst_gap = 0;  // the largest distance outside the spread
};
CurveAgreement curve_agreement(const std::vector<FashionRunRow>& rows);

// The table and the verdicts (markdown) of one run's rows, as the driver prints them.
std::string fashion_report(const std::vector<FashionRunRow>& rows, const std::vector<FashionBaseline>& baselines);

// The report's sections for this study (studies/registry.h): `fashion` (the latest run of any model
// but ResNet) and `resnet` (the latest ResNet run, `make resnet`).
SectionDef fashion_report_section();
SectionDef resnet_report_section();

}  // namespace trainlab::bench
