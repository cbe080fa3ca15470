// Regression tests for what a fault-injection run of bad inputs and kills found (issue 16): output
// paths that are not regular files, deeply nested JSON, sizes trusted before they were checked,
// staging directories left by killed saves, strict YAML. Each is a behaviour the project promises
// (README, "Reliability").
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

#include "engine/io/fileio.h"
#include "engine/io/safetensors.h"
#include "engine/io/yaml_file.h"
#include "engine/train/checkpoint.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;
namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool is_char_device(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

TrainConfig tiny_config() {
  TrainConfig c;
  c.steps = 2;
  c.batch = 8;
  c.data.train_samples = 32;
  c.data.eval_samples = 16;
  c.data.eval_batch = 16;
  c.reporting.log_every = 1000;
  return c;
}

// A JSON value nested `depth` arrays deep.
std::string nested_json(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("outputs: a regular file is replaced atomically, a link followed, a device or FIFO written in place",
          "[reliability]") {
  TempDir dir("outputs");
  // A new file and a replaced one.
  write_file_atomic(dir / "a.json", std::string("one"));
  write_file_atomic(dir / "a.json", std::string("two"));
  CHECK(read_text(dir / "a.json") == "two");
  // A symlink stays a symlink; the file it points to is replaced.
  write_file_atomic(dir / "target.json", std::string("old"));
  fs::create_symlink("target.json", dir / "link.json");
  write_file_atomic(dir / "link.json", std::string("new"));
  CHECK(fs::is_symlink(dir / "link.json"));
  CHECK(read_text(dir / "target.json") == "new");
  // A dangling link: the file it names is created (the link is followed, as a shell's > does).
  fs::create_symlink("sub/created.json", dir / "dangling.json");
  write_file_atomic(dir / "dangling.json", std::string("made"));
  CHECK(fs::is_symlink(dir / "dangling.json"));
  CHECK(read_text(dir / "sub/created.json") == "made");
  // A character device is written into, never replaced.
  write_file_atomic("/dev/null", std::string("discarded"));
  CHECK(is_char_device("/dev/null"));
  REQUIRE_THROWS_CONTAINING(write_file_atomic("/dev/full", std::string("x")), "/dev/full", "No space left");
  CHECK(is_char_device("/dev/full"));
  // A FIFO with a reader receives the bytes; without one, the write is refused instead of hanging.
  const std::string fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE_THROWS_CONTAINING(write_file_atomic(fifo, std::string("x")), "the FIFO has no reader");
  std::string received;
  std::thread reader([&] { received = read_text(fifo); });
  for (int i = 0; i < 200; ++i) {  // until the reader has the FIFO open
    try {
      write_file_atomic(fifo, std::string("through the pipe"));
      break;
    } catch (const Error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  reader.join();
  CHECK(received == "through the pipe");
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  // A directory, or a path under a regular file, is refused before anything is written.
  REQUIRE_THROWS_CONTAINING(check_output_file(dir.path.string(), "--trace"), "--trace", "is a directory");
  REQUIRE_THROWS_CONTAINING(check_output_file(dir / "a.json/x", "--out"), "a.json", "not a directory");
  CHECK_NOTHROW(check_output_file(dir / "new/deeper/file.json", "--out"));
}

TEST_CASE("outputs: the trainer refuses a bad --trace or --save before training", "[reliability]") {
  TempDir dir("trainer-outputs");
  TrainConfig config = tiny_config();
  config.reporting.trace = dir.path.string();  // a directory
  REQUIRE_THROWS_CONTAINING(Trainer{config}, "--trace", "is a directory");
  config.reporting.trace.clear();
  std::ofstream(dir / "notes.txt") << "keep";
  config.checkpoint.save = dir.path.string();  // a directory holding something else
  REQUIRE_THROWS_CONTAINING(Trainer{config}, "holds 'notes.txt'");
  config.checkpoint.save = dir / "notes.txt";  // a file
  REQUIRE_THROWS_CONTAINING(Trainer{config}, "not a directory");
  CHECK(read_text(dir / "notes.txt") == "keep");
  // A --save that is a link to a checkpoint directory: the directory is replaced, the link stays.
  config.checkpoint.save = dir / "real";
  Trainer first(config);
  first.train(nullptr);
  fs::create_symlink("real", dir / "latest");
  config.checkpoint.save = dir / "latest";
  config.steps = 3;
  config.checkpoint.resume = dir / "latest";
  Trainer second(config);
  second.train(nullptr);
  CHECK(fs::is_symlink(dir / "latest"));
  CHECK(load_checkpoint(dir / "real", ref()).trainer.integers.at("step") == 3);
}

TEST_CASE("json: nesting and size are bounded before a parser sees the text", "[reliability]") {
  const std::string deep = nested_json(200000);
  REQUIRE_THROWS_CONTAINING(check_json_bounds(deep.data(), deep.size(), 64, 1 << 20, "x"), "x", "nested more than 64");
  const std::string in_string = "[\"" + std::string(1000, '[') + "\"]";
  CHECK_NOTHROW(check_json_bounds(in_string.data(), in_string.size(), 2, 1 << 20, "x"));
  REQUIRE_THROWS_CONTAINING(check_json_bounds(in_string.data(), in_string.size(), 2, 100, "x"), "more than the 100 B");

  TempDir dir("nested");
  TrainConfig config = tiny_config();
  config.checkpoint.save = dir / "c";
  Trainer trainer(config);
  trainer.train(nullptr);
  SECTION("a COMPLETE marker nested 200,000 deep") {
    write_file_atomic(dir / "c/COMPLETE", deep);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(dir / "c", ref()), "COMPLETE", "nested more than");
  }
  SECTION("a COMPLETE marker whose own checksum does not match") {
    std::string marker = read_text(dir / "c/COMPLETE");
    const auto at = marker.find("\"bytes\": ");
    REQUIRE(at != std::string::npos);
    marker[at + 9] = marker[at + 9] == '9' ? '8' : '9';  // a size changed, the CRC of the marker kept
    write_file_atomic(dir / "c/COMPLETE", marker);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(dir / "c", ref()), "COMPLETE", "corrupted", "CRC-32");
  }
  SECTION("a safetensors header nested beyond its flat format") {
    std::string header = "{\"a\":" + nested_json(100000) + "}";
    while (header.size() % 8 != 0) header += ' ';
    std::vector<unsigned char> bytes(8 + header.size());
    const std::uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    REQUIRE_THROWS_CONTAINING(decode_safetensors(bytes.data(), bytes.size(), "w.safetensors", ref()), "w.safetensors",
                              "nested more than 3");
  }
}

TEST_CASE("checkpoint: file types and sizes are checked before a byte is read", "[reliability]") {
  TempDir dir("sizes");
  TrainConfig config = tiny_config();
  config.checkpoint.save = dir / "c";
  Trainer trainer(config);
  trainer.train(nullptr);
  SECTION("weights extended to a sparse 30 GiB file") {
    fs::resize_file(dir / "c/model.safetensors", 30ull << 30);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(dir / "c", ref()), "model.safetensors", "longer than recorded");
  }
  SECTION("weights linked to /dev/zero") {
    fs::remove(dir / "c/model.safetensors");
    fs::create_symlink("/dev/zero", dir / "c/model.safetensors");
    REQUIRE_THROWS_CONTAINING(load_checkpoint(dir / "c", ref()), "model.safetensors", "character device");
  }
  SECTION("state.json replaced by a FIFO (no hang)") {
    fs::remove(dir / "c/state.json");
    REQUIRE(::mkfifo((dir / "c/state.json").c_str(), 0600) == 0);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(dir / "c", ref()), "state.json", "FIFO");
  }
  SECTION("memory a request cannot have") {
    REQUIRE_THROWS_CONTAINING(check_host_memory(std::uint64_t{1} << 60, "a test buffer", "use less"),
                              "a test buffer needs 1.0 EiB", "is available", "use less");
  }
}

TEST_CASE("checkpoint: a save removes the staging directories of killed saves, and only those", "[reliability]") {
  TempDir dir("staging");
  // A save killed mid-way leaves .c.saving-<pid>; pid 4194303 is above any live one here, pid 1 is alive.
  fs::create_directories(dir / ".c.saving-4194303");
  std::ofstream(dir / ".c.saving-4194303/model.safetensors") << std::string(1000, 'x');
  fs::create_directories(dir / ".c.saving-1");
  fs::create_directories(dir / ".other.saving-4194303");
  TrainConfig config = tiny_config();
  config.checkpoint.save = dir / "c";
  Trainer trainer(config);
  trainer.train(nullptr);
  CHECK_FALSE(fs::exists(dir / ".c.saving-4194303"));
  CHECK(fs::exists(dir / ".c.saving-1"));            // its process may still be saving
  CHECK(fs::exists(dir / ".other.saving-4194303"));  // another checkpoint's
  CHECK(fs::exists(dir / "c/COMPLETE"));

  // Killed saves, for real: each child saves in a loop and is killed; the next save cleans up.
  for (int kill = 0; kill < 5; ++kill) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (;;) save_checkpoint(dir / "k", load_checkpoint(dir / "c", ref()));
    }
    ::usleep(static_cast<useconds_t>(20000 + 7000 * kill));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  save_checkpoint(dir / "k", load_checkpoint(dir / "c", ref()));
  int staging = 0;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    if (entry.path().filename().string().rfind(".k.saving-", 0) == 0) ++staging;
  }
  CHECK(staging == 0);
  CHECK(load_checkpoint(dir / "k", ref()).trainer.integers.at("step") == 2);
}

TEST_CASE("yaml: one document, each key once, a regular file", "[reliability]") {
  REQUIRE_THROWS_CONTAINING(load_yaml_text("steps: 3\nbatch: 8\nsteps: 4\n", "c.yaml"), "c.yaml line 3",
                            "key 'steps' appears twice");
  REQUIRE_THROWS_CONTAINING(load_yaml_text("base: {a: 1, a: 2}\n", "l.yaml"), "key 'a' appears twice");
  REQUIRE_THROWS_CONTAINING(load_yaml_text("steps: 3\n---\nbatch: 8\n", "c.yaml"), "c.yaml line 2",
                            "a second YAML document");
  REQUIRE_THROWS_CONTAINING(load_yaml_text(std::string(100, '[') + std::string(100, ']'), "d.yaml"),
                            "nested more than 64");
  CHECK(load_yaml_text("---\nsteps: 3\n", "c.yaml")["steps"].as<int>() == 3);  // one leading marker is fine
  CHECK(load_yaml_text("", "c.yaml").IsNull());
  TrainConfig config;
  REQUIRE_THROWS_CONTAINING(apply_config_file(config, "/dev/null"), "'/dev/null' is a character device");
  REQUIRE_THROWS_CONTAINING(apply_config_file(config, "/nonexistent/c.yaml"), "does not exist");
  // A value with a newline in it makes a one-line error.
  try {
    apply_config_value(config, "optimizer", "sgd\nrm -rf", "--optimizer");
    FAIL("expected an Error");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find("'sgd\\nrm -rf'") != std::string::npos);
  }
}

namespace {

// Four features, four classes; every sample NaN when `poisoned` (a bad shard, a broken decoder).
class Features final : public Dataset {
 public:
  Features(std::uint64_t seed, std::int64_t size, bool poisoned) : seed_(seed), size_(size), poisoned_(poisoned) {}
  std::int64_t size() const override { return size_; }
  Shape sample_shape() const override { return {4}; }
  std::int64_t num_classes() const override { return 4; }
  std::string describe() const override { return std::string("Features") + (poisoned_ ? " (NaN)" : ""); }
  std::int64_t get(std::int64_t index, float* out, double*) const override {
    Generator gen(mix_seed(seed_, static_cast<std::uint64_t>(index)));
    for (int i = 0; i < 4; ++i)
      out[i] = poisoned_ ? std::numeric_limits<float>::quiet_NaN() : float(gen.uniform(-1, 1));
    return static_cast<std::int64_t>(gen.below(4));
  }

 private:
  std::uint64_t seed_;
  std::int64_t size_;
  bool poisoned_;
};

TrainTask features_task(bool poisoned) {
  TrainTask task;
  task.model_name = "MLP";
  task.make_model = [](const InitOptions& init) {
    auto model = std::make_shared<Sequential>();
    model->add(std::make_shared<Linear>(4, 16, init)).add(std::make_shared<ReLU>());
    model->add(std::make_shared<Linear>(16, 4, init));
    return model;
  };
  task.train_data = std::make_shared<Features>(1, 256, poisoned);
  task.held_out_data = std::make_shared<Features>(2, 64, false);
  return task;
}

TrainConfig features_config() {
  TrainConfig c;
  c.steps = 4;
  c.batch = 16;
  c.data.eval_batch = 64;
  c.reporting.log_every = 1 << 30;
  c.execution.backend = "reference";
  return c;
}

std::vector<double> weights_of(Module& model) {
  std::vector<double> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto v = values(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace

TEST_CASE("nonfinite: a NaN loss stops the run naming the step; the last good checkpoint is untouched",
          "[reliability]") {
  TempDir dir("nonfinite");
  TrainConfig config = features_config();
  config.steps = 2;
  config.checkpoint.save = dir / "c";
  Trainer(config, features_task(false)).train(nullptr);
  const std::string before = read_text(dir / "c/COMPLETE");
  // The same run continued on poisoned data: the first new step diverges, nothing is written.
  config.steps = 6;
  config.checkpoint.resume = dir / "c";
  Trainer poisoned(config, features_task(true));
  try {
    poisoned.train(nullptr);
    FAIL("expected TrainingDiverged");
  } catch (const TrainingDiverged& e) {
    const std::string what = e.what();
    CHECK(what.find("training diverged at step 3: the loss") != std::string::npos);
    CHECK(what.find("--on-nonfinite skip") != std::string::npos);
  }
  CHECK(read_text(dir / "c/COMPLETE") == before);
  CHECK(load_checkpoint(dir / "c", ref()).trainer.integers.at("step") == 2);
}

TEST_CASE("nonfinite: --on-nonfinite skip skips the update and counts it", "[reliability]") {
  TrainConfig config = features_config();
  config.execution.on_nonfinite = NonFinitePolicy::skip;
  config.reporting.eval_at_end = false;
  Trainer trainer(config, features_task(true));
  const std::vector<double> initial = weights_of(trainer.model());
  const TrainResult result = trainer.train(nullptr);
  CHECK(result.nonfinite_steps == 4);
  CHECK(result.last_step == 4);
  CHECK(weights_of(trainer.model()) == initial);  // no update was applied
  CHECK(trainer.optimizer().updates() == 0);
}

TEST_CASE("nonfinite: a NaN gradient under a finite loss is caught before the update", "[reliability]") {
  TrainConfig config = features_config();
  Trainer trainer(config, features_task(false));
  // A hook that poisons one gradient as it becomes ready: the loss stays finite. (The hook gets the
  // parameter as its argument; capturing it would make a reference cycle.)
  for (const auto& [name, param] : trainer.model().named_parameters()) {
    if (name != "0.weight") continue;
    Tensor p = param;
    p.add_grad_ready_hook([](const Tensor& ready) {
      Tensor g = ready.grad();
      g.fill_(std::numeric_limits<double>::quiet_NaN());
    });
  }
  const std::vector<double> initial = weights_of(trainer.model());
  REQUIRE_THROWS_CONTAINING(trainer.train(nullptr), "training diverged at step 1: the gradient of 0.weight");
  CHECK(weights_of(trainer.model()) == initial);
}

TEST_CASE("nonfinite: a checkpoint holding NaN is refused unless the user says otherwise", "[reliability]") {
  TempDir dir("nan-checkpoint");
  TrainConfig config = features_config();
  config.steps = 2;
  config.checkpoint.save = dir / "c";
  Trainer(config, features_task(false)).train(nullptr);
  Checkpoint c = load_checkpoint(dir / "c", ref());
  std::vector<double> w = values(c.model[0].second);
  w[3] = std::numeric_limits<double>::infinity();
  c.model[0].second = Tensor::from_vector(w, c.model[0].second.shape(), ref()).to(DType::f32);
  save_checkpoint(dir / "c", c);
  config.steps = 4;
  config.checkpoint.resume = dir / "c";
  REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "tensor '0.weight' holds inf at element 3",
                            "--allow-nonfinite-checkpoint");
  config.checkpoint.allow_nonfinite_checkpoint = true;
  CHECK_NOTHROW(Trainer(config, features_task(false)));
}

TEST_CASE("resume: a state.json cannot override the config or lose optimiser state", "[reliability]") {
  TempDir dir("state-override");
  TrainConfig config = features_config();
  config.steps = 3;
  config.optimizer.momentum = 0.9;
  config.optimizer.weight_decay = 0.01;
  config.checkpoint.save = dir / "c";
  Trainer(config, features_task(false)).train(nullptr);
  config.steps = 6;
  config.checkpoint.resume = dir / "edited";
  config.checkpoint.save.clear();
  auto edited = [&](const std::function<void(Checkpoint&)>& edit) {
    Checkpoint c = load_checkpoint(dir / "c", ref());
    edit(c);
    save_checkpoint(dir / "edited", c);  // a consistent, checksummed checkpoint with the edit
  };
  SECTION("momentum") {
    edited([](Checkpoint& c) { c.optimizer.numbers["momentum"] = 0.5; });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "momentum 0.5", "config gives 0.9");
  }
  SECTION("dampening") {
    edited([](Checkpoint& c) { c.optimizer.numbers["dampening"] = 0.3; });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "dampening 0.3");
  }
  SECTION("nesterov") {
    edited([](Checkpoint& c) { c.optimizer.integers["nesterov"] = 1; });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "nesterov on");
  }
  SECTION("weight decay") {
    edited([](Checkpoint& c) { c.optimizer.numbers["weight_decay"] = 0.5; });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "weight_decay 0.5", "config gives 0.01");
  }
  SECTION("the optimizer's lr") {
    edited([](Checkpoint& c) { c.optimizer.numbers["lr"] = 0.5; });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "lr 0.5", "not the schedule's");
  }
  SECTION("the schedule's base lr") {
    edited([](Checkpoint& c) { c.scheduler.numbers["base_lr"] = 0.02; });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "base lr 0.02", "config gives 0.01");
  }
  SECTION("a missing momentum buffer") {
    edited([](Checkpoint& c) { c.optimizer.tensors.erase("momentum_buffer.2.weight"); });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "'2.weight'",
                              "no 'momentum_buffer.2.weight' buffer");
  }
  SECTION("a renamed momentum buffer") {
    edited([](Checkpoint& c) {
      c.optimizer.tensors["momentum_buffer.9.weight"] = c.optimizer.tensors.at("momentum_buffer.2.weight");
      c.optimizer.tensors.erase("momentum_buffer.2.weight");
    });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "parameters this model does not have");
  }
  SECTION("a step rewound consistently (loader and schedule too)") {
    edited([](Checkpoint& c) {
      c.trainer.integers["step"] = 1;
      c.loader.integers["next_batch"] = 1;
      c.scheduler.integers["last_step"] = 1;
    });
    REQUIRE_THROWS_CONTAINING(Trainer(config, features_task(false)), "step 1 with 0 skipped",
                              "the optimizer has applied 3 updates");
  }
}
