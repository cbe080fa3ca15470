// The residual network (models/resnet/): He et al.'s size, its keys and inputs refused in one line,
// its parameter groups and state (batch norm's buffers), fused against composed, recomputation,
// eval mode, and a run checkpointed and resumed with dropout, bit for bit.
#include <catch2/catch.hpp>

#include "engine/train/checkpoint.h"
#include "engine/train/resume.h"
#include "engine/train/trainer.h"
#include "models/resnet/resnet.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

std::shared_ptr<ResNet> small_resnet(Backend& backend, const ModelOptions& options = {{"width", "4"}, {"depth", "1"}},
                                     const ModelInput& input = {{3, 8, 8}, 5}) {
  Generator gen(3);
  const InitOptions init{&gen, DType::f32, &backend};
  return std::dynamic_pointer_cast<ResNet>(build_model(find_model("resnet"), init, input, options));
}

TrainConfig resnet_config() {
  TrainConfig c;
  c.model.name = "resnet";
  c.model.options = {{"width", "4"}, {"depth", "1"}, {"dropout", "0.2"}};
  c.steps = 10;
  c.batch = 16;
  c.optimizer.lr = 0.05;
  c.optimizer.weight_decay = 5e-4;
  c.data.train_samples = 160;
  c.data.eval_samples = 100;
  c.reporting.log_every = 100;
  c.execution.backend = "reference";
  return c;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

// Loss and every gradient of `model` on a fixed batch.
std::pair<double, std::vector<std::vector<double>>> loss_and_grads(Module& model, const Tensor& x, const Tensor& y) {
  model.zero_grad(true);
  const Tensor loss = cross_entropy(model.forward(x), y);
  loss.backward();
  std::vector<std::vector<double>> grads;
  for (const auto& [name, p] : model.named_parameters()) grads.push_back(values(p.grad()));
  return {loss.item(), grads};
}

}  // namespace

TEST_CASE("resnet: ResNet-20 has He et al.'s 0.27M parameters; every depth and width builds", "[models]") {
  CHECK(model_parameter_count(find_model("resnet")) == 269722);
  CHECK(model_parameter_count(find_model("resnet"), {{"depth", "9"}}) == 853018);  // ResNet-56: 0.85M
  CHECK(model_parameter_count(find_model("resnet"), {{"shortcut", "conv"}}) > 269722);
  const auto net = small_resnet(ref());
  // 6n + 2 layers: the stem, 2 per block, the head.
  CHECK(net->blocks.size() == 3);
  CHECK(net->flop_per_sample(true) > 0);
  CHECK(net->flop_per_sample(false) > 2 * net->flop_per_sample(true));
}

TEST_CASE("resnet: a bad key, value or input is one line naming it", "[models]") {
  const ModelDef& def = find_model("resnet");
  Generator gen(0);
  const InitOptions init{&gen, DType::f32, &ref()};
  const ModelInput cifar{{3, 32, 32}, 10};
  auto built = [&](const ModelOptions& o, const ModelInput& in) {
    return error_of([&] { build_model(def, init, in, o); });
  };
  CHECK(built({{"depth", "0"}}, cifar).find("invalid value '0' for model key depth (allowed: 1..18)") !=
        std::string::npos);
  CHECK(built({{"width", "300"}}, cifar).find("model key width (allowed: 1..256)") != std::string::npos);
  CHECK(built({{"shortcut", "B"}}, cifar).find("'B' for model key shortcut (allowed: pad | conv)") !=
        std::string::npos);
  CHECK(built({{"dropout", "1.5"}}, cifar).find("'1.5' for model key dropout (allowed: a number in 0..0.9)") !=
        std::string::npos);
  CHECK(built({{"heads", "4"}}, cifar).find("model 'resnet' has no key 'heads'") != std::string::npos);
  CHECK(built({}, {{1, 3, 3}, 10}).find("height and width 4..4096") != std::string::npos);
  CHECK(built({}, {{784}, 10}).find("ResNet takes images [C, H, W]") != std::string::npos);
  const auto net = small_resnet(ref());
  CHECK(error_of([&] {
          (void)net->forward(Tensor::zeros({2, 1, 8, 8}, DType::f32, ref()));
        }).find("ResNet: input must be [N, 3, H >= 4, W >= 4], got [2, 1, 8, 8]") != std::string::npos);
}

TEST_CASE("resnet: state is torchvision's names with batch norm's buffers; no decay on norms and biases", "[models]") {
  const auto net = small_resnet(ref(), {{"width", "4"}, {"depth", "1"}, {"shortcut", "conv"}});
  const NamedTensors state = net->state_dict();
  std::vector<std::string> names;
  for (const auto& [name, t] : state) names.push_back(name);
  const std::vector<std::string> head(names.begin(), names.begin() + 5);
  CHECK(head ==
        std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"});
  CHECK(std::count(names.begin(), names.end(), "layer2.0.downsample.0.weight") == 1);
  CHECK(std::count(names.begin(), names.end(), "layer3.0.downsample.1.running_var") == 1);
  CHECK(names.back() == "fc.bias");
  CHECK(net->named_buffers().size() == 2 * 9);  // 7 batch norms in blocks and stem, 2 in the downsamples
  CHECK(net->decays("conv1.weight"));
  CHECK(net->decays("fc.weight"));
  CHECK_FALSE(net->decays("bn1.weight"));
  CHECK_FALSE(net->decays("layer1.0.bn2.bias"));
  CHECK_FALSE(net->decays("fc.bias"));
  // A checkpoint holds the buffers: loading one without them is refused, naming the first missing.
  NamedTensors params = net->named_parameters();
  CHECK(error_of([&] { net->load_state_dict(params); }).find("missing tensor 'bn1.running_mean'") != std::string::npos);
  CHECK_NOTHROW(net->load_state_dict(state));
}

TEST_CASE("resnet: fused equals composed, recomputation equals keeping, on every CPU backend", "[models]") {
  Generator gen(7);
  const Tensor x0 = random_tensor({4, 3, 8, 8}, gen, DType::f32);
  const Tensor y0 = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 4, 2}, {4}, ref());
  for (const auto& name : cpu_backends()) {
    Backend& backend = get_backend(name);
    for (bool nhwc : {false, true}) {
      INFO(name << (nhwc ? " nhwc" : " nchw"));
      Tensor x = x0.to(backend);
      if (nhwc) x = x.contiguous(MemoryFormat::channels_last);
      const Tensor y = y0.to(backend);
      auto composed = small_resnet(backend), fused = small_resnet(backend), recomputed = small_resnet(backend);
      fused->set_fused(true);
      recomputed->set_recompute(Recompute::all);
      const auto [l0, g0] = loss_and_grads(*composed, x, y);
      const auto [l1, g1] = loss_and_grads(*fused, x, y);
      const auto [l2, g2] = loss_and_grads(*recomputed, x, y);
      CHECK(l1 == Approx(l0).epsilon(1e-5));
      CHECK(l2 == l0);  // the same ops again: the same bits
      for (std::size_t i = 0; i < g0.size(); ++i) {
        INFO("parameter " << i);
        CHECK(max_abs_diff(g1[i], g0[i]) <= 1e-4 * (1 + max_abs(g0[i])));
        CHECK(g2[i] == g0[i]);
      }
      // Recomputation ran each block's forward twice; its running statistics moved once.
      CHECK(values(recomputed->bn1->running_mean) == values(composed->bn1->running_mean));
      CHECK(values(recomputed->blocks[2]->bn2->running_var) == values(composed->blocks[2]->bn2->running_var));
    }
  }
}

TEST_CASE("resnet: eval mode reads the running statistics and moves nothing", "[models]") {
  auto net = small_resnet(ref());
  Generator gen(8);
  const Tensor x = random_tensor({4, 3, 8, 8}, gen, DType::f32);
  const Tensor train_out = net->forward(x);
  const auto moved = values(net->bn1->running_mean);
  CHECK(moved != std::vector<double>(4, 0.0));  // training moved them
  net->eval();
  NoGradGuard no_grad;
  const Tensor eval_out = net->forward(x);
  CHECK(values(net->bn1->running_mean) == moved);
  CHECK(max_abs_diff(values(eval_out), values(train_out)) > 1e-3);  // other statistics, other outputs
  CHECK(values(net->forward(x)) == values(eval_out));               // and deterministic
}

TEST_CASE("resnet: trains, checkpoints and resumes with dropout and parameter groups, bit for bit", "[models]") {
  const TrainConfig config = resnet_config();
  Trainer straight(config, model_task(config));
  const TrainResult full = straight.train(nullptr);
  REQUIRE(full.losses.size() == 10);
  CHECK(std::isfinite(full.losses.back()));
  TempDir dir("resnet-resume");
  TrainConfig first = config;
  first.stop_at = 5;
  first.checkpoint.save = dir / "ckpt";
  Trainer(first, model_task(first)).train(nullptr);
  const Checkpoint saved = load_checkpoint(dir / "ckpt", ref());
  CHECK(saved.trainer.strings.at("model") == "ResNet");
  CHECK(saved.trainer.integers.at("dropout_offset") > 0);  // dropout drew from its stream
  CHECK_NOTHROW(validate_checkpoint(saved, dir / "ckpt"));
  TrainConfig resume = config;
  resume.checkpoint.resume = dir / "ckpt";
  Trainer resumed(resume, model_task(resume));
  const TrainResult rest = resumed.train(nullptr);
  CHECK(rest.losses == std::vector<double>(full.losses.begin() + 5, full.losses.end()));
  const NamedTensors a = straight.model().state_dict(), b = resumed.model().state_dict();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(values(a[i].second) == values(b[i].second));
  }
  // Another depth's checkpoint is refused, naming a tensor that does not fit.
  TrainConfig deeper = resume;
  deeper.model.options["depth"] = "2";
  CHECK(error_of([&] { Trainer t(deeper, model_task(deeper)); }).find("layer") != std::string::npos);
}

TEST_CASE("resnet: eval with batch norm folded into the convolutions equals eval without", "[models]") {
  Generator gen(9);
  const Tensor x0 = random_tensor({4, 3, 8, 8}, gen, DType::f32);
  for (const auto& name : cpu_backends()) {
    Backend& backend = get_backend(name);
    const ModelOptions plain{{"width", "8"}, {"depth", "1"}, {"shortcut", "conv"}};
    ModelOptions folding = plain;
    folding["fold"] = "1";
    auto a = small_resnet(backend, plain), b = small_resnet(backend, folding);
    // Training moves the running statistics away from 0 and 1 (the same on both: same weights, same batch).
    const Tensor x = x0.to(backend).contiguous(MemoryFormat::channels_last);
    (void)a->forward(x);
    (void)b->forward(x);
    a->eval();
    b->eval();
    a->set_fused(true);
    b->set_fused(true);
    NoGradGuard no_grad;
    INFO(name);
    const auto want = values(a->forward(x)), got = values(b->forward(x));
    CHECK(max_abs_diff(got, want) <= 1e-4 * (1 + max_abs(want)));
  }
}
