// Pipeline parallelism under MPI (comm/pipeline.h; ctest runs it at 2 and 4 ranks, a stage per
// rank): the schedules' orders, the cuts and their errors, and a pipelined step against the
// unpipelined step with as many micro-steps (StepRunner, accumulate = m), for SmallCNN and ResNet-8
// (bit for bit) and a GPT whose tied weight two stages share (within 1e-6).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "comm/mpi_communicator.h"
#include "comm/pipeline.h"
#include "engine/nn/model_registry.h"
#include "engine/train/step.h"
#include "models/gpt/gpt.h"
#include "models/smallcnn/smallcnn.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::comm;

namespace {

struct Models {
  std::function<std::shared_ptr<Module>()> make;
  std::function<std::function<Batch()>()> batches;  // a fresh source of the same batches
  double tolerance;                                 // 0: bit for bit
};

// Two steps of the pipeline and of the unpipelined step on the same batches from the same weights:
// this stage's parameters and every stage's loss compared.
void check_against_unpipelined(Communicator& world, const Models& models, PipelineSchedule schedule, std::int64_t micro,
                               DType dtype = DType::f32) {
  INFO(pipeline_schedule_name(schedule) << ", " << micro << " micro-batches, " << world.size() << " stages, "
                                        << dtype_name(dtype));
  auto piped = models.make();
  auto plain = models.make();
  PipelineOptions po;
  po.schedule = schedule;
  po.micro_batches = micro;
  po.dtype = dtype;
  PipelineStage stage(world, *piped, po);
  INFO(stage.describe());
  SgdOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  SGD piped_sgd(stage.parameters(), sgd);
  SGD plain_sgd(plain->named_parameters(), sgd);
  StepOptions options;
  options.accumulate = micro;
  options.dtype = dtype;
  StepRunner runner(get_backend("reference"), *plain, plain_sgd, options);
  auto piped_batches = models.batches(), plain_batches = models.batches();
  for (int step = 0; step < 2; ++step) {
    const PipelineStepResult r = stage.step(piped_batches, piped_sgd);
    const StepResult expected = runner.step(plain_batches);
    if (models.tolerance == 0) {
      CHECK(r.loss == expected.loss);
    } else {
      CHECK(r.loss == Approx(expected.loss).epsilon(models.tolerance));
    }
    CHECK(r.peak_in_flight <= (schedule == PipelineSchedule::gpipe ? micro : world.size() - world.rank()));
    CHECK(r.events.size() == static_cast<std::size_t>(2 * micro));
  }
  const NamedTensors mine = stage.parameters();
  REQUIRE(!mine.empty());
  const NamedTensors all = plain->named_parameters();
  for (const auto& [name, tensor] : mine) {
    INFO(name);
    for (const auto& [n, t] : all) {
      if (n != name) continue;
      CHECK(test::relative_l2_difference(tensor, t) <= models.tolerance);
    }
  }
}

// A fresh source of the same random image batches: inputs `shape` ([B, C, H, W]), B labels below 10.
std::function<std::function<Batch()>()> image_batches(std::uint64_t seed, Shape shape) {
  return [seed, shape] {
    auto gen = std::make_shared<Generator>(seed);
    return std::function<Batch()>([gen, shape] {
      Batch b;
      b.inputs = Tensor::uniform(shape, -1, 1, *gen, DType::f32, get_backend("reference"));
      std::vector<std::int64_t> labels;
      for (std::int64_t i = 0; i < shape[0]; ++i) labels.push_back(static_cast<std::int64_t>(gen->below(10)));
      b.labels = Tensor::from_vector(labels, {shape[0]}, get_backend("reference"));
      return b;
    });
  };
}

Models smallcnn_models() {
  auto make = [] {
    Generator gen(5);
    return std::shared_ptr<Module>(
        std::make_shared<SmallCNN>(InitOptions{&gen, DType::f32, &get_backend("reference")}));
  };
  return {make, image_batches(17, {3, 3, 32, 32}), 0.0};
}

// ResNet-8 (depth 1: a stem, three blocks, the head) on 8x8 images: batch norm's statistics per
// micro-batch, as the unpipelined micro-steps take them, so bit for bit too.
Models resnet_models() {
  auto make = [] {
    Generator gen(8);
    return build_model(find_model("resnet"), InitOptions{&gen, DType::f32, &get_backend("reference")},
                       ModelInput{{3, 8, 8}, 10}, {{"depth", "1"}, {"width", "4"}});
  };
  return {make, image_batches(19, {4, 3, 8, 8}), 0.0};
}

Models gpt_models() {
  auto make = [] {
    Generator gen(6);
    GPTConfig c;
    c.vocab = 11;
    c.block_size = 8;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 16;
    return std::shared_ptr<Module>(std::make_shared<GPT>(c, InitOptions{&gen, DType::f32, &get_backend("reference")}));
  };
  auto batches = [] {
    auto gen = std::make_shared<Generator>(18);
    return std::function<Batch()>([gen] {
      std::vector<std::int64_t> tokens, next;
      for (int i = 0; i < 2 * 8; ++i) tokens.push_back(static_cast<std::int64_t>(gen->below(11)));
      for (int i = 0; i < 2 * 8; ++i) next.push_back(static_cast<std::int64_t>(gen->below(11)));
      Batch b;
      b.inputs = Tensor::from_vector(tokens, {2, 8}, get_backend("reference"));
      b.labels = Tensor::from_vector(next, {2, 8}, get_backend("reference"));
      return b;
    });
  };
  return {make, batches, 1e-6};
}

}  // namespace

TEST_CASE("pipeline: the schedules' orders and the bound", "[pipeline]") {
  // GPipe: every forward, then every backward. 1F1B at stage 0 of 4 with 6 micro-batches: 3 to
  // fill the pipe, then one forward and one backward, then the drain.
  const auto gpipe = pipeline_order(PipelineSchedule::gpipe, 1, 4, 3);
  CHECK(gpipe == std::vector<PipelineOp>{{'F', 0}, {'F', 1}, {'F', 2}, {'B', 0}, {'B', 1}, {'B', 2}});
  const auto one = pipeline_order(PipelineSchedule::one_f_one_b, 0, 4, 6);
  CHECK(one == std::vector<PipelineOp>{{'F', 0},
                                       {'F', 1},
                                       {'F', 2},
                                       {'F', 3},
                                       {'B', 0},
                                       {'F', 4},
                                       {'B', 1},
                                       {'F', 5},
                                       {'B', 2},
                                       {'B', 3},
                                       {'B', 4},
                                       {'B', 5}});
  const auto last = pipeline_order(PipelineSchedule::one_f_one_b, 3, 4, 2);
  CHECK(last == std::vector<PipelineOp>{{'F', 0}, {'B', 0}, {'F', 1}, {'B', 1}});
  // Fewer micro-batches than the pipe is deep: all forwards, then all backwards.
  CHECK(pipeline_order(PipelineSchedule::one_f_one_b, 0, 4, 2) ==
        std::vector<PipelineOp>{{'F', 0}, {'F', 1}, {'B', 0}, {'B', 1}});
  CHECK(pipeline_bound(4, 1) == Approx(0.25));
  CHECK(pipeline_bound(4, 16) == Approx(16.0 / 19.0));
}

TEST_CASE("pipeline: cuts, and what is refused", "[pipeline]") {
  CHECK(even_cut(6, 4) == std::vector<int>{0, 2, 4, 5});
  CHECK(even_cut(4, 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(parse_cut("0,1,3", 4, 3) == std::vector<int>{0, 1, 3});
  REQUIRE_THROWS_WITH(even_cut(3, 4), Catch::Contains("4 stages need at least as many parts"));
  REQUIRE_THROWS_WITH(parse_cut("0,2", 4, 3), Catch::Contains("gives 2 stages, the job has 3"));
  REQUIRE_THROWS_WITH(parse_cut("1,2,3", 4, 3), Catch::Contains("must start at part 0"));
  REQUIRE_THROWS_WITH(parse_cut("0,2,2", 4, 3), Catch::Contains("2 is out of order or range"));
  REQUIRE_THROWS_WITH(parse_cut("0,x,3", 4, 3), Catch::Contains("'x' is not a part index"));
  REQUIRE_THROWS_WITH(parse_pipeline_schedule("zigzag"), Catch::Contains("allowed: gpipe, 1f1b"));
  // By time: the slowest stage as fast as it can be.
  CHECK(balanced_cut({1, 1, 1, 1}, 2) == std::vector<int>{0, 2});
  CHECK(balanced_cut({5, 1, 1, 1, 1, 1}, 2) == std::vector<int>{0, 1});
  CHECK(balanced_cut({1, 2, 3, 4}, 2) == std::vector<int>{0, 3});
  CHECK(balanced_cut({1, 1, 1, 1, 10}, 3) == std::vector<int>{0, 2, 4});
  CHECK(balanced_cut({3, 1, 1}, 3) == std::vector<int>{0, 1, 2});
  REQUIRE_THROWS_WITH(balanced_cut({1, 1}, 3), Catch::Contains("3 stages need at least as many parts"));
  // Each part timed on a batch: SmallCNN's four, every one measured.
  const Models cnn = smallcnn_models();
  const auto model = cnn.make();
  const std::vector<double> seconds = time_parts(*model, cnn.batches()(), 2);
  REQUIRE(seconds.size() == 4);
  for (double t : seconds) CHECK(t > 0);
  for (const auto& [name, tensor] : model->named_parameters()) CHECK(!tensor.grad().defined());
}

TEST_CASE("pipeline: SmallCNN, a stage per rank, equals the unpipelined step bit for bit", "[pipeline]") {
  auto world = MpiCommunicator::world();
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (std::int64_t micro : {1, 4}) check_against_unpipelined(*world, smallcnn_models(), schedule, micro);
}

TEST_CASE("pipeline: ResNet-8 with batch norm, bit for bit", "[pipeline]") {
  auto world = MpiCommunicator::world();
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    check_against_unpipelined(*world, resnet_models(), schedule, 3);
}

TEST_CASE("pipeline: a GPT whose first and last stages share the tied embedding", "[pipeline]") {
  auto world = MpiCommunicator::world();
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (std::int64_t micro : {1, 3}) check_against_unpipelined(*world, gpt_models(), schedule, micro);
}

TEST_CASE("pipeline x data parallel: the world in pipelines whose stages average over the replicas", "[pipeline]") {
  auto world = MpiCommunicator::world();
  const int n = world->size();
  REQUIRE_THROWS_WITH(make_parallel_grid(*world, n + 1), Catch::Contains("do not make " + std::to_string(n + 1)));
  if (n % 2 != 0) {  // an odd world makes no two pipelines, and says so
    REQUIRE_THROWS_WITH(make_parallel_grid(*world, 2), Catch::Contains("do not make 2 data-parallel replicas"));
    return;
  }
  // Two pipelines of n / 2 stages (2 ranks: two one-stage pipelines, data parallelism alone).
  ParallelGrid grid = make_parallel_grid(*world, 2);
  REQUIRE(grid.model_ranks == n / 2);
  REQUIRE(grid.model->size() == n / 2);
  REQUIRE(grid.data->size() == 2);
  const std::int64_t micro = 3;
  const Models cnn = smallcnn_models();
  auto piped = cnn.make(), plain = cnn.make();
  PipelineOptions po;
  po.schedule = PipelineSchedule::one_f_one_b;
  po.micro_batches = micro;
  po.data_parallel = grid.data.get();
  PipelineStage stage(*grid.model, *piped, po);
  SgdOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  SGD piped_sgd(stage.parameters(), sgd), plain_sgd(plain->named_parameters(), sgd);
  StepOptions options;
  options.accumulate = micro * 2;  // every replica's micro-batches, replica 0's first
  StepRunner runner(get_backend("reference"), *plain, plain_sgd, options);
  // Replica d reads its own batches; the single process reads both replicas' in turn.
  const auto source = [](int replica) {
    return image_batches(40 + static_cast<std::uint64_t>(replica), {2, 3, 32, 32})();
  };
  auto mine = source(grid.data->rank());
  std::vector<std::function<Batch()>> replicas{source(0), source(1)};
  std::int64_t drawn = 0;
  auto both = [&] { return replicas[static_cast<std::size_t>((drawn++ / micro) % 2)](); };
  for (int step = 0; step < 2; ++step) {
    const PipelineStepResult r = stage.step(mine, piped_sgd);
    const StepResult expected = runner.step(both);
    CHECK(r.loss == Approx(expected.loss).epsilon(1e-6));
    CHECK(r.data_parallel_s > 0);
  }
  const NamedTensors all = plain->named_parameters();
  for (const auto& [name, tensor] : stage.parameters()) {
    INFO(name);
    for (const auto& [n2, t] : all)
      if (n2 == name) CHECK(test::relative_l2_difference(tensor, t) <= 1e-6);
  }
}

TEST_CASE("pipeline: the activations each stage holds, against the schedule and the memory estimator", "[pipeline]") {
  auto world = MpiCommunicator::world();
  const int p = world->size(), s = world->rank();
  const std::int64_t m = 4;
  const Models cnn = smallcnn_models();
  std::int64_t peaks[2] = {0, 0};
  double saved = 0;
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    INFO(pipeline_schedule_name(schedule));
    auto model = cnn.make();
    PipelineStage stage(*world, *model, {schedule, m, {}});
    SgdOptions sgd;
    sgd.lr = 0.01;
    SGD opt(stage.parameters(), sgd);
    auto batches = cnn.batches();
    PipelineStepResult r;
    for (int step = 0; step < 2; ++step) r = stage.step(batches, opt);  // the second: nothing left from the first
    // k - 1 micro-batches held while the k-th runs its forward at its peak (k: the in-flight bound).
    const std::int64_t k = schedule == PipelineSchedule::gpipe ? m : std::min<std::int64_t>(m, p - s);
    CHECK(r.activation_first_micro_bytes > 0);
    CHECK(r.activation_peak_bytes == (k - 1) * r.activation_first_micro_bytes + r.activation_first_forward_peak_bytes);
    peaks[schedule == PipelineSchedule::gpipe ? 0 : 1] = r.activation_peak_bytes;
    saved = static_cast<double>(r.activation_first_micro_bytes - r.activation_received_bytes);
  }
  CHECK(peaks[1] <= peaks[0]);  // 1F1B holds no more than GPipe at m >= p
  // One micro-batch's activations over every stage (less the received copies) are what the memory
  // estimator says the whole model's forward leaves saved.
  world->allreduce_native(&saved, 1, DType::f64, ReduceOp::sum);
  auto whole = cnn.make();
  const double estimate =
      estimate_chain(whole->memory_chain(ChainShape{3, DType::f32, false}, get_backend("reference"))).saved;
  CHECK(saved == Approx(estimate).epsilon(1e-9));
}

TEST_CASE("pipeline: bf16 (autocast over f32 masters) as the unpipelined step in bf16", "[pipeline]") {
  auto world = MpiCommunicator::world();
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    check_against_unpipelined(*world, smallcnn_models(), schedule, 3, DType::bf16);
    check_against_unpipelined(*world, gpt_models(), schedule, 3, DType::bf16);
  }
  // The autocast takes: one step in bf16 and one in f32 from the same weights and batches differ.
  double losses[2] = {0, 0};
  for (DType dtype : {DType::f32, DType::bf16}) {
    auto m = smallcnn_models().make();
    PipelineOptions o;
    o.micro_batches = 2;
    o.dtype = dtype;
    PipelineStage stage(*world, *m, o);
    SgdOptions sgd;
    SGD opt(stage.parameters(), sgd);
    losses[dtype == DType::bf16 ? 1 : 0] = stage.step(smallcnn_models().batches(), opt).loss;
  }
  CHECK(losses[0] != losses[1]);
  CHECK(losses[1] == Approx(losses[0]).epsilon(0.05));
  auto model = smallcnn_models().make();
  PipelineOptions po;
  po.dtype = DType::f16;
  REQUIRE_THROWS_WITH(PipelineStage(*world, *model, po),
                      Catch::Contains("dtype f16 is not supported (allowed: f32, bf16"));
}
