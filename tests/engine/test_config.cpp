// Configuration: YAML files and flag values go through one table of keys; bad input of every
// kind is an Error naming the key, the value, where it came from and what is allowed.
#include <filesystem>
#include <fstream>

#include "engine/train/config.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;
namespace fs = std::filesystem;

namespace {
std::string write_yaml(const std::string& name, const std::string& text) {
  const auto path =
      fs::temp_directory_path() / ("trainlab-config-" + name + "-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}
}  // namespace

TEST_CASE("config: a YAML file sets keys and flags override them", "[config]") {
  const std::string path =
      write_yaml("ok", "steps: 50\nbatch: 64\nlr: 0.05\noptimizer: adamw\npersistent_workers: true\n");
  TrainConfig c;
  apply_config_file(c, path);
  CHECK(c.steps == 50);
  CHECK(c.batch == 64);
  CHECK(c.optimizer.lr == 0.05);
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.data.persistent_workers);
  apply_config_value(c, "batch", "16", "--batch");
  CHECK(c.batch == 16);
  validate_config(c);
  fs::remove(path);
}

TEST_CASE("config: the shipped configs/smallcnn.yaml is valid", "[config]") {
  TrainConfig c;
  apply_config_file(c, TRAINLAB_SOURCE_DIR "/configs/smallcnn.yaml");
  validate_config(c);
  CHECK(c.batch == 32);
}

TEST_CASE("config: bad keys, types, ranges and files are refused with a clear message", "[config]") {
  TrainConfig c;
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "batchsize", "3", "--batchsize"), "unknown key 'batchsize'",
                            "batch,");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "batch", "abc", "--batch"), "--batch", "'abc'", "an integer",
                            "1..65536");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "batch", "3.5", "--batch"), "'3.5'", "integer");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "batch", "0", "--batch"), "'0' for batch", "1..65536");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "lr", "-1", "--lr"), "'-1' for lr", "(0, 10]");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "lr", "nan", "--lr"), "'nan' for lr");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "optimizer", "adam", "--optimizer"), "'adam'", "sgd | adamw");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "persistent_workers", "maybe", "--persistent-workers"),
                            "true | false");
  REQUIRE_THROWS_CONTAINING(apply_config_value(c, "seed", "-3", "--seed"), "'-3' for seed");

  const std::string unknown = write_yaml("unknown", "steps: 10\nlearning_rate: 0.1\n");
  REQUIRE_THROWS_CONTAINING(apply_config_file(c, unknown), unknown.c_str(), "unknown key 'learning_rate'");
  const std::string wrong_type = write_yaml("type", "batch: [1, 2]\n");
  REQUIRE_THROWS_CONTAINING(apply_config_file(c, wrong_type), "'batch' must be a single value");
  const std::string not_a_map = write_yaml("list", "- 1\n- 2\n");
  REQUIRE_THROWS_CONTAINING(apply_config_file(c, not_a_map), "must be a map");
  const std::string empty_value = write_yaml("empty", "batch:\n");
  REQUIRE_THROWS_CONTAINING(apply_config_file(c, empty_value), "invalid value '' for batch");
  const std::string complex_key = write_yaml("key", "? [a, b]\n: 1\n");
  REQUIRE_THROWS_CONTAINING(apply_config_file(c, complex_key), "every key must be a plain name");
  fs::remove(empty_value);
  fs::remove(complex_key);
  const std::string broken = write_yaml("broken", "batch: [1, 2\n");
  REQUIRE_THROWS_CONTAINING(apply_config_file(c, broken), "not valid YAML");
  REQUIRE_THROWS_CONTAINING(apply_config_file(c, "/nonexistent/config.yaml"),
                            "'/nonexistent/config.yaml' does not exist");
  for (const auto& p : {unknown, wrong_type, not_a_map, broken}) fs::remove(p);

  TrainConfig v;
  v.execution.backend = "quantum";
  REQUIRE_THROWS_CONTAINING(validate_config(v), "unknown backend 'quantum'", "reference");
  v = TrainConfig{};
  v.data.train_samples = 10;
  REQUIRE_THROWS_CONTAINING(validate_config(v), "train_samples (10) must be at least batch (32)");
  v = TrainConfig{};
  v.checkpoint.resume = "/nonexistent/checkpoint";
  REQUIRE_THROWS_CONTAINING(validate_config(v), "'/nonexistent/checkpoint' does not exist");
  v = TrainConfig{};
  v.checkpoint.save_every = 5;
  REQUIRE_THROWS_CONTAINING(validate_config(v), "save_every needs a save directory");
  v = TrainConfig{};
  v.stop_at = 500;
  REQUIRE_THROWS_CONTAINING(validate_config(v), "stop_at (500) must not exceed steps (300)");
}

TEST_CASE("config: every key has a flag spelled with dashes", "[config]") {
  for (const auto& field : config_fields()) {
    std::string expected = "--" + field.key;
    for (auto& ch : expected) ch = ch == '_' ? '-' : ch;
    CHECK(field.flag == expected);
    CHECK_FALSE(field.allowed.empty());
  }
}
