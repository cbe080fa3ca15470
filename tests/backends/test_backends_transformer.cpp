// The cross-backend harness (harness.h) for a transformer's layers: layer norm (with and without
// its affine), GELU, softmax (plain, scaled, causal with as many keys as queries and with more),
// embedding (repeated indices: the gradient's sums), matmul (every transposition, transposed
// views read in place) and the fused attention, each forward and every gradient against the
// reference in f32, bf16 and f16; then the bad inputs each op names, determinism across thread
// counts, and the fused attention against the composed ops.
#include <cmath>

#include "backends/registry.h"
#include "harness.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;
using namespace trainlab::test::harness;

namespace {

Tensor indices(const std::vector<std::int64_t>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape, ref());
}

// q, k and v [B, H, T, D] packed as one [3, B, H, T, D] tensor (of q's dtype, on the reference).
Tensor stack_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  std::vector<double> all;
  for (const Tensor* t : {&q, &k, &v}) {
    const std::vector<double> part = values(*t);
    all.insert(all.end(), part.begin(), part.end());
  }
  Shape shape{3};
  shape.insert(shape.end(), q.shape().begin(), q.shape().end());
  return Tensor::from_vector(all, shape, ref()).to(q.dtype());
}

}  // namespace

TEST_CASE("backends: layer_norm, with and without its affine", "[backends]") {
  Generator gen(130);
  for (DType dtype : kDtypes) {
    for (const Shape& shape : {Shape{4, 8}, Shape{3, 5, 33}, Shape{2, 7, 128}, Shape{1, 1}}) {
      const std::int64_t w = shape.back();
      INFO(shape_str(shape));
      // Off-centre rows: the statistics must hold the mean.
      check_op(
          "layer_norm", BackendOp::layer_norm, dtype, [](const auto& x) { return layer_norm(x[0], x[1], x[2]); },
          {add_scalar(random(shape, gen, -2, 3), 1.5), random({w}, gen, 0.5, 1.5), random({w}, gen)},
          {true, true, true}, {}, 900);
      check_op(
          "layer_norm no affine", BackendOp::layer_norm, dtype,
          [](const auto& x) { return layer_norm(x[0], Tensor(), Tensor(), 1e-3); }, {random(shape, gen)}, {true}, {},
          901);
    }
  }
}

TEST_CASE("backends: gelu", "[backends]") {
  Generator gen(131);
  for (DType dtype : kDtypes) {
    check_op(
        "gelu", BackendOp::gelu, dtype, [](const auto& x) { return gelu(x[0]); }, {random({7, 65}, gen, -4, 4)}, {true},
        {}, 910);
  }
}

TEST_CASE("backends: softmax, scaled and causal", "[backends]") {
  Generator gen(132);
  for (DType dtype : kDtypes) {
    struct Case {
      Shape shape;
      double scale;
      bool causal;
    };
    for (const Case& c : {Case{{6, 10}, 1.0, false}, Case{{2, 3, 9, 9}, 0.25, true}, Case{{3, 5, 8}, 0.5, true},
                          Case{{4, 300}, 2.0, false}, Case{{1, 64, 64}, 0.125, true}}) {
      INFO(shape_str(c.shape) << " scale " << c.scale << (c.causal ? " causal" : ""));
      check_op(
          "softmax", BackendOp::softmax, dtype, [c](const auto& x) { return softmax(x[0], c.scale, c.causal); },
          {random(c.shape, gen, -3, 3)}, {true}, {}, 920);
    }
  }
}

TEST_CASE("backends: embedding, repeated indices summed in the gradient", "[backends]") {
  Generator gen(133);
  for (DType dtype : kDtypes) {
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 2 * 37; ++i) ids.push_back(static_cast<std::int64_t>(gen.below(11)));
    ids[5] = ids[0];  // at least one repeat
    check_op(
        "embedding", BackendOp::embedding, dtype, [](const auto& x) { return embedding(x[0], x[1]); },
        {indices(ids, {2, 37}), random({11, 70}, gen)}, {false, true}, {}, 930);
  }
}

TEST_CASE("backends: matmul, every transposition, transposed views in place", "[backends]") {
  Generator gen(134);
  for (DType dtype : kDtypes) {
    for (int trial = 0; trial < 4; ++trial) {
      const bool ta = trial & 1, tb = trial & 2;
      const std::int64_t m = between(gen, 1, 20), n = between(gen, 1, 20), k = between(gen, 1, 40);
      INFO("m " << m << " n " << n << " k " << k << (ta ? " a^T" : "") << (tb ? " b^T" : ""));
      // A transposed operand is given as its transpose's view: stored [.., k, m] and [.., n, k].
      const Shape a_shape = ta ? Shape{2, 3, k, m} : Shape{2, 3, m, k};
      const Shape b_shape = tb ? Shape{2, 3, n, k} : Shape{2, 3, k, n};
      check_op(
          "matmul", BackendOp::matmul, dtype,
          [ta, tb](const auto& x) {
            return matmul(ta ? x[0].transpose(2, 3) : x[0], tb ? x[1].transpose(2, 3) : x[1]);
          },
          {random(a_shape, gen), random(b_shape, gen)}, {true, true}, {}, 940 + static_cast<std::uint64_t>(trial));
    }
    check_op(
        "matmul 2-D", BackendOp::matmul, dtype, [](const auto& x) { return matmul(x[0], x[1]); },
        {random({33, 17}, gen), random({17, 65}, gen)}, {true, true}, {}, 945);
    // An operand in neither layout (a permuted view) is copied, then multiplied.
    check_op(
        "matmul permuted", BackendOp::matmul, dtype,
        [](const auto& x) {
          return matmul(x[0].permute({1, 0, 2, 3}), x[1]);
        },
        {random({3, 2, 5, 4}, gen), random({2, 3, 4, 6}, gen)}, {true, true}, {}, 946);
  }
}

TEST_CASE("transformer ops: bad input names the value and what is allowed", "[backends]") {
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    INFO(name);
    const Tensor w = Tensor::zeros({5, 3}, DType::f32, be);
    CHECK_THROWS_WITH(embedding(Tensor::from_vector<std::int64_t>({1, 5, 2}, {3}, be), w),
                      Catch::Contains("index 5 at position 1 is outside [0, 5)"));
    CHECK_THROWS_WITH(embedding(Tensor::from_vector<std::int64_t>({-1}, {1}, be), w),
                      Catch::Contains("index -1 at position 0"));
    CHECK_THROWS_WITH(embedding(Tensor::zeros({2}, DType::f32, be), w), Catch::Contains("indices must be i64"));
    CHECK_THROWS_WITH(matmul(Tensor::zeros({2, 3, 4}, DType::f32, be), Tensor::zeros({2, 5, 6}, DType::f32, be)),
                      Catch::Contains("has k = 4 but b [2, 5, 6] has k = 5"));
    CHECK_THROWS_WITH(matmul(Tensor::zeros({2, 3, 4}, DType::f32, be), Tensor::zeros({3, 4, 6}, DType::f32, be)),
                      Catch::Contains("batch dimensions differ"));
    CHECK_THROWS_WITH(softmax(Tensor::zeros({2, 5, 4}, DType::f32, be), 1.0, true),
                      Catch::Contains("at least as many keys as queries"));
    CHECK_THROWS_WITH(layer_norm(Tensor::zeros({2, 4}, DType::f32, be), Tensor::zeros({3}, DType::f32, be), Tensor()),
                      Catch::Contains("weight must be [4], got [3]"));
  }
}

TEST_CASE("transformer ops: the same bits at 1 and 2 threads", "[backends]") {
  Generator gen(135);
  const Tensor x = random({70, 96}, gen), g = random({96}, gen), b = random({96}, gen);
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(static_cast<std::int64_t>(gen.below(17)));
  const Tensor table = random({17, 96}, gen);
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    INFO(name);
    auto run_at = [&](int threads) {
      const int before = be.num_threads();
      be.set_num_threads(threads);
      Tensor xb = x.to(be).detach(), gb = g.to(be).detach(), tb = table.to(be).detach();
      xb.set_requires_grad(true);
      gb.set_requires_grad(true);
      tb.set_requires_grad(true);
      const Tensor idx = Tensor::from_vector(ids, {300}, be);
      Tensor y = add(layer_norm(xb, gb, b.to(be)), softmax(xb, 0.5, false));
      sum(mul(y, y)).backward();
      Tensor e = embedding(idx, tb);
      sum(mul(e, e)).backward();
      be.set_num_threads(before);
      return std::vector<std::vector<double>>{values(y), values(xb.grad()), values(gb.grad()), values(tb.grad())};
    };
    CHECK(run_at(1) == run_at(2));
  }
}

TEST_CASE("transformer ops: matmul's operands are never kept as frozen weights", "[backends]") {
  // Frozen inference keeps a weight by its shape (onednn); matmul's operands are activations, and a
  // batch of products of one shape must each read its own.
  Generator gen(136);
  const Tensor a = random({3, 4, 6}, gen), b = random({3, 6, 5}, gen);
  const auto expected = values(matmul(a, b));
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    FrozenWeights* frozen = be.frozen_weights();
    if (frozen == nullptr) continue;
    INFO(name);
    NoGradGuard no_grad;
    frozen->freeze();
    const auto first = values(matmul(a.to(be), b.to(be)));
    const auto second = values(matmul(a.to(be), mul_scalar(b, 2.0).to(be)));
    frozen->thaw();
    REQUIRE(first.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      CHECK(first[i] == Approx(expected[i]).margin(1e-5));
      CHECK(second[i] == Approx(2 * expected[i]).margin(1e-5));
    }
  }
}

TEST_CASE("backends: fused attention, causal or not, as many keys as queries or more", "[backends]") {
  Generator gen(137);
  for (DType dtype : kDtypes) {
    struct Case {
      std::int64_t b, h, t, s, d;
      bool causal;
    };
    for (const Case& c : {Case{2, 3, 7, 7, 8, true}, Case{1, 2, 5, 9, 16, true}, Case{2, 1, 6, 4, 5, false},
                          Case{1, 4, 64, 64, 32, true}}) {
      INFO("q [" << c.b << "," << c.h << "," << c.t << "," << c.d << "] keys " << c.s << (c.causal ? " causal" : ""));
      check_op(
          "attention", BackendOp::attention, dtype,
          [c](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], c.causal); },
          {random({c.b, c.h, c.t, c.d}, gen, -2, 2), random({c.b, c.h, c.s, c.d}, gen, -2, 2),
           random({c.b, c.h, c.s, c.d}, gen)},
          {true, true, true}, {}, 950);
    }
    // Packed (q, k, v as one [3, B, H, T, D] tensor and one gradient): the GPT's fused path.
    for (const Case& c : {Case{2, 3, 7, 7, 8, true}, Case{1, 4, 64, 64, 32, true}, Case{2, 1, 5, 5, 3, false}}) {
      INFO("packed qkv [3," << c.b << "," << c.h << "," << c.t << "," << c.d << "]" << (c.causal ? " causal" : ""));
      check_op(
          "attention packed", BackendOp::attention, dtype,
          [c](const auto& x) { return scaled_dot_product_attention_packed(x[0], c.causal); },
          {random({3, c.b, c.h, c.t, c.d}, gen, -2, 2)}, {true}, {}, 950);
    }
  }
}

TEST_CASE("transformer ops: fused attention equals the composed ops", "[backends]") {
  Generator gen(138);
  const Tensor q = random({2, 2, 9, 8}, gen, -2, 2), k = random({2, 2, 9, 8}, gen, -2, 2),
               v = random({2, 2, 9, 8}, gen);
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    INFO(name);
    auto grads = [&](bool fused) {
      Tensor qb = q.to(be).detach(), kb = k.to(be).detach(), vb = v.to(be).detach();
      for (Tensor* t : {&qb, &kb, &vb}) t->set_requires_grad(true);
      const Tensor y = fused ? scaled_dot_product_attention(qb, kb, vb, true)
                             : matmul(softmax(matmul(qb, kb.transpose(2, 3)), 1.0 / std::sqrt(8.0), true), vb);
      sum(mul(y, y)).backward();
      return std::vector<std::vector<double>>{values(y), values(qb.grad()), values(kb.grad()), values(vb.grad())};
    };
    const auto fused = grads(true), composed = grads(false);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      REQUIRE(fused[i].size() == composed[i].size());
      for (std::size_t e = 0; e < fused[i].size(); ++e) CHECK(fused[i][e] == Approx(composed[i][e]).margin(1e-5));
    }
    // Packed: the same bits as the three tensors, its gradient theirs laid end to end.
    Tensor qkv = stack_qkv(q, k, v).to(be).detach();
    qkv.set_requires_grad(true);
    const Tensor y = scaled_dot_product_attention_packed(qkv, true);
    sum(mul(y, y)).backward();
    CHECK(values(y) == fused[0]);
    std::vector<double> joined;
    for (std::size_t i = 1; i < 4; ++i) joined.insert(joined.end(), fused[i].begin(), fused[i].end());
    CHECK(values(qkv.grad()) == joined);
  }
}

TEST_CASE("transformer ops: fused attention in f64 on every CPU backend, against the reference", "[backends]") {
  Generator gen(139);
  const Tensor qkv = Tensor::uniform({3, 2, 2, 70, 5}, -2, 2, gen, DType::f64, ref());
  auto run_on = [&](Backend& be) {
    Tensor x = qkv.to(be).detach();
    x.set_requires_grad(true);
    const Tensor y = scaled_dot_product_attention_packed(x, true);
    sum(mul(y, y)).backward();
    return std::vector<std::vector<double>>{values(y), values(x.grad())};
  };
  const auto expected = run_on(ref());
  for (const auto& name : cpu_backends()) {
    INFO(name);
    const auto got = run_on(get_backend(name));
    for (std::size_t i = 0; i < got.size(); ++i) {
      REQUIRE(got[i].size() == expected[i].size());
      for (std::size_t e = 0; e < got[i].size(); ++e) CHECK(got[i][e] == Approx(expected[i][e]).margin(1e-12));
    }
  }
}
