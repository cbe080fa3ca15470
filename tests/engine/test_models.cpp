// The model registry (engine/nn/model_registry.h) and the registered models (models/): found by
// name, their keys checked, their input refused before any work, trained, checkpointed and
// resumed by name like SmallCNN.
#include <catch2/catch.hpp>

#include "engine/train/checkpoint.h"
#include "engine/train/resume.h"
#include "engine/train/trainer.h"
#include "models/mlp/mlp.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

TrainConfig mlp_config() {
  TrainConfig c;
  c.model.name = "mlp";
  c.model.options = {{"hidden", "32"}};
  c.steps = 12;
  c.batch = 16;
  c.optimizer.lr = 0.01;
  c.data.train_samples = 256;
  c.data.eval_samples = 200;
  c.reporting.log_every = 100;
  c.execution.backend = "reference";
  return c;
}

}  // namespace

TEST_CASE("models: the registry finds each model by name, SmallCNN first", "[models]") {
  const auto models = registered_models();
  REQUIRE(models.size() >= 2);
  CHECK(models[0]->name == "smallcnn");
  CHECK(&find_model("SmallCNN") == &find_model("smallcnn"));  // checkpoints name the title
  CHECK(find_model("mlp").title == "MLP");
  const std::string unknown = error_of([] { (void)find_model("resnet9000"); });
  CHECK(unknown.find("'resnet9000'") != std::string::npos);
  CHECK(unknown.find("smallcnn | mlp") != std::string::npos);
  CHECK(model_parameter_count(find_model("smallcnn")) == 1070794);
  CHECK(model_parameter_count(find_model("mlp"), {{"hidden", "8"}}) == 3072 * 8 + 8 + 8 * 10 + 10);
}

TEST_CASE("models: options are key=value, each key the model's own, each value in range", "[models]") {
  CHECK(parse_model_options("") == ModelOptions{});
  CHECK(parse_model_options("hidden=8,x=y") == ModelOptions{{"hidden", "8"}, {"x", "y"}});
  CHECK(model_options_text({{"b", "2"}, {"a", "1"}}) == "a=1,b=2");
  CHECK(error_of([] { parse_model_options("hidden"); }).find("'hidden' is not key=value") != std::string::npos);
  CHECK(error_of([] { parse_model_options("a=1,a=2"); }).find("'a' given twice") != std::string::npos);
  CHECK(error_of([] { parse_model_options("=3"); }).find("not key=value") != std::string::npos);
  CHECK(error_of([] {
          check_model_keys(find_model("smallcnn"), {{"depth", "3"}});
        }).find("model 'smallcnn' has no key 'depth' (its keys: none)") != std::string::npos);
  const ModelDef& mlp = find_model("mlp");
  CHECK(model_option_int(mlp, {}, "hidden", 1, 65536) == 128);
  CHECK(error_of([&] {
          model_option_int(mlp, {{"hidden", "0"}}, "hidden", 1, 65536);
        }).find("invalid value '0' for model key hidden (allowed: 1..65536)") != std::string::npos);
  CHECK(error_of([&] {
          model_option_int(mlp, {{"hidden", "8x"}}, "hidden", 1, 65536);
        }).find("'8x'") != std::string::npos);
}

TEST_CASE("models: a model that cannot take the data's shape is refused before any work", "[models]") {
  const ModelDef& cnn = find_model("smallcnn");
  Generator gen(0);
  const InitOptions init{&gen, DType::f32, &ref()};
  const std::string small = error_of([&] { build_model(cnn, init, ModelInput{{3, 2, 2}, 10}, {}); });
  CHECK(small.find("model 'smallcnn' for input 3x2x2, 10 classes") != std::string::npos);
  CHECK(small.find("height and width 4..4096") != std::string::npos);
  CHECK(error_of([&] { build_model(cnn, init, ModelInput{{32, 32}, 10}, {}); }).find("[C, H, W]") != std::string::npos);
  TrainConfig c = mlp_config();
  c.model.options = {{"hidden", "-1"}};
  CHECK(error_of([&] { (void)model_task(c); }).find("SyntheticImages: model 'mlp'") != std::string::npos);
  c.model.options = {{"width", "3"}};
  CHECK(error_of([&] { validate_config(c); }).find("model 'mlp' has no key 'width' (its keys: hidden)") !=
        std::string::npos);
}

TEST_CASE("models: the config keys model and model_options round-trip through text", "[models]") {
  TrainConfig c;
  apply_config_value(c, "model", "MLP", "--model");
  CHECK(c.model.name == "mlp");
  apply_config_value(c, "model_options", "hidden=64", "--model-options");
  CHECK(c.model.options == ModelOptions{{"hidden", "64"}});
  CHECK(config_field("model_options").get(c) == "hidden=64");
  CHECK(error_of([&] {
          apply_config_value(c, "model", "vgg", "--model");
        }).find("--model: invalid value 'vgg' for model (allowed: smallcnn | mlp | resnet | gpt)") !=
        std::string::npos);
}

TEST_CASE("models: a registered model trains, checkpoints and resumes by name", "[models]") {
  const TrainConfig config = mlp_config();
  Trainer straight(config, model_task(config));
  const TrainResult full = straight.train(nullptr);
  REQUIRE(full.losses.size() == 12);
  CHECK(full.losses.back() < full.losses.front());
  CHECK(full.final_eval.accuracy > 0.3);  // 10 classes: chance is 0.1
  CHECK(straight.model().num_parameters() == 3072 * 32 + 32 + 32 * 10 + 10);

  TempDir dir("models-resume");
  TrainConfig first = config;
  first.stop_at = 6;
  first.checkpoint.save = dir / "ckpt";
  Trainer(first, model_task(first)).train(nullptr);
  // What verify-checkpoint and --resume check: the model rebuilt from the checkpoint by its name.
  const Checkpoint saved = load_checkpoint(dir / "ckpt", ref());
  CHECK(saved.trainer.strings.at("model") == "MLP");
  CHECK(checkpoint_config(saved, "ckpt").model.options == ModelOptions{{"hidden", "32"}});
  CHECK_NOTHROW(validate_checkpoint(saved, dir / "ckpt"));
  TrainConfig resume = config;
  resume.checkpoint.resume = dir / "ckpt";
  Trainer resumed(resume, model_task(resume));
  const TrainResult rest = resumed.train(nullptr);
  CHECK(rest.losses == std::vector<double>(full.losses.begin() + 6, full.losses.end()));
  // Resuming it as another model is refused, naming the tensor that does not fit.
  TrainConfig wrong = resume;
  wrong.model.name = "smallcnn";
  wrong.model.options.clear();
  CHECK_THROWS_AS(Trainer(wrong, model_task(wrong)), Error);
}
