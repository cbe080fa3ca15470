// Tensor parallelism under MPI (engine/nn/tensor_parallel.h, comm/tensor_parallel.h; ctest runs it at
// 2 and 4 ranks, every rank in one group): each model's split forward, loss and gradients against
// the unsplit model's on the same weights and batch (within 1e-6, f32: the row-parallel sums add
// the partial products in another order), a second step after SGD on both, and what is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "comm/mpi_communicator.h"
#include "comm/tensor_parallel.h"
#include "engine/core/autograd.h"
#include "engine/data/loader.h"
#include "engine/nn/model_registry.h"
#include "engine/optim/optim.h"
#include "models/gpt/gpt.h"
#include "models/smallcnn/smallcnn.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::comm;

namespace {

struct SplitCase {
  std::string name;
  std::function<std::shared_ptr<Module>()> make;  // the same weights on every call
  Batch batch;
  bool fused = false;
};

// The unsplit model's gradients cut as the split model cuts its weights: a copy whose weights are
// the gradients, split with the model's own split.
NamedTensors gradients_as_split(const SplitCase& c, const Module& plain,
                                const std::shared_ptr<TensorParallelGroup>& g) {
  auto holder = c.make();
  NamedTensors state = plain.state_dict();
  for (auto& [name, tensor] : state)
    for (const auto& [n, p] : plain.named_parameters())
      if (n == name) tensor = p.grad();
  holder->load_state_dict(state);
  holder->split_tensor_parallel(g);
  return holder->named_parameters();
}

void check_split(Communicator& world, const SplitCase& c) {
  INFO(c.name << " at " << world.size() << " tensor-parallel ranks" << (c.fused ? ", fused" : ""));
  TensorParallel tp(world);
  auto plain = c.make();
  auto split = c.make();
  plain->set_fused(c.fused);
  split->set_fused(c.fused);
  split->split_tensor_parallel(tp.group());
  CHECK(split->num_parameters() < plain->num_parameters());
  SgdOptions options;
  options.lr = 0.05;
  options.momentum = 0.9;
  SGD plain_sgd(plain->named_parameters(), options), split_sgd(split->named_parameters(), options);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    // The first step on the same weights: within 1e-6. The second starts from weights that the
    // first step's rounding already moved apart (the update carries it): within 1e-5.
    const double tolerance = step == 0 ? 1e-6 : 1e-5;
    plain->zero_grad(true);
    split->zero_grad(true);
    const Tensor y_plain = plain->forward(c.batch.inputs), y_split = split->forward(c.batch.inputs);
    CHECK(test::relative_l2_difference(y_split, y_plain) <= tolerance);
    const Tensor loss_plain = cross_entropy(y_plain, c.batch.labels.view({-1}));
    const Tensor loss_split = cross_entropy(y_split, c.batch.labels.view({-1}));
    CHECK(loss_split.item() == Approx(loss_plain.item()).epsilon(tolerance));
    loss_plain.backward();
    loss_split.backward();
    const std::vector<TensorParallelCall> calls = tp.take_calls();
    CHECK(!calls.empty());
    for (const TensorParallelCall& call : calls) CHECK(call.bytes > 0);
    const NamedTensors expected = gradients_as_split(c, *plain, tp.group());
    const NamedTensors mine = split->named_parameters();
    REQUIRE(expected.size() == mine.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      INFO(mine[i].first);
      REQUIRE(mine[i].first == expected[i].first);
      REQUIRE(mine[i].second.grad().defined());
      CHECK(test::relative_l2_difference(mine[i].second.grad(), expected[i].second) <= tolerance);
    }
    plain_sgd.step();
    split_sgd.step();
  }
}

Batch random_images(std::uint64_t seed, const Shape& shape, Backend& be) {
  Generator gen(seed);
  Batch b;
  b.inputs = Tensor::uniform(shape, -1, 1, gen, DType::f32, be);
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < shape[0]; ++i) labels.push_back(static_cast<std::int64_t>(gen.below(10)));
  b.labels = Tensor::from_vector(labels, {shape[0]}, be);
  return b;
}

GPTConfig small_gpt(std::int64_t n_head) {
  GPTConfig c;
  c.vocab = 11;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = n_head;
  c.n_embd = 4 * n_head;
  return c;
}

SplitCase gpt_case(Backend& be, bool fused) {
  auto make = [&be] {
    Generator gen(6);
    return std::shared_ptr<Module>(std::make_shared<GPT>(small_gpt(12), InitOptions{&gen, DType::f32, &be}));
  };
  Generator gen(18);
  std::vector<std::int64_t> tokens, next;
  for (int i = 0; i < 3 * 8; ++i) tokens.push_back(static_cast<std::int64_t>(gen.below(11)));
  for (int i = 0; i < 3 * 8; ++i) next.push_back(static_cast<std::int64_t>(gen.below(11)));
  Batch b;
  b.inputs = Tensor::from_vector(tokens, {3, 8}, be);
  b.labels = Tensor::from_vector(next, {3, 8}, be);
  return {std::string("GPT (") + be.name() + ")", make, b, fused};
}

}  // namespace

TEST_CASE("tensor parallel: the GPT's attention heads and MLP split, against the unsplit model", "[tensor_parallel]") {
  auto world = MpiCommunicator::world();
  check_split(*world, gpt_case(get_backend("reference"), false));
  check_split(*world, gpt_case(get_backend("reference"), true));
  check_split(*world, gpt_case(default_backend(), true));
}

TEST_CASE("tensor parallel: SmallCNN's classifier (fc1 by columns, fc2 by rows)", "[tensor_parallel]") {
  auto world = MpiCommunicator::world();
  Backend& be = get_backend("reference");
  auto make = [&be] {
    Generator gen(5);
    return std::shared_ptr<Module>(std::make_shared<SmallCNN>(InitOptions{&gen, DType::f32, &be}));
  };
  if (256 % world->size() != 0) {  // 3 ranks: fc1's 256 hidden units do not divide, and it says so
    TensorParallel tp(*world);
    REQUIRE_THROWS_WITH(make()->split_tensor_parallel(tp.group()),
                        Catch::Contains("fc1's 256 output features (256) do not divide over 3"));
    return;
  }
  check_split(*world, {"SmallCNN", make, random_images(17, {3, 3, 32, 32}, be), false});
  check_split(*world, {"SmallCNN", make, random_images(17, {3, 3, 32, 32}, be), true});
}

TEST_CASE("tensor parallel: the MLP (Megatron's pair: fc1 by columns, fc2 by rows)", "[tensor_parallel]") {
  auto world = MpiCommunicator::world();
  Backend& be = get_backend("reference");
  auto make = [&be] {
    Generator gen(4);
    return build_model(find_model("mlp"), InitOptions{&gen, DType::f32, &be}, ModelInput{{3, 4, 4}, 10},
                       {{"hidden", "12"}});
  };
  check_split(*world, {"MLP", make, random_images(21, {5, 3, 4, 4}, be), false});
}

TEST_CASE("tensor parallel: ResNet-8's head by rows of its whole input", "[tensor_parallel]") {
  auto world = MpiCommunicator::world();
  Backend& be = get_backend("reference");
  auto make = [&be] {
    Generator gen(8);
    return build_model(find_model("resnet"), InitOptions{&gen, DType::f32, &be}, ModelInput{{3, 8, 8}, 10},
                       {{"depth", "1"}, {"width", "6"}});  // a head of 24 features: 2, 3 or 4 ranks
  };
  check_split(*world, {"ResNet-8", make, random_images(19, {4, 3, 8, 8}, be), false});
}

TEST_CASE("tensor parallel: what is refused", "[tensor_parallel]") {
  auto world = MpiCommunicator::world();
  TensorParallel tp(*world);
  const int p = world->size();
  Backend& be = get_backend("reference");
  Generator gen(3);
  // Heads that do not divide over the ranks (5 heads at 2, 3 or 4 ranks).
  GPT odd(small_gpt(5), InitOptions{&gen, DType::f32, &be});
  REQUIRE_THROWS_WITH(odd.split_tensor_parallel(tp.group()),
                      Catch::Contains("n_head 5 does not divide over " + std::to_string(p) + " tensor-parallel ranks"));
  GPTConfig with_dropout = small_gpt(12);
  with_dropout.dropout = 0.1;
  GPT dropping(with_dropout, InitOptions{&gen, DType::f32, &be});
  REQUIRE_THROWS_WITH(dropping.split_tensor_parallel(tp.group()), Catch::Contains("needs dropout 0"));
  // A width that does not divide.
  Linear narrow(4, 2 * p + 1, InitOptions{&gen, DType::f32, &be});
  REQUIRE_THROWS_WITH(narrow.split(LinearSplit::columns, tp.group(), "fc"),
                      Catch::Contains("fc's " + std::to_string(2 * p + 1) + " output features (" +
                                      std::to_string(2 * p + 1) + ") do not divide over " + std::to_string(p)));
  Linear rows(2 * p + 1, 4, InitOptions{&gen, DType::f32, &be});
  REQUIRE_THROWS_WITH(rows.split(LinearSplit::rows, tp.group(), "proj"), Catch::Contains("proj's input features"));
  // A model without a split of its own.
  Sequential plain;
  plain.add(std::make_shared<Linear>(4, 4, InitOptions{&gen, DType::f32, &be}));
  REQUIRE_THROWS_WITH(plain.split_tensor_parallel(tp.group()), Catch::Contains("no tensor-parallel split"));
  // single_copy needs its data in a shared window (DDP's buckets): a split layer's sums cannot use it.
  REQUIRE_THROWS_WITH(TensorParallel(*world, Algorithm::single_copy),
                      Catch::Contains("allowed: ring, recursive_doubling"));
  // The MLP's hidden width not dividing (5 hidden units).
  auto mlp = build_model(find_model("mlp"), InitOptions{&gen, DType::f32, &be}, ModelInput{{4}, 10}, {{"hidden", "5"}});
  REQUIRE_THROWS_WITH(mlp->split_tensor_parallel(tp.group()), Catch::Contains("fc1's 5 output features"));
  // A layer split twice.
  Linear twice(4, 2 * p, InitOptions{&gen, DType::f32, &be});
  twice.split(LinearSplit::columns, tp.group(), "fc");
  REQUIRE_THROWS_WITH(twice.split(LinearSplit::columns, tp.group(), "fc"), Catch::Contains("already split"));
}

TEST_CASE("tensor parallel x data parallel: replicas of a split model average their gradients", "[tensor_parallel]") {
  auto world = MpiCommunicator::world();
  if (world->size() % 2 != 0) {  // an odd world makes no two replicas, and says so
    REQUIRE_THROWS_WITH(make_parallel_grid(*world, 2), Catch::Contains("do not make 2 data-parallel replicas"));
    return;
  }
  // Two replicas of a split over world / 2 ranks (2 ranks: two unsplit replicas, data parallelism alone).
  ParallelGrid grid = make_parallel_grid(*world, 2);
  REQUIRE(grid.replicas == 2);
  TensorParallel tp(*grid.model);
  Backend& be = get_backend("reference");
  GPTConfig config = small_gpt(12);
  auto make = [&be, &config] {
    Generator gen(6);
    return std::make_shared<GPT>(config, InitOptions{&gen, DType::f32, &be});
  };
  auto split = make(), plain = make();
  split->split_tensor_parallel(tp.group());
  // Replica d's batch is rows [2d, 2d + 2) of the single process's batch of 4 windows.
  Generator gen(31);
  std::vector<std::int64_t> tokens, next;
  for (int i = 0; i < 4 * 8; ++i) tokens.push_back(static_cast<std::int64_t>(gen.below(11)));
  for (int i = 0; i < 4 * 8; ++i) next.push_back(static_cast<std::int64_t>(gen.below(11)));
  const Tensor all_tokens = Tensor::from_vector(tokens, {4, 8}, be), all_next = Tensor::from_vector(next, {4, 8}, be);
  const std::int64_t d = grid.data->rank();
  const Tensor my_tokens = all_tokens.narrow(0, 2 * d, 2).contiguous(),
               my_next = all_next.narrow(0, 2 * d, 2).contiguous();
  const Tensor loss_split = cross_entropy(split->forward(my_tokens), my_next.view({-1}));
  loss_split.backward();
  average_gradients(*grid.data, split->named_parameters());
  const Tensor loss_plain = cross_entropy(plain->forward(all_tokens), all_next.view({-1}));
  loss_plain.backward();
  double mean_loss = loss_split.item();
  grid.data->allreduce_native(&mean_loss, 1, DType::f64, ReduceOp::average);
  CHECK(mean_loss == Approx(loss_plain.item()).epsilon(1e-6));
  const SplitCase as_case{"GPT", [&make] { return std::shared_ptr<Module>(make()); }, Batch{}, false};
  const NamedTensors expected = gradients_as_split(as_case, *plain, tp.group());
  const NamedTensors mine = split->named_parameters();
  REQUIRE(expected.size() == mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    INFO(mine[i].first);
    CHECK(test::relative_l2_difference(mine[i].second.grad(), expected[i].second) <= 1e-6);
  }
}
