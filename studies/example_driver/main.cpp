// An example study driver linked against the trainlab library the way a user's own code would:
// it builds SmallCNN, trains it through the Trainer API, and then does its own measurement with
// the tensor API (the mean gradient-ready hook latency of each layer is the kind of thing a
// study would time; here it just counts hook calls per parameter).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "engine/autograd.h"
#include "engine/trainer.h"

int main(int argc, char** argv) {
  trainlab::TrainConfig config;
  config.steps = 20;
  config.batch = 16;
  config.train_samples = 512;
  config.eval_samples = 200;
  config.eval_batch = 100;
  config.log_every = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) config.steps = std::atoll(argv[i + 1]);
  }
  try {
    trainlab::Trainer trainer(config);
    std::map<std::string, int> hook_calls;
    for (auto& [name, param] : trainer.model().named_parameters()) {
      trainlab::Tensor p = param;
      const std::string key = name;
      p.add_grad_ready_hook([&hook_calls, key](const trainlab::Tensor&) { ++hook_calls[key]; });
    }
    const trainlab::TrainResult result = trainer.train(nullptr);
    std::printf("example_driver: %lld steps, final loss %.4f, held-out accuracy %.1f%%, %.1f samples/s\n",
                static_cast<long long>(result.last_step), result.losses.back(), 100 * result.final_eval.accuracy,
                result.samples_per_s);
    for (const auto& [name, calls] : hook_calls) {
      if (calls != static_cast<int>(result.losses.size())) {
        std::fprintf(stderr, "example_driver: hook for %s fired %d times in %zu steps\n", name.c_str(), calls,
                     result.losses.size());
        return 1;
      }
    }
    std::printf("example_driver: every gradient-ready hook fired once per step\n");
  } catch (const trainlab::Error& e) {
    std::fprintf(stderr, "example_driver: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
