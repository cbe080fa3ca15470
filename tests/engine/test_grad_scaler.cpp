// The f16 loss scaler (PyTorch GradScaler semantics) and f16 training under it. They run on the
// reference backend, or on TRAINLAB_DEVICE_TEST_BACKEND (the GPU tests run them on cuda: its fused
// unscale + inf/NaN check, overflow and skip).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "engine/optim/grad_scaler.h"
#include "engine/train/trainer.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

std::string scaler_backend() {
  const char* chosen = std::getenv("TRAINLAB_DEVICE_TEST_BACKEND");
  return chosen != nullptr && *chosen != '\0' ? chosen : "reference";
}

struct Fixture {
  Backend& backend = get_backend(scaler_backend());
  Tensor w = Tensor::from_vector(std::vector<float>{1.f, 2.f, 3.f}, {3}, backend).set_requires_grad(true);
  SGD sgd{{{"w", w}}, SgdOptions{0.5, 0.0, 0.0, 0.0, false}};
  // loss = sum(w * c): the gradient is c.
  void backward(GradScaler& scaler, const std::vector<float>& c) {
    scaler.scale(sum(mul(w, Tensor::from_vector(c, {3}, backend)))).backward();
  }
};

}  // namespace

TEST_CASE("GradScaler: scales the loss, unscales the gradients, steps", "[optim][scaler]") {
  Fixture f;
  GradScaler scaler(GradScalerOptions{1024.0, 2.0, 0.5, 3});
  f.backward(scaler, {1.f, -2.f, 0.5f});
  CHECK(f.w.grad().to_vector<float>() == std::vector<float>{1024.f, -2048.f, 512.f});  // scaled
  CHECK(scaler.step(f.sgd));
  CHECK(f.w.grad().to_vector<float>() == std::vector<float>{1.f, -2.f, 0.5f});  // unscaled before the step
  CHECK(f.w.to_vector<float>() == std::vector<float>{0.5f, 3.f, 2.75f});
  CHECK(scaler.scale_value() == 1024.0);
  CHECK(scaler.skipped_steps() == 0);
}

TEST_CASE("GradScaler: an overflow skips the step and halves the scale; good steps grow it", "[optim][scaler]") {
  Fixture f;
  GradScaler scaler(GradScalerOptions{1024.0, 2.0, 0.5, 3});
  const auto before = f.w.to_vector<float>();
  f.backward(scaler, {1.f, std::numeric_limits<float>::infinity(), 0.f});
  CHECK_FALSE(scaler.step(f.sgd));
  CHECK(f.w.to_vector<float>() == before);  // skipped: the parameters did not move
  CHECK(scaler.scale_value() == 512.0);
  CHECK(scaler.skipped_steps() == 1);
  f.sgd.zero_grad();
  f.backward(scaler, {0.f, std::nanf(""), 0.f});  // NaN counts as an overflow too
  CHECK_FALSE(scaler.step(f.sgd));
  CHECK(scaler.scale_value() == 256.0);
  // Three good steps in a row (the growth interval here) double the scale.
  for (int i = 0; i < 3; ++i) {
    f.sgd.zero_grad();
    f.backward(scaler, {1.f, 1.f, 1.f});
    CHECK(scaler.step(f.sgd));
  }
  CHECK(scaler.scale_value() == 512.0);
  CHECK(scaler.good_steps_in_a_row() == 0);
  CHECK(scaler.skipped_steps() == 2);
  // The state round-trips.
  GradScaler restored;
  restored.load_state_dict(scaler.state_dict());
  CHECK(restored.scale_value() == 512.0);
  CHECK(restored.skipped_steps() == 2);
}

TEST_CASE("GradScaler: bad options are refused, naming them", "[optim]") {
  REQUIRE_THROWS_CONTAINING(GradScaler(GradScalerOptions{0.0, 2.0, 0.5, 1}), "init_scale");
  REQUIRE_THROWS_CONTAINING(GradScaler(GradScalerOptions{1.0, 1.0, 0.5, 1}), "growth_factor");
  REQUIRE_THROWS_CONTAINING(GradScaler(GradScalerOptions{1.0, 2.0, 1.5, 1}), "backoff_factor");
}

TEST_CASE("f16 training with loss scaling: an absurd start scale overflows, is skipped and backs off",
          "[training][scaler]") {
  TrainConfig c;
  c.execution.backend = scaler_backend();
  c.execution.dtype = DType::f16;
  c.steps = 30;
  c.batch = 16;
  c.data.train_samples = 256;
  c.data.eval_samples = 40;
  c.data.eval_batch = 40;
  c.reporting.log_every = 1000;
  c.execution.threads = 1;
  c.optimizer.lr = 0.02;
  c.execution.loss_scale_init = 16777216.0;  // 2^24: the f16 gradients overflow (above 65504) at once
  Trainer trainer(c);
  const TrainResult r = trainer.train(nullptr);
  INFO("skipped " << r.skipped_steps << ", final scale " << r.loss_scale);
  CHECK(r.skipped_steps >= 3);       // halved step by step until the gradients fit f16
  CHECK(r.skipped_steps < c.steps);  // and then training proceeds
  CHECK(r.loss_scale < 16777216.0);
  CHECK(r.losses.back() < r.losses.front());  // it learns once the scale fits
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    CHECK(p.dtype() == DType::f32);  // f32 master weights
    for (float v : p.to_vector<float>()) REQUIRE(std::isfinite(v));
  }
}
