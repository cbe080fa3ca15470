// Training end to end on the reference backend: it learns, it is deterministic whatever the
// loader's worker count or the thread count, and a resumed run is bit-identical to a straight one.
#include <filesystem>

#include <map>
#include <set>

#include "backends/registry.h"
#include "engine/instrument/profiler.h"
#include "engine/io/safetensors.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;
namespace fs = std::filesystem;

namespace {

TrainConfig small_config() {
  TrainConfig c;
  c.steps = 12;
  c.batch = 16;
  c.data.train_samples = 64;  // 4 batches an epoch: 12 steps cross two epoch boundaries
  c.data.eval_samples = 40;
  c.data.eval_batch = 40;
  c.data.decode_cost = 1;
  c.reporting.log_every = 1000;
  c.seed = 3;
  return c;
}

void check_same_parameters(Trainer& a, Trainer& b) {
  const auto pa = a.model().named_parameters(), pb = b.model().named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    CHECK(bitwise_equal(pa[i].second, pb[i].second));
  }
}

std::string temp_dir(const std::string& name) {
  const auto path = fs::temp_directory_path() / ("trainlab-train-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(path);
  return path.string();
}

}  // namespace

TEST_CASE("training: loss falls and held-out accuracy passes 80% within 3,200 samples", "[training]") {
  TrainConfig c;
  c.steps = 100;
  c.batch = 32;
  c.seed = 0;
  c.reporting.log_every = 1000;
  Trainer trainer(c);
  const TrainResult result = trainer.train(nullptr);
  REQUIRE(result.losses.size() == 100);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += result.losses[static_cast<std::size_t>(i)] / 10;
    last += result.losses[static_cast<std::size_t>(90 + i)] / 10;
  }
  INFO("mean loss of the first 10 steps " << first << ", of the last 10 " << last);
  CHECK(first > 2.0);  // near log(10) at the start
  CHECK(last < 0.5 * first);
  INFO("held-out accuracy " << result.final_eval.accuracy);
  CHECK(result.final_eval.accuracy >= 0.80);
  CHECK(result.final_eval.samples == 1000);
  CHECK(result.warmup_steps == 5);
  CHECK(result.measured_steps == 95);
  // Throughput is the measured samples over the measured phase time, each step's time recorded.
  CHECK(result.samples_per_s == Approx(95.0 * 32 / result.measured.total()));
  REQUIRE(result.step_seconds.size() == 95);
  double steps_total = 0;
  for (double s : result.step_seconds) steps_total += s;
  CHECK(result.measured.total() <= steps_total * 1.0001);  // the phases lie inside the steps
}

TEST_CASE("training: the same seed gives bit-identical parameters whatever num_workers is", "[training][determinism]") {
  for (const std::string backend : {"reference", "onednn"}) {
    INFO("backend " << backend);
    TrainConfig base = small_config();
    base.execution.backend = backend;
    Trainer reference_run(base);
    const TrainResult expected = reference_run.train(nullptr);
    for (auto [workers, persistent] : {std::pair{1, false}, std::pair{2, false}, std::pair{3, true}}) {
      INFO("workers " << workers << " persistent " << persistent);
      TrainConfig c = base;
      c.data.workers = workers;
      c.data.persistent_workers = persistent;
      Trainer run(c);
      const TrainResult result = run.train(nullptr);
      CHECK(result.losses == expected.losses);
      check_same_parameters(reference_run, run);
    }
  }
}

TEST_CASE("training: bit-identical at 1 and 2 compute threads on the reference", "[training][determinism]") {
  TrainConfig c = small_config();
  c.execution.backend = "reference";
  c.steps = 4;
  c.execution.threads = 1;
  Trainer one(c);
  one.train(nullptr);
  c.execution.threads = 2;
  Trainer two(c);
  two.train(nullptr);
  check_same_parameters(one, two);
}

TEST_CASE("training: every fast backend tracks the reference's loss curve", "[training][determinism]") {
  // Rounding differences grow chaotically over steps (about 100x in the first six here), so the
  // bound is loose; a stale cached primitive or a wrong gradient would be off by far more.
  for (const auto& info : registered_backends()) {
    if (info.name == "reference" || info.device_type != DeviceType::cpu) continue;
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const MemoryFormat layout : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        INFO(info.name << " " << dtype_name(dtype) << " " << memory_format_name(layout));
        TrainConfig c = small_config();
        c.steps = 8;
        c.execution.dtype = dtype;
        c.execution.layout = layout;
        c.execution.fuse = layout == MemoryFormat::channels_last;  // both the plain and the fused paths
        c.execution.backend = "reference";
        const TrainResult expected = Trainer(c).train(nullptr);
        c.execution.backend = info.name;
        const TrainResult got = Trainer(c).train(nullptr);
        REQUIRE(got.losses.size() == expected.losses.size());
        for (std::size_t i = 0; i < got.losses.size(); ++i) {
          INFO("step " << i + 1 << ": " << got.losses[i] << " vs " << expected.losses[i]);
          CHECK(std::abs(got.losses[i] - expected.losses[i]) <
                (dtype == DType::f32 ? 2e-3 : 3e-2) * expected.losses[i]);
        }
      }
    }
  }
}

TEST_CASE("profiler: phase spans cover each step and op spans nest inside them", "[profiler]") {
  TrainConfig c = small_config();
  c.steps = 3;
  c.data.workers = 1;
  Trainer trainer(c);
  Profiler& profiler = Profiler::instance();
  profiler.clear();
  profiler.set_enabled(true);
  trainer.train(nullptr);
  profiler.set_enabled(false);
  const auto spans = profiler.take();
  std::map<std::string, int> count;
  for (const auto& s : spans) ++count[s.name];
  // The phases of each step lie inside its step span, one after another, and take time.
  for (const auto& step : spans) {
    if (step.name != "step") continue;
    std::int64_t phases_ns = 0;
    for (const auto& s : spans) {
      const bool phase = s.name == "data_wait" || s.name == "forward" || s.name == "backward" || s.name == "optimizer";
      if (!phase || s.thread != step.thread || s.start_ns < step.start_ns || s.end_ns > step.end_ns) continue;
      CHECK(s.end_ns > s.start_ns);
      phases_ns += s.end_ns - s.start_ns;
    }
    CHECK(phases_ns > 0);
    CHECK(phases_ns <= step.end_ns - step.start_ns);
  }
  for (const char* phase : {"data_wait", "forward", "backward", "optimizer"}) CHECK(count[phase] == 3);
  CHECK(count["conv2d.forward"] >= 6);  // two convolutions a step, plus evaluation
  CHECK(count["conv2d.backward"] == 6);
  CHECK(count["cross_entropy.backward"] == 3);
  CHECK(count["loader.produce_batch"] >= 3);
  // Each op span lies inside a phase span on the same thread.
  auto inside = [&](const ProfileSpan& op, const char* phase) {
    for (const auto& s : spans) {
      if (s.name == phase && s.thread == op.thread && s.start_ns <= op.start_ns && op.end_ns <= s.end_ns) return true;
    }
    return false;
  };
  for (const auto& s : spans) {
    if (s.name == "conv2d.backward") CHECK(inside(s, "backward"));
    if (s.name == "sgd.step") CHECK(inside(s, "optimizer"));
  }
  // The loader worker records on its own thread.
  std::set<std::uint32_t> loader_threads, phase_threads;
  for (const auto& s : spans) {
    if (s.name == "loader.produce_batch") loader_threads.insert(s.thread);
    if (s.name == "forward") phase_threads.insert(s.thread);
  }
  REQUIRE(phase_threads.size() == 1);
  CHECK(loader_threads.count(*phase_threads.begin()) == 0);
}

TEST_CASE("training: --record holds the run: its initial state, every batch in order, each step's loss and lr",
          "[training]") {
  TrainConfig plain = small_config();
  plain.steps = 5;
  plain.optimizer.schedule = ScheduleKind::warmup_cosine;
  plain.optimizer.warmup_steps = 2;
  TrainConfig config = plain;
  config.reporting.record = temp_dir("record") + ".safetensors";
  Trainer fresh(plain);  // untrained: the run's initial state, and its loader the run's batches in order
  Trainer recorded(config);
  const TrainResult result = recorded.train(nullptr);
  const SafetensorsContents file = read_safetensors(config.reporting.record, get_backend("reference"));
  std::map<std::string, Tensor> by_name(file.tensors.begin(), file.tensors.end());
  for (const auto& [name, tensor] : fresh.model().state_dict()) {
    INFO(name);
    REQUIRE(by_name.count("init." + name));
    CHECK(bitwise_equal(by_name.at("init." + name), tensor));
  }
  for (int k = 0; k < 5; ++k) {
    INFO("batch " << k);
    const Batch batch = fresh.loader().next();
    CHECK(bitwise_equal(by_name.at("inputs." + std::to_string(k)), batch.inputs));
    CHECK(bitwise_equal(by_name.at("labels." + std::to_string(k)), batch.labels));
  }
  CHECK_FALSE(by_name.count("inputs.5"));
  CHECK(by_name.at("loss").to_vector<double>() == result.losses);
  const std::vector<double> lr = by_name.at("lr").to_vector<double>();
  REQUIRE(lr.size() == 5);
  CHECK(lr[0] < lr[1]);  // the warm-up, as the run's schedule gave it
  CHECK(file.metadata.at("tool") == "trainlab train --record");
  CHECK(file.metadata.at("optimizer") == "sgd");
  CHECK(file.metadata.at("batches") == "5");
  fs::remove(config.reporting.record);
}

TEST_CASE("training: resume is bit-identical to a straight run", "[training][resume]") {
  for (const OptimizerKind optimizer : {OptimizerKind::sgd, OptimizerKind::adamw}) {
    INFO("optimizer " << optimizer_name(optimizer));
    TrainConfig config = small_config();
    config.optimizer.kind = optimizer;
    config.data.workers = 2;
    if (optimizer == OptimizerKind::adamw) {
      config.optimizer.lr = 0.001;
      config.optimizer.schedule = ScheduleKind::warmup_cosine;
      config.optimizer.warmup_steps = 3;
    }
    Trainer straight(config);
    const TrainResult full = straight.train(nullptr);
    REQUIRE(full.losses.size() == 12);

    // N steps, save; then a new process-equivalent resumes and runs N more.
    const std::string dir = temp_dir(optimizer_name(optimizer));
    TrainConfig first_config = config;
    first_config.stop_at = 6;
    first_config.checkpoint.save = dir;
    Trainer first(first_config);
    const TrainResult half = first.train(nullptr);
    CHECK(half.losses == std::vector<double>(full.losses.begin(), full.losses.begin() + 6));

    TrainConfig resume_config = config;
    resume_config.checkpoint.resume = dir;
    Trainer resumed(resume_config);
    CHECK(resumed.step() == 6);
    const TrainResult rest = resumed.train(nullptr);
    CHECK(rest.first_step == 6);
    CHECK(rest.losses == std::vector<double>(full.losses.begin() + 6, full.losses.end()));
    check_same_parameters(straight, resumed);
    const StateDict a = straight.optimizer().state_dict(), b = resumed.optimizer().state_dict();
    CHECK(a.numbers == b.numbers);
    CHECK(a.integers == b.integers);
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (const auto& [key, t] : a.tensors) {
      INFO(key);
      CHECK(bitwise_equal(t, b.tensors.at(key)));
    }
    CHECK(straight.optimizer().lr() == resumed.optimizer().lr());
    CHECK(straight.loader().position().epoch == resumed.loader().position().epoch);
    CHECK(straight.loader().position().next_batch == resumed.loader().position().next_batch);
    CHECK(straight.generator().state_string() == resumed.generator().state_string());
    // The generator comes from the checkpoint, not from re-seeding: a checkpoint whose generator
    // has moved on (a driver that draws from it) is resumed with that state. Without the restore,
    // the state would be the freshly seeded one and this would fail.
    Checkpoint moved = load_checkpoint(dir, ref());
    Generator advanced(config.seed);
    for (int i = 0; i < 17; ++i) advanced.next_u64();
    moved.trainer.strings["generator"] = advanced.state_string();
    save_checkpoint(dir + "-moved", moved);
    TrainConfig moved_config = config;
    moved_config.checkpoint.resume = dir + "-moved";
    Trainer from_moved(moved_config);
    CHECK(from_moved.generator().state_string() == advanced.state_string());
    CHECK(from_moved.generator().state_string() != resumed.generator().state_string());
    fs::remove_all(dir + "-moved");
    fs::remove_all(dir);
  }
}
