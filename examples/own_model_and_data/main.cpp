// A study driver with a model and a data set of its own, through trainlab's public API only (the
// installed headers; nothing in the engine knows either of them):
//   - Spirals, a Dataset defined here: points in the plane on three interleaved spiral arms, the
//     arm is the label (2 features, 3 classes), with noise; the held-out split is drawn apart;
//   - ResidualMLP, a Module built from the engine's layers: Linear(2, 64), ReLU, two residual blocks
//     h + Linear(ReLU(Linear(h))), then Linear(64, 3).
// The engine's Trainer trains it (the same step, schedule, evaluation and logging as `trainlab
// train`) until held-out accuracy reaches the target on two consecutive evaluations, or the step
// cap; the table below is printed from the trainer's evaluation callback.
//
//   build/bin/own_model_and_data [--target 0.95] [--steps 3000] [--seed 0] [--backend NAME]
//
// Exit status 0 when the target was reached, 1 when the step cap came first, 2 on bad input.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numbers>
#include <string>

#include "engine/core/rng.h"
#include "engine/train/trainer.h"

using namespace trainlab;

namespace {

// Three spiral arms through 1.25 turns each, radius growing from 0.05 to 1; Gaussian noise of
// `noise` on both coordinates. Sample i is a pure function of (seed, split, i).
class Spirals final : public Dataset {
 public:
  static constexpr std::int64_t kArms = 3;
  Spirals(std::uint64_t seed, bool held_out, std::int64_t size, double noise = 0.04)
      : seed_(mix_seed(seed, held_out ? 2 : 1)), held_out_(held_out), size_(size), noise_(noise) {}
  std::int64_t size() const override { return size_; }
  Shape sample_shape() const override { return {2}; }
  std::int64_t num_classes() const override { return kArms; }
  std::string describe() const override {
    return std::string("Spirals(") + (held_out_ ? "held_out" : "train") + ", " + std::to_string(size_) + " samples)";
  }
  std::int64_t get(std::int64_t index, float* out, double*) const override {
    Generator gen(mix_seed(seed_, static_cast<std::uint64_t>(index)));
    const auto arm = static_cast<std::int64_t>(gen.below(kArms));
    const double t = gen.uniform(0, 1);
    const double radius = 0.05 + 0.95 * t;
    const double angle = 2 * std::numbers::pi * (1.25 * t + static_cast<double>(arm) / kArms);
    out[0] = static_cast<float>(radius * std::cos(angle) + noise_ * gen.normal());
    out[1] = static_cast<float>(radius * std::sin(angle) + noise_ * gen.normal());
    return arm;
  }

 private:
  std::uint64_t seed_;
  bool held_out_;
  std::int64_t size_;
  double noise_;
};

// h -> relu(h + fc2(relu(fc1(h)))): the width stays, so the identity path needs no projection.
class ResidualBlock final : public Module {
 public:
  ResidualBlock(std::int64_t width, const InitOptions& init) {
    fc1 = register_module("fc1", std::make_shared<Linear>(width, width, init));
    fc2 = register_module("fc2", std::make_shared<Linear>(width, width, init));
  }
  Tensor forward(const Tensor& h) override { return relu(add(h, fc2->forward(relu(fc1->forward(h))))); }

 protected:
  // The relu and add its forward calls itself (the Linear children declare theirs), so that the
  // backend is asked about them before the first step.
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert({BackendOp::relu, BackendOp::elementwise}); }

 private:
  std::shared_ptr<Linear> fc1, fc2;
};

class ResidualMLP final : public Module {
 public:
  ResidualMLP(std::int64_t inputs, std::int64_t width, std::int64_t classes, const InitOptions& init) {
    stem = register_module("stem", std::make_shared<Linear>(inputs, width, init));
    block1 = register_module("block1", std::make_shared<ResidualBlock>(width, init));
    block2 = register_module("block2", std::make_shared<ResidualBlock>(width, init));
    head = register_module("head", std::make_shared<Linear>(width, classes, init));
  }
  Tensor forward(const Tensor& x) override {
    return head->forward(block2->forward(block1->forward(relu(stem->forward(x)))));
  }

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::relu); }

 private:
  std::shared_ptr<Linear> stem, head;
  std::shared_ptr<ResidualBlock> block1, block2;
};

double number_arg(const char* flag, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= lo && v <= hi)) {
    throw Error(std::string("own_model_and_data: ") + flag + " '" + text + "' is not a number in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    double target = 0.95;
    TrainConfig config;
    config.steps = 3000;  // the cap
    config.batch = 64;
    config.optimizer.lr = 0.05;
    config.optimizer.momentum = 0.9;
    config.reporting.eval_every = 50;
    config.data.eval_batch = 1000;
    config.reporting.log_every = 1 << 30;  // the evaluation table below is the progress output
    config.reporting.warmup = 5;
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help") {
        std::printf("usage: own_model_and_data [--target 0.95] [--steps 3000] [--seed 0] [--backend NAME]\n");
        return 0;
      }
      if (i + 1 >= argc) throw Error("own_model_and_data: " + flag + " needs a value");
      const char* value = argv[++i];
      if (flag == "--target") {
        target = number_arg("--target", value, 0.34, 1.0);
      } else if (flag == "--steps") {
        config.steps = static_cast<std::int64_t>(number_arg("--steps", value, 1, 1e7));
      } else if (flag == "--seed") {
        config.seed = static_cast<std::uint64_t>(number_arg("--seed", value, 0, 1e15));
      } else if (flag == "--backend") {
        config.execution.backend = value;
      } else {
        throw Error("own_model_and_data: unknown flag '" + flag + "' (allowed: --target, --steps, --seed, --backend)");
      }
    }

    TrainTask task;
    task.model_name = "ResidualMLP(2 -> 64 -> 3, two residual blocks)";
    task.make_model = [](const InitOptions& init) {
      return std::make_shared<ResidualMLP>(2, 64, Spirals::kArms, init);
    };
    task.train_data = std::make_shared<Spirals>(config.seed, false, 20000);
    task.held_out_data = std::make_shared<Spirals>(config.seed, true, 3000);

    Trainer trainer(config, task);
    double last_loss = 0;
    TrainCallbacks callbacks;
    callbacks.on_step = [&](const StepReport& step) { last_loss = step.loss; };
    callbacks.on_eval = [&](const EvalResult& eval) {
      std::printf("| %6lld | %8.4f | %6.2f%% |\n", static_cast<long long>(eval.step), last_loss, 100 * eval.accuracy);
      std::fflush(stdout);
    };
    callbacks.stop_rule = accuracy_at_least(target, 2);
    trainer.set_callbacks(callbacks);
    std::printf("own_model_and_data: %s on %s; %lld parameters, backend %s\n", task.model_name.c_str(),
                task.train_data->describe().c_str(), static_cast<long long>(trainer.model().num_parameters()),
                trainer.backend().name().c_str());
    std::printf("stop rule: %s, evaluated every %lld steps on %s; step cap %lld\n\n",
                callbacks.stop_rule.description.c_str(), static_cast<long long>(config.reporting.eval_every),
                task.held_out_data->describe().c_str(), static_cast<long long>(config.steps));
    std::printf("|   step | train loss | held-out accuracy |\n|---|---|---|\n");
    const TrainResult result = trainer.train(nullptr);
    std::printf("\nstopped by the %s at step %lld: held-out accuracy %.2f%% (target %.0f%%), %.0f samples/s\n",
                result.stopped_by.c_str(), static_cast<long long>(result.last_step), 100 * result.final_eval.accuracy,
                100 * target, result.samples_per_s);
    if (result.stopped_by != "stop rule") {
      std::printf("own_model_and_data: the target was not reached within %lld steps\n",
                  static_cast<long long>(config.steps));
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "own_model_and_data: error: %s\n", e.what());
    return 2;
  }
}
