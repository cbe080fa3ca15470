// Device graphs (cuda_graph): the training step captured once and replayed must train exactly as
// the eager step does. The cuda backend's CUDA graphs run only on a GPU, so the contract is also
// checked here on the CPU, through "emulated-device" (tests/emulated_device.h), which records
// between begin_capture and end_capture and replays the recorded calls on the same pointers. A trainer that forgot to
// stage an input, kept a stale buffer, or let eager work reuse a graph's memory trains differently from eager here, or
// trips AddressSanitizer.
//
// TRAINLAB_DEVICE_TEST_BACKEND=cuda runs the same equivalence on the cuda backend (the GPU tests).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/graph_pool.h"
#include "backends/registry.h"
#include "bench/measure/throughput.h"
#include "engine/train/trainer.h"
#include "tests/emulated_device.h"

using namespace trainlab;
using trainlab::bench::measure_throughput;
using trainlab::bench::ThroughputConfig;
using trainlab::bench::ThroughputResult;

namespace {

// The backend the graph tests run on: the emulated device, or TRAINLAB_DEVICE_TEST_BACKEND.
std::string graph_backend() {
  const std::string emulated = testing::emulated_device();
  const char* chosen = std::getenv("TRAINLAB_DEVICE_TEST_BACKEND");
  return chosen != nullptr && *chosen != '\0' ? chosen : emulated;
}

TrainConfig graph_config() {
  TrainConfig c;
  c.execution.backend = graph_backend();
  c.steps = 7;
  c.batch = 8;
  c.data.train_samples = 48;  // six batches an epoch: the run crosses an epoch boundary
  c.data.eval_samples = 16;
  c.data.eval_batch = 16;
  c.reporting.warmup = 0;
  c.reporting.log_every = 1000;
  c.reporting.eval_at_end = false;
  return c;
}

// The cuda backend is deterministic (deterministic cuDNN algorithms, one stream), but is given a
// hair of room; the recorder replays the reference's very calls, so it must match bit for bit.
double tolerance(const TrainConfig& c) { return c.execution.backend == "emulated-device" ? 0.0 : 1e-6; }

void check_graph_equals_eager(TrainConfig c) {
  c.execution.cuda_graph = false;
  Trainer eager(c);
  const TrainResult expected = eager.train(nullptr);
  c.execution.cuda_graph = true;
  Trainer graphed(c);
  const std::int64_t replays_before = graphed.backend().counters()["replays"];
  const TrainResult got = graphed.train(nullptr);
  if (c.execution.backend == "emulated-device") {
    // Two eager steps, then (steps - 2) * accumulate forward and backward replays each.
    CHECK(graphed.backend().counters()["replays"] - replays_before == 2 * (c.steps - 2) * c.execution.accumulate);
  }
  REQUIRE(got.losses.size() == expected.losses.size());
  const double tol = tolerance(c);
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(got.losses[i] - expected.losses[i]) <= tol * std::abs(expected.losses[i]));
  }
  const auto a = eager.model().named_parameters(), b = graphed.model().named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    const auto x = a[i].second.to(DType::f64).to_vector<double>(), y = b[i].second.to(DType::f64).to_vector<double>();
    REQUIRE(x.size() == y.size());
    double worst = 0;
    for (std::size_t j = 0; j < x.size(); ++j) worst = std::max(worst, std::abs(x[j] - y[j]) / (std::abs(x[j]) + 1e-3));
    CHECK(worst <= tol);
  }
}

}  // namespace

TEST_CASE("graphs: the pool keeps a capture's memory from eager work", "[graph]") {
  GraphPool pool;
  int eager_block = 0, graph_block = 0, freed_during = 0;
  CHECK_FALSE(pool.give_back(&eager_block, 64));  // an ordinary free goes to the allocator
  pool.begin_capture();
  CHECK(pool.take(64) == nullptr);
  pool.adopt(&graph_block);
  CHECK(pool.give_back(&freed_during, 64));  // freed while capturing: the graph may read it
  CHECK(pool.take(64) == &freed_during);     // a capture may reuse it
  pool.end_capture();
  CHECK(pool.give_back(&graph_block, 128));  // a graph's block stays with the graphs after the capture
  CHECK_FALSE(pool.give_back(&eager_block, 64));
  CHECK(pool.blocks() == 2);
}

TEST_CASE("graphs: replaying the captured step trains exactly as the eager step", "[graph]") {
  TrainConfig c = graph_config();
  SECTION("f32, SGD with momentum") { check_graph_equals_eager(c); }
  SECTION("bf16 autocast, channels_last, fused") {
    c.execution.dtype = DType::bf16;
    c.execution.layout = MemoryFormat::channels_last;
    c.execution.fuse = true;
    check_graph_equals_eager(c);
  }
  SECTION("gradient accumulation, AdamW, warm-up and cosine schedule") {
    c.execution.accumulate = 2;
    c.optimizer.kind = OptimizerKind::adamw;
    c.optimizer.lr = 1e-3;
    c.optimizer.schedule = ScheduleKind::warmup_cosine;
    c.optimizer.warmup_steps = 2;
    check_graph_equals_eager(c);
  }
}

TEST_CASE("graphs: a capture the step cannot support is refused by name", "[graph]") {
  TrainConfig c = graph_config();
  c.execution.cuda_graph = true;
  SECTION("a backend without graphs") {
    c.execution.backend = "reference";
    CHECK_THROWS_WITH(Trainer(c), Catch::Contains("backend 'reference' cannot"));
  }
  SECTION("f16 and its host-side loss scaler") {
    c.execution.dtype = DType::f16;
    if (get_backend(c.execution.backend).supports(DType::f16)) {
      CHECK_THROWS_WITH(Trainer(c), Catch::Contains("cuda_graph with dtype f16"));
    }
  }
}

TEST_CASE("graphs: work that waits for the device fails the capture, and the backend recovers", "[graph]") {
  Backend& backend = get_backend(graph_backend());
  GraphCapture* graphs = backend.graph_capture();
  REQUIRE(graphs != nullptr);
  Tensor x = Tensor::full({}, 2.0, DType::f32, backend);
  graphs->begin_capture();
  CHECK_THROWS_WITH(x.item(), Catch::Contains("while"));
  graphs->abort_capture();
  CHECK_FALSE(graphs->capturing());
  CHECK(x.item() == 2.0);
}

TEST_CASE("pin_memory: page-locked batches on the copy stream train exactly as pageable copies", "[graph]") {
  TrainConfig c = graph_config();
  c.data.workers = 2;  // with workers the next batch's copy is started ahead, while the step runs
  c.reporting.eval_at_end = true;
  const TrainResult expected = Trainer(c).train(nullptr);
  c.execution.pin_memory = true;
  const TrainResult pinned = Trainer(c).train(nullptr);
  c.execution.cuda_graph = true;  // the graphs' input is staged from the uploaded batch
  const TrainResult both = Trainer(c).train(nullptr);
  REQUIRE(pinned.losses.size() == expected.losses.size());
  for (std::size_t i = 0; i < expected.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(pinned.losses[i] - expected.losses[i]) <= tolerance(c) * std::abs(expected.losses[i]));
    CHECK(std::abs(both.losses[i] - expected.losses[i]) <= tolerance(c) * std::abs(expected.losses[i]));
  }
  CHECK(pinned.final_eval.accuracy == expected.final_eval.accuracy);

  c.execution.backend = "reference";
  c.execution.cuda_graph = false;
  CHECK_THROWS_WITH(Trainer(c), Catch::Contains("pin_memory needs a CUDA backend"));
}

TEST_CASE("graphs: trainlab throughput --cuda-graph replays every measured step", "[graph]") {
  ThroughputConfig config;
  config.backend = graph_backend();
  config.batch = 4;
  config.seconds = 0.01;
  config.warmup = 2;
  config.min_steps = 3;
  config.cuda_graph = true;
  Backend& backend = get_backend(config.backend);
  const std::int64_t before = backend.counters()["replays"];
  const ThroughputResult result = measure_throughput(config);
  CHECK(result.steps >= 3);
  if (config.backend == testing::emulated_device())
    CHECK(backend.counters()["replays"] - before == 2 * (result.steps + 1));  // + the last warm-up step
  config.warmup = 1;
  CHECK_THROWS_WITH(measure_throughput(config), Catch::Contains("warm-up of at least 2"));
}
