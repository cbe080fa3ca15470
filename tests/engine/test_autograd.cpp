// Autograd mechanics: accumulation across backward calls, zeroing, no_grad, the freed graph,
// gradient-ready hooks (fired once, when final, in reverse order), and error cases.
#include <set>

#include "engine/nn/module.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

TEST_CASE("autograd: gradients accumulate until zeroed", "[autograd]") {
  Tensor w = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3}, ref());
  w.set_requires_grad(true);
  const Tensor x = Tensor::from_vector(std::vector<double>{4, 5, 6}, {3}, ref());
  sum(mul(w, x)).backward();
  CHECK(values(w.grad()) == std::vector<double>{4, 5, 6});
  sum(mul(w, x)).backward();
  CHECK(values(w.grad()) == std::vector<double>{8, 10, 12});
  const Tensor grad_buffer = w.grad();
  w.zero_grad();
  CHECK(values(w.grad()) == std::vector<double>{0, 0, 0});
  CHECK(w.grad().same_view(grad_buffer));  // zeroed in place: the buffer is reused
  w.zero_grad(true);
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(x.grad().defined());  // x does not require grad
}

TEST_CASE("autograd: no_grad records nothing", "[autograd]") {
  Tensor w = Tensor::full({2}, 1.0, DType::f64, ref());
  w.set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard guard;
    CHECK_FALSE(GradMode::enabled());
    y = mul_scalar(w, 3.0);
  }
  CHECK(GradMode::enabled());
  CHECK_FALSE(y.requires_grad());
  CHECK(y.is_leaf());
  REQUIRE_THROWS_CONTAINING(sum(y).backward(), "does not require grad");
  // detach() cuts the graph as well.
  CHECK_FALSE(mul_scalar(w, 2.0).detach().requires_grad());
}

TEST_CASE("autograd: the graph is freed after backward", "[autograd]") {
  Tensor w = Tensor::full({2}, 1.0, DType::f64, ref());
  w.set_requires_grad(true);
  const Tensor loss = sum(mul(w, w));
  loss.backward();
  REQUIRE_THROWS_CONTAINING(loss.backward(), "already freed");
}

TEST_CASE("autograd: errors on misuse", "[autograd]") {
  Tensor w = Tensor::full({2, 2}, 1.0, DType::f64, ref());
  w.set_requires_grad(true);
  const Tensor y = mul_scalar(w, 2.0);
  REQUIRE_THROWS_CONTAINING(y.backward(), "one-element output", "[2, 2]");
  y.backward(Tensor::full({2, 2}, 1.0, DType::f64, ref()));
  CHECK(values(w.grad()) == std::vector<double>{2, 2, 2, 2});
  REQUIRE_THROWS_CONTAINING(w.fill_(0.0), "requires grad", "NoGradGuard");
  Tensor nonleaf = mul_scalar(w, 1.0);
  REQUIRE_THROWS_CONTAINING(nonleaf.set_requires_grad(false), "only leaves");
  Tensor labels = Tensor::zeros({2}, DType::i64, ref());
  REQUIRE_THROWS_CONTAINING(labels.set_requires_grad(true), "i64");
  REQUIRE_THROWS_CONTAINING(nonleaf.add_grad_ready_hook([](const Tensor&) {}), "only leaves");
}

TEST_CASE("autograd: a gradient-ready hook fires once, when the gradient is final", "[autograd][hooks]") {
  Tensor w = Tensor::from_vector(std::vector<double>{1, 2}, {2}, ref());
  w.set_requires_grad(true);
  const Tensor a = Tensor::from_vector(std::vector<double>{3, 4}, {2}, ref());
  const Tensor b = Tensor::from_vector(std::vector<double>{5, 6}, {2}, ref());
  int calls = 0;
  std::vector<double> seen;
  w.add_grad_ready_hook([&](const Tensor& param) {
    ++calls;
    seen = values(param.grad());
  });
  // w feeds two branches that meet only at the loss: the hook must wait for both.
  sum(add(mul(w, a), mul(mul(w, b), w))).backward();
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{3 + 2 * 5 * 1, 4 + 2 * 6 * 2});
  sum(mul(w, a)).backward();
  CHECK(calls == 2);                                           // once per backward
  CHECK(seen == std::vector<double>{3 + 10 + 3, 4 + 24 + 4});  // accumulated across backward calls
}

TEST_CASE("autograd: SmallCNN hooks fire in reverse order while backward is still running", "[autograd][hooks]") {
  Generator gen(1);
  SmallCNN model(InitOptions{&gen, DType::f32, &ref()});
  const Tensor x = Tensor::normal({2, 3, 32, 32}, gen, DType::f32, ref());
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{3, 7}, {2}, ref());
  std::vector<std::string> order;
  std::vector<bool> conv1_grad_existed;
  Tensor conv1_weight = model.conv1->weight;
  for (auto& [name, param] : model.named_parameters()) {
    Tensor p = param;
    const std::string n = name;
    p.add_grad_ready_hook([&, n](const Tensor&) {
      order.push_back(n);
      conv1_grad_existed.push_back(conv1_weight.grad().defined());
    });
  }
  cross_entropy(model.forward(x), y).backward();
  REQUIRE(order.size() == 8);
  // The head's gradients are final long before the first convolution's are computed.
  CHECK(order.front().rfind("fc2.", 0) == 0);
  CHECK(order.back().rfind("conv1.", 0) == 0);
  CHECK_FALSE(conv1_grad_existed.front());
  CHECK(std::set<std::string>(order.begin(), order.end()).size() == 8);  // each exactly once
}
