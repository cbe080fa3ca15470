// The Fashion-MNIST study (`make fashion`; apps/fashion_study.cpp is its command line): a model
// (SmallCNN by default) on real data, trainlab against PyTorch. The four IDX files of Debian's
// dataset-fashion-mnist are imported once (cached: `data`), then for each seed trainlab trains the
// model on them and the PyTorch peer (bench/peers/torch_fashion.py, its fastest layout) trains the
// same architecture with the same hyperparameters, initialisation scheme, batch rule and epochs on
// the same files, one after the other (interleaved by seed). The peer's model is SmallCNN: for any
// other model trainlab runs alone, and the study says the peer was skipped and why. Each run is a ledger row
// (studies/fashion/rows.h); the table puts both test accuracies (median, min-max over seeds) and both samples/s side by
// side, with the published two-convolution baselines from the package's own README.
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
  int threads = 2, workers = 1;
  bool no_peer = false, no_ledger = false;
};

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

// The table and the verdicts (markdown) of one run's rows, as the driver prints them.
std::string fashion_report(const std::vector<FashionRunRow>& rows, const std::vector<FashionBaseline>& baselines);

// The report's section for this study (studies/registry.h).
SectionDef fashion_report_section();

}  // namespace trainlab::bench
