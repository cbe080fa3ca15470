// The Fashion-MNIST study (issue 26, `make fashion`; issue 45, `make resnet`): SmallCNN (or --model's
// model) trained on real data by trainlab and by PyTorch, side by side, against the published
// baselines, a goal and a time budget.
//
//   build/bin/fashion_study [--source DIR] [--data DIR] [--epochs 3] [--seeds 3] [--batch 64]
//                           [--lr 0.05] [--momentum 0.9] [--weight-decay 0] [--warmup-epochs 0]
//                           [--layout nchw|nhwc] [--fuse] [--goal 0.9] [--budget-minutes 0]
//                           [--threads 2] [--workers 1] [--no-peer]
//                           [--model NAME] [--model-options K=V,...] [--ledger FILE | --no-ledger]
//
// The IDX files (Debian's dataset-fashion-mnist: /usr/share/datasets/fashion-mnist) are imported
// once into --data (raw pixels; reused while it is an import of --source). Then for each seed,
// trainlab trains the model (built for 1x28x28, 10 classes) and bench/peers/torch_fashion.py trains
// the same model in PyTorch (its fastest layout, probed first) with the same hyperparameters,
// initialisation scheme, batch rule, parameter groups and epochs; each run is a ledger row
// ("fashion_run"). The peer trains SmallCNN and ResNet: with another --model, trainlab runs alone and
// the study says the peer was skipped and why. The table: test accuracy (median, min-max over seeds),
// samples/s and training time for both, the first 200 steps' loss curves, the goal and the budget,
// the published baselines.
#include <filesystem>
#include <iostream>

#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "backends/error.h"
#include "studies/fashion/fashion_study.h"

using namespace trainlab;
using namespace trainlab::bench;

int main(int argc, char** argv) {
  CLI::App app{"fashion_study: SmallCNN (or --model's model) on Fashion-MNIST, trainlab and PyTorch side by side",
               "fashion_study"};
  FashionStudyOptions o;
  add_model_options(app, o.model,
                    "the model trainlab trains (the PyTorch peer trains SmallCNN and ResNet: with another model, "
                    "trainlab runs alone)");
  app.add_option("--source", o.source, "the IDX files' directory")->capture_default_str();
  app.add_option("--data", o.data, "the imported data set (made when missing)")->capture_default_str();
  app.add_option("--readme", o.readme, "Fashion-MNIST's README, for the published baselines")->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs per run [1..1000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{1000}));
  app.add_option("--seeds", o.seeds, "seeds 0..N-1, each trained by both [1..100]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{100}));
  app.add_option("--batch", o.batch, "batch size [1..65536]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{65536}));
  app.add_option("--lr", o.lr, "peak learning rate of the cosine schedule (0..10]")
      ->capture_default_str()
      ->check(FiniteRange(1e-9, 10.0));
  app.add_option("--momentum", o.momentum, "SGD momentum [0..1)")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 0.999));
  app.add_option("--weight-decay", o.weight_decay, "weight decay on the model's decayed parameters [0..1]")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 1.0));
  app.add_option("--warmup-epochs", o.warmup_epochs, "the schedule's linear warm-up, epochs [0..--epochs)")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 1000.0));
  std::string layout = "nchw";
  app.add_option("--layout", layout, "trainlab's activations: nchw | nhwc")
      ->capture_default_str()
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  app.add_flag("--fuse", o.fuse, "trainlab's fused patterns (conv+bias+ReLU, batch norm+add+ReLU, ...)");
  app.add_option("--goal", o.goal, "the test accuracy trainlab is held to (0..1]")
      ->capture_default_str()
      ->check(FiniteRange(1e-6, 1.0));
  app.add_option("--budget-minutes", o.budget_minutes, "trainlab's training time budget per seed (0: none)")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 1e6));
  app.add_option("--threads", o.threads, "compute threads of both frameworks [1..1024]")
      ->capture_default_str()
      ->check(FiniteRange(1, 1024));
  app.add_option("--workers", o.workers, "trainlab's loader workers [0..64]")
      ->capture_default_str()
      ->check(FiniteRange(0, 64));
  app.add_option("--backend", o.backend, "trainlab's backend (default: the best CPU backend)");
  app.add_option("--python", o.python, "the interpreter with PyTorch")->capture_default_str();
  app.add_option("--peer", o.peer_script, "the PyTorch peer script")->capture_default_str();
  app.add_flag("--no-peer", o.no_peer, "trainlab only (as with any --model but SmallCNN and ResNet)");
  app.add_option("--ledger", o.ledger_path, "ledger to append to (default: results/ledger_cpu.jsonl)")
      ->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "write no ledger rows");
  if (const auto status = parse_command_line(app, argc, argv, "fashion_study")) return *status;
  o.layout = parse_memory_format(layout);
  try {
    return run_fashion_study(o);
  } catch (const Error& e) {
    std::cerr << "fashion_study: error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "fashion_study: error: " << e.what() << "\n";
    return 2;
  }
}
