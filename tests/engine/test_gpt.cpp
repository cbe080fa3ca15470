// The GPT module (models/gpt/): nanoGPT's names and size, a bad configuration refused in one line,
// causality (no position sees a later token), its gradients against central finite differences in
// f64, its parameter groups, the same model on every CPU backend, and bf16 autocast near f32.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/autocast.h"
#include "engine/train/trainer.h"
#include "models/gpt/gpt.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

GPTConfig tiny() {
  GPTConfig c;
  c.vocab = 7;
  c.block_size = 5;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

Tensor tokens(const std::vector<std::int64_t>& ids, const Shape& shape, Backend& backend) {
  return Tensor::from_vector(ids, shape, backend);
}

}  // namespace

TEST_CASE("gpt: nanoGPT's names and parameter count", "[models]") {
  Generator gen(1);
  GPTConfig c;
  c.vocab = 65;  // nanoGPT's shakespeare_char
  const GPT model(c, InitOptions{&gen});
  // Per layer 12 C^2 + 13 C (c_attn, c_proj, c_fc, c_proj with biases; two layer norms), the two
  // embeddings and the final norm: 809,856 for vocab 65, context 64, 4 x 128.
  const std::int64_t C = 128;
  CHECK(model.num_parameters() == 65 * C + 64 * C + 4 * (12 * C * C + 13 * C) + 2 * C);
  std::vector<std::string> names;
  for (const auto& [name, t] : model.named_parameters()) names.push_back(name);
  REQUIRE(names.size() == 2 + 4 * 12 + 2);
  CHECK(names[0] == "transformer.wte.weight");
  CHECK(names[1] == "transformer.wpe.weight");
  CHECK(names[2] == "transformer.h.0.ln_1.weight");
  CHECK(names[4] == "transformer.h.0.attn.c_attn.weight");
  CHECK(names[7] == "transformer.h.0.attn.c_proj.bias");
  CHECK(names[10] == "transformer.h.0.mlp.c_fc.weight");
  CHECK(names.back() == "transformer.ln_f.bias");
  // Parameter groups: the linear layers' weights decay; embeddings, norms and biases do not.
  CHECK(model.decays("transformer.h.3.mlp.c_proj.weight"));
  CHECK_FALSE(model.decays("transformer.h.3.mlp.c_proj.bias"));
  CHECK_FALSE(model.decays("transformer.wte.weight"));
  CHECK_FALSE(model.decays("transformer.h.0.ln_1.weight"));
}

TEST_CASE("gpt: a bad configuration or input is one line naming it", "[models]") {
  Generator gen(2);
  GPTConfig c = tiny();
  c.n_embd = 10;
  c.n_head = 4;
  CHECK(error_of([&] { GPT(c, InitOptions{&gen}); }) ==
        "gpt: n_embd 10 is not divisible by n_head 4 (each head gets n_embd / n_head channels)");
  c = tiny();
  c.dropout = 1.0;
  CHECK_THAT(error_of([&] { GPT(c, InitOptions{&gen}); }), Catch::Contains("dropout must be in [0, 1)"));
  GPT model(tiny(), InitOptions{&gen});
  Backend& be = default_backend();
  CHECK_THAT(error_of([&] {
               model.forward(tokens({1, 2, 3, 4, 5, 6}, {1, 6}, be));
             }),
             Catch::Contains("a window of 6 tokens does not fit block_size 5"));
  CHECK_THAT(error_of([&] {
               model.forward(tokens({1, 9}, {1, 2}, be));
             }),
             Catch::Contains("index 9 at position 1 is outside [0, 7)"));
  CHECK_THAT(error_of([&] {
               model.forward(Tensor::zeros({1, 2}, DType::f32, be));
             }),
             Catch::Contains("token indices [batch, time] in i64"));
}

TEST_CASE("gpt: no position sees a later token", "[models]") {
  Generator gen(3);
  GPT model(tiny(), InitOptions{&gen});
  model.eval();
  NoGradGuard no_grad;
  Backend& be = default_backend();
  const auto a = values(model.forward(tokens({1, 2, 3, 4, 5, 6, 0, 1, 2, 3}, {2, 5}, be)));
  // The last two tokens of each row changed: the first three positions' logits are the same bits.
  const auto b = values(model.forward(tokens({1, 2, 3, 0, 0, 6, 0, 1, 6, 6}, {2, 5}, be)));
  const std::size_t vocab = 7;
  for (std::size_t row = 0; row < 2; ++row)
    for (std::size_t p = 0; p < 5; ++p)
      for (std::size_t v = 0; v < vocab; ++v) {
        const std::size_t i = (row * 5 + p) * vocab + v;
        if (p < 3) {
          CHECK(a[i] == b[i]);
        }
      }
  CHECK(a != b);
}

TEST_CASE("gpt: every gradient against central finite differences in f64", "[models][gradcheck]") {
  Generator gen(4);
  Backend& be = ref();  // f64 runs on the reference backend
  GPT model(tiny(), InitOptions{&gen, DType::f64, &be});
  const Tensor x = tokens({1, 2, 3, 4, 5, 6, 0, 1, 2, 3}, {2, 5}, be);
  const Tensor y = tokens({2, 3, 4, 5, 6, 0, 1, 2, 3, 4}, {10}, be);
  auto loss = [&] { return cross_entropy(model.forward(x), y); };
  model.zero_grad(true);
  loss().backward();
  Generator pick(5);
  int checked = 0, failures = 0;
  for (auto& [name, p] : model.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    const auto grad = values(p.grad());
    double* data = p.data<double>();
    for (int s = 0; s < 4; ++s) {
      const auto i = static_cast<std::int64_t>(pick.below(static_cast<std::uint64_t>(p.numel())));
      const double saved = data[i], eps = 1e-6;
      double plus, minus;
      {
        NoGradGuard no_grad;
        data[i] = saved + eps;
        plus = loss().item();
        data[i] = saved - eps;
        minus = loss().item();
        data[i] = saved;
      }
      const double numeric = (plus - minus) / (2 * eps), analytic = grad[static_cast<std::size_t>(i)];
      INFO("element " << i << ": analytic " << analytic << ", numeric " << numeric);
      const bool ok = std::abs(analytic - numeric) <= 1e-6 + 1e-4 * std::abs(numeric);
      CHECK(ok);
      failures += ok ? 0 : 1;
      ++checked;
    }
  }
  CHECK(checked == 4 * 28);
  CHECK(failures == 0);
}

TEST_CASE("gpt: the same logits and gradients on every CPU backend; bf16 autocast near f32", "[models]") {
  const std::vector<std::int64_t> ids = {1, 2, 3, 4, 5, 6, 0, 1, 2, 3};
  const std::vector<std::int64_t> next = {2, 3, 4, 5, 6, 0, 1, 2, 3, 4};
  auto run = [&](Backend& be, DType autocast) {
    Generator gen(6);
    GPT model(tiny(), InitOptions{&gen, DType::f32, &be});
    Tensor loss;
    {
      AutocastGuard guard(autocast);
      loss = cross_entropy(model.forward(tokens(ids, {2, 5}, be)), tokens(next, {10}, be));
    }
    loss.backward();
    return std::make_pair(loss.item(), values(model.wte->weight.grad()));
  };
  const auto [ref_loss, ref_grad] = run(get_backend("reference"), DType::f32);
  CHECK(std::abs(ref_loss - std::log(7.0)) < 0.05);  // GPT-2's small init: near-uniform predictions
  for (const auto& name : cpu_backends()) {
    INFO(name);
    Backend& be = get_backend(name);
    const auto [loss, grad] = run(be, DType::f32);
    CHECK(loss == Approx(ref_loss).epsilon(1e-5));
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < grad.size(); ++i) {
      diff += (grad[i] - ref_grad[i]) * (grad[i] - ref_grad[i]);
      norm += ref_grad[i] * ref_grad[i];
    }
    CHECK(std::sqrt(diff / norm) < 1e-4);
    const auto [low_loss, low_grad] = run(be, DType::bf16);
    CHECK(low_loss == Approx(ref_loss).epsilon(1e-2));
  }
}

TEST_CASE("gpt: fused attention (--fuse) equals the composed form, on every CPU backend", "[models]") {
  const std::vector<std::int64_t> ids = {1, 2, 3, 4, 5, 6, 0, 1, 2, 3};
  const std::vector<std::int64_t> next = {2, 3, 4, 5, 6, 0, 1, 2, 3, 4};
  for (const auto& name : cpu_backends()) {
    INFO(name);
    Backend& be = get_backend(name);
    auto run = [&](bool fused) {
      Generator gen(7);
      GPT model(tiny(), InitOptions{&gen, DType::f32, &be});
      model.set_fused(fused);
      const Tensor loss = cross_entropy(model.forward(tokens(ids, {2, 5}, be)), tokens(next, {10}, be));
      loss.backward();
      return std::make_pair(loss.item(), values(model.blocks[0]->attn->c_attn->weight.grad()));
    };
    const auto [fused_loss, fused_grad] = run(true);
    const auto [loss, grad] = run(false);
    CHECK(fused_loss == Approx(loss).epsilon(1e-6));
    REQUIRE(fused_grad.size() == grad.size());
    for (std::size_t i = 0; i < grad.size(); ++i) CHECK(fused_grad[i] == Approx(grad[i]).margin(1e-6));
  }
}

namespace {

TrainConfig small_gpt_run() {
  TrainConfig c;
  c.model.name = "gpt";
  c.model.options = {{"block_size", "16"}, {"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "2"}};
  c.batch = 8;
  c.data.train_samples = 256;
  c.data.eval_samples = 32;
  c.reporting.log_every = 1000;
  c.reporting.warmup = 1;
  return c;
}

std::vector<std::vector<float>> parameter_values(Module& model) {
  std::vector<std::vector<float>> values;
  for (const auto& [name, p] : model.named_parameters()) values.push_back(p.to(DType::f32).to_vector<float>());
  return values;
}

double distance(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double squares = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) squares += std::pow(double{a[i][j]} - double{b[i][j]}, 2);
  return std::sqrt(squares);
}

}  // namespace

TEST_CASE("gpt: registered; trains on SyntheticTokens with AdamW, warm-up and cosine toward the chain's entropy",
          "[models][training]") {
  const ModelDef& def = find_model("gpt");
  CHECK(def.context != nullptr);
  CHECK(model_parameter_count(def) == 809856);  // nanoGPT's 4x4x128 at a vocabulary of 65 (0.81M)
  TrainConfig c = small_gpt_run();
  c.steps = 120;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = 1e-2;
  c.optimizer.beta2 = 0.99;
  c.optimizer.weight_decay = 0.1;
  c.optimizer.grad_clip = 1.0;
  c.optimizer.schedule = ScheduleKind::warmup_cosine;
  c.optimizer.warmup_steps = 10;
  c.optimizer.min_lr = 1e-3;
  Trainer trainer(c);
  const TrainResult result = trainer.train(nullptr);
  INFO("first loss " << result.losses.front() << ", held-out loss " << result.final_eval.loss);
  CHECK(result.losses.front() == Approx(std::log(65.0)).margin(0.3));  // uniform over the vocabulary at init
  // Most of the way from log(65) = 4.17 to the chain's entropy, 1.11 nats.
  CHECK(result.final_eval.loss < 1.7);  // 1.46 when written
  CHECK(result.final_eval.accuracy > 0.45);
  CHECK(result.final_eval.samples == 32);
}

TEST_CASE("gpt: gradient clipping scales the global norm to grad_clip, and only above it", "[models][training]") {
  // SGD without momentum or decay at lr 1: the update is the (clipped) gradient itself.
  TrainConfig c = small_gpt_run();
  c.steps = 1;
  c.optimizer.lr = 1.0;
  c.optimizer.momentum = 0;
  c.reporting.eval_at_end = false;
  for (const double clip : {0.05, 1e6}) {
    c.optimizer.grad_clip = clip;
    Trainer trainer(c);
    const auto before = parameter_values(trainer.model());
    double norm = -1;
    TrainCallbacks callbacks;
    callbacks.on_step = [&](const StepReport& r) { norm = r.grad_norm; };
    trainer.set_callbacks(callbacks);
    trainer.train(nullptr);
    const double moved = distance(before, parameter_values(trainer.model()));
    INFO("clip " << clip << ": gradient norm " << norm << ", the update's norm " << moved);
    CHECK(norm > 0.05);
    // Clipped: norm max_norm / (norm + 1e-6) x the gradient; above the norm, the gradient as it is.
    CHECK(moved == Approx(clip < norm ? clip * norm / (norm + 1e-6) : norm).epsilon(1e-4));
  }
}

TEST_CASE("gpt: recomputed blocks give the same loss and gradients, dropout included, and keep less", "[models]") {
  for (const bool fused : {false, true}) {
    TrainConfig c = small_gpt_run();
    c.model.options["dropout"] = "0.1";  // its draws must replay in the recomputed forward
    c.steps = 2;
    c.execution.fuse = fused;
    c.reporting.eval_at_end = false;
    std::vector<std::vector<float>> after[2];
    double activations[2] = {0, 0};
    for (int r = 0; r < 2; ++r) {
      c.execution.recompute = r == 0 ? Recompute::none : Recompute::convs;
      Trainer trainer(c);
      const TrainResult result = trainer.train(nullptr);
      after[r] = parameter_values(trainer.model());
      activations[r] = static_cast<double>(result.memory.activations_after_forward);
    }
    INFO((fused ? "fused" : "composed") << ": activations held after forward " << activations[0] << ", recomputed "
                                        << activations[1] << " bytes");
    CHECK(after[0] == after[1]);  // the same bits after two steps
    CHECK(activations[1] < 0.6 * activations[0]);
  }
}
