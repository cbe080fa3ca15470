// A custom measurement around the training step, through the trainer's callbacks and the tensor
// API only: when does each parameter's gradient become final during backward? That is what
// data-parallel training can overlap: a gradient all-reduce can start once its bucket's last
// gradient is ready, while the rest of backward runs (PyTorch DDP's buckets, seed 001's overlap).
//
// Each parameter gets a gradient-ready hook that notes the time; the profiler's "backward" span
// says when the step's backward began and ended; the on_step callback turns one step's times into
// fractions of its backward and keeps them (measured steps only, warm-up excluded). The table is
// the median over steps, in the order the gradients became ready.
//
//   build/bin/gradient_timeline [--steps 30] [--batch 32] [--backend NAME] [--dtype f32|bf16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "engine/instrument/profiler.h"
#include "engine/train/trainer.h"

using namespace trainlab;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    TrainConfig config;  // SmallCNN on SyntheticImages, as `trainlab train` runs it
    config.steps = 30;
    config.reporting.warmup = 5;
    config.data.train_samples = 4096;
    config.reporting.eval_at_end = false;
    config.reporting.log_every = 1 << 30;
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help") {
        std::printf("usage: gradient_timeline [--steps 30] [--batch 32] [--backend NAME] [--dtype f32|bf16]\n");
        return 0;
      }
      if (i + 1 >= argc) throw Error("gradient_timeline: " + flag + " needs a value");
      const std::string value = argv[++i];
      // The trainer's own table parses and checks each value (and names it when it is wrong).
      if (flag == "--steps" || flag == "--batch" || flag == "--backend" || flag == "--dtype") {
        apply_config_value(config, flag.substr(2), value, flag);
      } else {
        throw Error("gradient_timeline: unknown flag '" + flag + "' (allowed: --steps, --batch, --backend, --dtype)");
      }
    }
    TL_CHECK(config.steps > config.reporting.warmup, "gradient_timeline: --steps must exceed the " +
                                                         std::to_string(config.reporting.warmup) + " warm-up steps");

    Trainer trainer(config);
    // Hooks: when each gradient is final, in this step.
    const NamedTensors params = trainer.model().named_parameters();
    std::map<std::string, std::int64_t> ready_ns;
    for (const auto& [name, param] : params) {
      Tensor p = param;
      const std::string key = name;
      p.add_grad_ready_hook([&ready_ns, key](const Tensor&) { ready_ns[key] = Profiler::now_ns(); });
    }
    // The profiler's spans give the backward phase's start and end.
    Profiler& profiler = Profiler::instance();
    profiler.clear();
    profiler.set_enabled(true);
    std::map<std::string, std::vector<double>> fraction, after_ms;
    std::vector<double> backward_ms;
    TrainCallbacks callbacks;
    callbacks.on_step = [&](const StepReport& step) {
      std::int64_t begin = 0, end = 0;
      for (const ProfileSpan& span : profiler.take()) {
        if (span.name == "backward") begin = span.start_ns, end = span.end_ns;
      }
      if (step.measured && end > begin) {
        backward_ms.push_back(1e-6 * static_cast<double>(end - begin));
        for (const auto& [name, t] : ready_ns) {
          fraction[name].push_back(static_cast<double>(t - begin) / static_cast<double>(end - begin));
          after_ms[name].push_back(1e-6 * static_cast<double>(t - begin));
        }
      }
      ready_ns.clear();
    };
    trainer.set_callbacks(callbacks);
    const TrainResult result = trainer.train(nullptr);
    profiler.set_enabled(false);

    struct Row {
      std::string name;
      double bytes, at_ms, at_fraction;
    };
    std::vector<Row> rows;
    double total_bytes = 0;
    for (const auto& [name, param] : params) {
      TL_CHECK(fraction.count(name) && !fraction[name].empty(),
               "gradient_timeline: no gradient-ready time for " + name);
      const double bytes = static_cast<double>(param.nbytes());
      rows.push_back({name, bytes, median(after_ms[name]), median(fraction[name])});
      total_bytes += bytes;
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.at_ms < b.at_ms; });
    std::printf("gradient_timeline: %s, %lld parameters (%.2f MiB of gradients), backend %s, dtype %s, batch %lld\n",
                trainer.task().model_name.c_str(), static_cast<long long>(trainer.model().num_parameters()),
                total_bytes / (1 << 20), trainer.backend().name().c_str(), dtype_name(config.execution.dtype),
                static_cast<long long>(config.batch));
    std::printf("backward: %.2f ms median over %zu measured steps (%lld warm-up steps excluded)\n\n",
                median(backward_ms), backward_ms.size(), static_cast<long long>(result.warmup_steps));
    std::printf("| gradient | bytes | ready after (ms) | at %% of backward | gradient bytes ready by then |\n");
    std::printf("|---|---|---|---|---|\n");
    double cumulative = 0, half_way_bytes = 0;
    for (const Row& r : rows) {
      cumulative += r.bytes;
      if (r.at_fraction <= 0.5) half_way_bytes = cumulative;
      std::printf("| %s | %.0f | %.3f | %.1f%% | %.1f%% |\n", r.name.c_str(), r.bytes, r.at_ms, 100 * r.at_fraction,
                  100 * cumulative / total_bytes);
    }
    std::printf(
        "\n%.1f%% of the gradient bytes are final by the middle of backward: an all-reduce of those buckets can run "
        "while the other half of backward computes.\n",
        100 * half_way_bytes / total_bytes);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "gradient_timeline: error: %s\n", e.what());
    return 2;
  }
}
