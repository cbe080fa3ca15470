// Optimisers against PyTorch's documented update rules, computed independently here in double;
// schedules at chosen points; state dicts that round-trip to identical continued training.
#include <cmath>
#include <numbers>

#include "engine/core/autocast.h"
#include "engine/core/autograd.h"
#include "engine/core/ops.h"
#include "engine/core/rng.h"
#include "engine/nn/module.h"
#include "engine/optim/optim.h"
#include "engine/optim/sharded_state.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

Tensor param(const std::vector<double>& v) {
  Tensor t = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}, ref());
  t.set_requires_grad(true);
  return t;
}

void set_grad(Tensor& p, const std::vector<double>& g) {
  p.set_grad(Tensor::from_vector(g, {static_cast<std::int64_t>(g.size())}, ref()));
}

std::vector<double> grad_at(int step) { return {0.5 - 0.1 * step, 0.25 + 0.05 * step, -1.0}; }

}  // namespace

TEST_CASE("SGD follows torch.optim.SGD's update rule", "[optim]") {
  struct Variant {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Variant v : {Variant{0.0, 0.0, 0.0, false}, Variant{0.9, 0.0, 0.0, false}, Variant{0.9, 0.0, 0.1, false},
                          Variant{0.9, 0.3, 0.1, false}, Variant{0.8, 0.0, 0.05, true}}) {
    INFO("momentum " << v.momentum << " dampening " << v.dampening << " wd " << v.weight_decay << " nesterov "
                     << v.nesterov);
    Tensor p = param({1.0, -2.0, 0.5});
    SGD opt({{"p", p}}, SgdOptions{0.1, v.momentum, v.dampening, v.weight_decay, v.nesterov});
    std::vector<double> w = {1.0, -2.0, 0.5}, buf(3, 0.0);
    for (int step = 0; step < 4; ++step) {
      const auto g = grad_at(step);
      set_grad(p, g);
      opt.step();
      for (std::size_t i = 0; i < 3; ++i) {
        double d = g[i] + v.weight_decay * w[i];
        if (v.momentum != 0) {
          buf[i] = step == 0 ? d : v.momentum * buf[i] + (1 - v.dampening) * d;
          d = v.nesterov ? d + v.momentum * buf[i] : buf[i];
        }
        w[i] -= 0.1 * d;
      }
      const auto got = values(p);
      for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == Approx(w[i]).epsilon(1e-14));
    }
  }
  // A hand-computed case: lr 0.1, momentum 0.9, weight decay 0.1, grads 0.5 then 0.5.
  Tensor p = param({1.0});
  SGD opt({{"p", p}}, SgdOptions{0.1, 0.9, 0.0, 0.1, false});
  set_grad(p, {0.5});
  opt.step();
  CHECK(values(p)[0] == Approx(0.94));
  set_grad(p, {0.5});
  opt.step();
  CHECK(values(p)[0] == Approx(0.8266));  // buf = 0.9 * 0.6 + (0.5 + 0.094)
}

TEST_CASE("SGD skips parameters without a gradient", "[optim]") {
  Tensor a = param({1.0}), b = param({2.0});
  SGD opt({{"a", a}, {"b", b}}, SgdOptions{0.5, 0.0, 0.0, 0.0, false});
  set_grad(a, {1.0});
  opt.step();
  CHECK(values(a)[0] == 0.5);
  CHECK(values(b)[0] == 2.0);
}

TEST_CASE("AdamW follows torch.optim.AdamW's update rule", "[optim]") {
  const AdamWOptions o{0.01, 0.9, 0.999, 1e-8, 0.1};
  Tensor p = param({1.0, -2.0, 0.5});
  AdamW opt({{"p", p}}, o);
  std::vector<double> w = {1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
  for (int step = 1; step <= 5; ++step) {
    const auto g = grad_at(step);
    set_grad(p, g);
    opt.step();
    for (std::size_t i = 0; i < 3; ++i) {
      w[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      const double bias1 = 1 - std::pow(o.beta1, step), bias2 = 1 - std::pow(o.beta2, step);
      w[i] -= o.lr / bias1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bias2) + o.eps);
    }
    const auto got = values(p);
    for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == Approx(w[i]).epsilon(1e-13));
  }
}

TEST_CASE("LR schedules", "[optim]") {
  Tensor p = param({1.0});
  SGD opt({{"p", p}}, SgdOptions{});
  ConstantLR constant(opt, 0.3);
  CHECK(opt.lr() == 0.3);
  constant.step();
  CHECK(opt.lr() == 0.3);

  WarmupCosineLR cosine(opt, 1.0, 4, 12, 0.1);
  CHECK(opt.lr() == 0.25);  // t = 0: the first warm-up step
  CHECK(cosine.lr_at(3) == 1.0);
  CHECK(cosine.lr_at(4) == Approx(1.0));
  CHECK(cosine.lr_at(8) == Approx(0.55));
  CHECK(cosine.lr_at(12) == Approx(0.1));
  CHECK(cosine.lr_at(50) == Approx(0.1));
  for (int i = 0; i < 8; ++i) cosine.step();
  CHECK(opt.lr() == Approx(0.55));
  CHECK(cosine.last_step() == 8);
  REQUIRE_THROWS_CONTAINING(WarmupCosineLR(opt, 1.0, 10, 10, 0.0), "must exceed warmup_steps");

  // Constant after a linear warm-up (Goyal et al.): lr/4, 2lr/4, 3lr/4, then lr held.
  ConstantLR warm(opt, 0.4, 4);
  CHECK(opt.lr() == Approx(0.1));
  CHECK(warm.lr_at(2) == Approx(0.3));
  CHECK(warm.lr_at(3) == Approx(0.4));
  CHECK(warm.lr_at(100) == Approx(0.4));
  // Its state carries the warm-up; a plain constant's does not, and neither loads into the other.
  const StateDict with = warm.state_dict(), plain = constant.state_dict();
  CHECK(with.integers.count("warmup_steps") == 1);
  CHECK(plain.integers.count("warmup_steps") == 0);
  ConstantLR other(opt, 0.3, 2);
  REQUIRE_THROWS_CONTAINING(other.load_state_dict(plain), "saved with warmup_steps 0");
  REQUIRE_THROWS_CONTAINING(ConstantLR(opt, 0.3, -1), "warmup_steps must be >= 0");
}

TEST_CASE("optimizer and schedule state dicts round-trip to identical training", "[optim]") {
  for (const std::string kind : {"sgd", "adamw"}) {
    INFO(kind);
    Tensor a = param({1.0, -2.0, 0.5}), b = param({0.0, 0.0, 0.0});
    auto make = [&](Tensor& t) -> std::unique_ptr<Optimizer> {
      if (kind == "sgd") return std::make_unique<SGD>(NamedTensors{{"p", t}}, SgdOptions{0.1, 0.9, 0.0, 0.01, false});
      return std::make_unique<AdamW>(NamedTensors{{"p", t}}, AdamWOptions{});
    };
    auto opt_a = make(a);
    WarmupCosineLR sched_a(*opt_a, 0.1, 2, 10, 0.0);
    for (int step = 0; step < 3; ++step) {
      set_grad(a, grad_at(step));
      opt_a->step();
      sched_a.step();
    }
    {
      NoGradGuard no_grad;
      b.copy_(a);
    }
    auto opt_b = make(b);
    WarmupCosineLR sched_b(*opt_b, 0.1, 2, 10, 0.0);
    opt_b->load_state_dict(opt_a->state_dict());
    sched_b.load_state_dict(sched_a.state_dict());
    CHECK(opt_b->lr() == opt_a->lr());
    for (int step = 3; step < 6; ++step) {
      set_grad(a, grad_at(step));
      set_grad(b, grad_at(step));
      opt_a->step();
      opt_b->step();
      sched_a.step();
      sched_b.step();
      CHECK(bitwise_equal(a, b));
    }
    // State from the other optimiser kind, or for other parameters, is refused.
    StateDict wrong = opt_a->state_dict();
    wrong.strings["optimizer"] = kind == "sgd" ? "adamw" : "sgd";
    REQUIRE_THROWS_CONTAINING(opt_b->load_state_dict(wrong), "optimizer state is for");
    StateDict shapes = opt_a->state_dict();
    for (auto& [key, t] : shapes.tensors) t = Tensor::zeros({7}, DType::f64, ref());
    REQUIRE_THROWS_CONTAINING(opt_b->load_state_dict(shapes), "[7]", "[3]");
  }
}

TEST_CASE("sharded optimiser state: pieces step like the whole, merge back to its state, cut again", "[optim]") {
  for (const std::string kind : {"sgd", "adamw"}) {
    INFO(kind);
    // Two parameters cut into three "ranks'" pieces, one parameter split across ranks.
    Tensor w = param({1.0, -2.0, 0.5, 0.25, 3.0}), v = param({0.1, -0.2});
    Tensor w2 = param({1.0, -2.0, 0.5, 0.25, 3.0}), v2 = param({0.1, -0.2});
    const NamedTensors whole_params = {{"w", w}, {"v", v}}, split_params = {{"w", w2}, {"v", v2}};
    const std::vector<std::vector<ParameterPiece>> pieces = {{{"w", 0, 2}}, {{"w", 2, 3}}, {{"v", 0, 2}}};
    auto make = [&](const NamedTensors& params) -> std::unique_ptr<Optimizer> {
      if (kind == "sgd") return std::make_unique<SGD>(params, SgdOptions{0.1, 0.9, 0.0, 0.01, false});
      return std::make_unique<AdamW>(params, AdamWOptions{});
    };
    auto whole = make(whole_params);
    std::vector<NamedTensors> views;
    std::vector<std::unique_ptr<Optimizer>> shards;
    for (const auto& rank_pieces : pieces) {
      views.push_back(piece_views(split_params, rank_pieces));
      shards.push_back(make(views.back()));
    }
    CHECK(views[1][0].first == "w[2:5]");
    const std::vector<double> gw = {0.5, -0.25, 1.0, 2.0, -1.5}, gv = {0.3, 0.7};
    for (int step = 0; step < 3; ++step) {
      set_grad(w, gw);
      set_grad(v, gv);
      whole->step();
      for (std::size_t r = 0; r < pieces.size(); ++r) {
        for (std::size_t i = 0; i < pieces[r].size(); ++i) {
          const ParameterPiece& piece = pieces[r][i];
          const std::vector<double>& g = piece.parameter == "w" ? gw : gv;
          set_grad(views[r][i].second,
                   std::vector<double>(g.begin() + piece.begin, g.begin() + piece.begin + piece.count));
        }
        shards[r]->step();
      }
    }
    // The pieces are views: the split parameters moved exactly as the whole ones.
    CHECK(bitwise_equal(w, w2));
    CHECK(bitwise_equal(v, v2));
    // Merged, the shards' states are the whole optimiser's, bit for bit.
    std::vector<StateDict> states;
    for (const auto& shard : shards) states.push_back(shard->state_dict());
    const StateDict merged = merge_optimizer_shards(states, pieces, whole_params);
    const StateDict expected = whole->state_dict();
    CHECK(merged.integers == expected.integers);
    CHECK(merged.strings == expected.strings);
    CHECK(merged.numbers == expected.numbers);
    REQUIRE(merged.tensors.size() == expected.tensors.size());
    for (const auto& [key, tensor] : expected.tensors) CHECK(bitwise_equal(merged.tensors.at(key), tensor));
    // And cut again, each rank's state loads into its shard optimiser.
    for (std::size_t r = 0; r < pieces.size(); ++r) {
      const StateDict cut = shard_optimizer_state(expected, whole_params, pieces[r]);
      CHECK(cut.tensors.size() == states[r].tensors.size());
      for (const auto& [key, tensor] : states[r].tensors) CHECK(bitwise_equal(cut.tensors.at(key), tensor));
      shards[r]->load_state_dict(cut);
    }
    // A moment of the right element count and the wrong shape (issue 30 #18: [4096,256] for
    // [256,4096]; here [1,5] for [5]) is refused when cut, as an unsharded optimiser refuses it.
    {
      StateDict transposed = expected;
      auto& [key, tensor] = *transposed.tensors.begin();
      const Shape shape = tensor.shape();
      tensor = tensor.contiguous().reshape(Shape({1, tensor.numel()}));
      const std::string wanted = shape_str(shape), name = key;
      REQUIRE_THROWS_CONTAINING(shard_optimizer_state(transposed, whole_params, pieces[0]), name.c_str(), "parameter",
                                wanted.c_str());
    }
    // Through bytes (how shards travel between ranks): everything exact, doubles too.
    StateDict odd = states[0];
    odd.numbers["third"] = 1.0 / 3.0;
    const std::vector<unsigned char> bytes = encode_state_dict(odd);
    const StateDict back = decode_state_dict(bytes.data(), bytes.size(), "test", ref());
    CHECK(back.numbers == odd.numbers);
    CHECK(back.integers == odd.integers);
    CHECK(back.strings == odd.strings);
    for (const auto& [key, tensor] : odd.tensors) CHECK(bitwise_equal(back.tensors.at(key), tensor));
    // A rank's piece missing, or shards that disagree, are errors naming the key.
    std::vector<StateDict> missing = states;
    missing[1].tensors.clear();
    const std::string first_kind = kind == "sgd" ? "momentum_buffer.w" : "exp_avg.w";
    REQUIRE_THROWS_CONTAINING(merge_optimizer_shards(missing, pieces, whole_params), first_kind.c_str(), "missing");
    std::vector<StateDict> disagree = states;
    disagree[2].integers["updates"] = 99;
    REQUIRE_THROWS_CONTAINING(merge_optimizer_shards(disagree, pieces, whole_params), "updates", "rank 2");
  }
}

TEST_CASE("working copies: written by the step, current until a parameter is written elsewhere", "[optim]") {
  // Working copies are of f32 masters (an f64 parameter keeps none).
  auto f32_param = [](const std::vector<double>& v) {
    Tensor t = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}, ref()).to(DType::f32);
    t.set_requires_grad(true);
    return t;
  };
  Tensor a = f32_param({1.0, -2.0, 3.0}), b = f32_param({2.0});
  SGD sgd({{"a", a}, {"b", b}}, SgdOptions{0.1, 0.9, 0.0, 0.0, false});
  sgd.keep_working_copies(DType::bf16);
  CHECK(sgd.working_copy(a, DType::bf16) == nullptr);  // none before the first step
  a.set_grad(Tensor::from_vector(std::vector<double>{0.3, 0.2, -0.1}, {3}, ref()).to(DType::f32));
  sgd.step();
  const Tensor* copy = sgd.working_copy(a, DType::bf16);
  REQUIRE(copy != nullptr);
  CHECK(copy->dtype() == DType::bf16);
  CHECK(bitwise_equal(*copy, a.detach().to(DType::bf16)));  // the same bits as the cast
  CHECK(sgd.working_copy(a, DType::f16) == nullptr);
  CHECK(sgd.working_copy(b, DType::bf16) == nullptr);  // no gradient, never written
  {
    NoGradGuard no_grad;
    b.fill_(5.0);  // any parameter written outside the optimiser: every copy is stale
  }
  CHECK(sgd.working_copy(a, DType::bf16) == nullptr);
  sgd.step();
  REQUIRE(sgd.working_copy(a, DType::bf16) != nullptr);
  CHECK(bitwise_equal(*sgd.working_copy(a, DType::bf16), a.detach().to(DType::bf16)));

  AdamW adamw({{"a", a}}, AdamWOptions{});
  adamw.keep_working_copies(DType::f16);
  adamw.step();
  REQUIRE(adamw.working_copy(a, DType::f16) != nullptr);
  CHECK(bitwise_equal(*adamw.working_copy(a, DType::f16), a.detach().to(DType::f16)));
  REQUIRE_THROWS_CONTAINING(adamw.keep_working_copies(DType::f64), "bf16 or f16, not f64");
}

TEST_CASE("working copies: autocast uses them, with the cast's values and gradients", "[optim]") {
  Generator gen(4);
  SmallCNN model(InitOptions{&gen, DType::f32, &ref()});
  SGD sgd(model.named_parameters(), SgdOptions{0.05, 0.9, 0.0, 0.0, false});
  sgd.keep_working_copies(DType::bf16);
  std::vector<double> pixels(2 * 3 * 32 * 32);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = std::sin(0.37 * static_cast<double>(i));
  const Tensor x = Tensor::from_vector(pixels, {2, 3, 32, 32}, ref()).to(DType::f32);
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{3, 7}, {2}, ref());
  auto loss_and_grads = [&](const WorkingCopies* copies) {
    sgd.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DType::bf16, copies);
      loss = cross_entropy(model.forward(x), y);
    }
    loss.backward();
    std::vector<Tensor> grads;
    for (const auto& [name, p] : model.named_parameters()) grads.push_back(p.grad().clone());
    return std::pair{loss.item(), grads};
  };
  loss_and_grads(nullptr);
  sgd.step();  // the copies are current from here
  const auto [cast_loss, cast_grads] = loss_and_grads(nullptr);
  const auto [copy_loss, copy_grads] = loss_and_grads(&sgd);
  CHECK(copy_loss == cast_loss);
  for (std::size_t i = 0; i < cast_grads.size(); ++i) {
    CHECK(copy_grads[i].dtype() == DType::f32);
    CHECK(bitwise_equal(copy_grads[i], cast_grads[i]));
  }
  // And the forward really read the copies: zero one (a write the parameters do not see).
  const Tensor w = model.named_parameters().front().second;
  Tensor copy = *sgd.working_copy(w, DType::bf16);
  {
    NoGradGuard no_grad;
    copy.fill_(0.0);
  }
  CHECK(loss_and_grads(&sgd).first != cast_loss);
}
