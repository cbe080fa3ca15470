// Gradient check of every op in f64 against central finite differences.
//
// For an op y = f(x1, ..., xk) the check builds the scalar L = sum(f(x) * R) with a fixed random
// R, so every output element carries a different weight. The analytic dL/dx from backward() is
// compared with (L(x + eps e_i) - L(x - eps e_i)) / (2 eps) for every element i, as
// torch.autograd.gradcheck does: eps = 1e-6, |analytic - numeric| <= atol + rtol * |numeric| with
// atol = 1e-5 and rtol = 1e-3. Shapes are drawn at random, odd sizes included.
#include <functional>

#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

constexpr double kEps = 1e-6, kAtol = 1e-5, kRtol = 1e-3;

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

double weighted_sum(const Tensor& y, const Tensor& weights) {
  NoGradGuard no_grad;
  const auto yv = values(y);
  const auto wv = values(weights);
  double total = 0;
  for (std::size_t i = 0; i < yv.size(); ++i) total += yv[i] * wv[i];
  return total;
}

// Checks every differentiable input of `op` (those with requires_grad set).
void gradcheck(const std::string& label, const OpFn& op, std::vector<Tensor> inputs, std::uint64_t seed) {
  INFO("op: " << label);
  Generator gen(seed);
  Tensor y0;
  {
    NoGradGuard no_grad;
    y0 = op(inputs);
  }
  const Tensor weights = random_tensor(y0.shape(), gen, DType::f64, -1.0, 1.0);

  for (auto& x : inputs) {
    if (x.requires_grad()) x.zero_grad(true);
  }
  const Tensor y = op(inputs);
  REQUIRE(y.requires_grad());
  sum(mul(y, weights)).backward();

  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    INFO("input " << k << " of shape " << shape_str(x.shape()));
    REQUIRE(x.grad().defined());
    const auto analytic = values(x.grad());
    double* data = x.data<double>();
    int failures = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double saved = data[i];
      double plus, minus;
      {
        NoGradGuard no_grad;
        data[i] = saved + kEps;
        plus = weighted_sum(op(inputs), weights);
        data[i] = saved - kEps;
        minus = weighted_sum(op(inputs), weights);
        data[i] = saved;
      }
      const double numeric = (plus - minus) / (2 * kEps);
      const double a = analytic[static_cast<std::size_t>(i)];
      if (std::abs(a - numeric) > kAtol + kRtol * std::abs(numeric)) {
        if (++failures <= 5) UNSCOPED_INFO("element " << i << ": analytic " << a << ", numeric " << numeric);
      }
    }
    CHECK(failures == 0);
  }
}

Tensor leaf(const Shape& shape, Generator& gen, double lo = -1.0, double hi = 1.0) {
  Tensor t = random_tensor(shape, gen, DType::f64, lo, hi);
  t.set_requires_grad(true);
  return t;
}

// Values spaced at least `gap` apart in random order: max-pool windows then have a unique
// maximum that a perturbation of eps cannot change.
Tensor distinct_leaf(const Shape& shape, Generator& gen, double gap = 0.01) {
  const std::int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = gap * static_cast<double>(i - n / 2);
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen.below(i)]);
  Tensor t = Tensor::from_vector(v, shape, ref());
  t.set_requires_grad(true);
  return t;
}

// Values at least `margin` away from zero: relu's kink is never crossed by a perturbation.
Tensor away_from_zero_leaf(const Shape& shape, Generator& gen, double margin = 0.05) {
  auto v = values(random_tensor(shape, gen));
  for (auto& e : v) e = e >= 0 ? e + margin : e - margin;
  Tensor t = Tensor::from_vector(v, shape, ref());
  t.set_requires_grad(true);
  return t;
}

std::int64_t between(Generator& gen, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(hi - lo + 1)));
}

}  // namespace

TEST_CASE("gradcheck: elementwise ops", "[gradcheck]") {
  Generator gen(11);
  for (int trial = 0; trial < 3; ++trial) {
    const Shape shape{between(gen, 1, 4), between(gen, 1, 5), between(gen, 1, 3)};
    gradcheck(
        "add", [](const auto& in) { return add(in[0], in[1]); }, {leaf(shape, gen), leaf(shape, gen)}, 100 + trial);
    gradcheck(
        "sub", [](const auto& in) { return sub(in[0], in[1]); }, {leaf(shape, gen), leaf(shape, gen)}, 200 + trial);
    gradcheck(
        "mul", [](const auto& in) { return mul(in[0], in[1]); }, {leaf(shape, gen), leaf(shape, gen)}, 300 + trial);
    gradcheck(
        "div", [](const auto& in) { return div(in[0], in[1]); }, {leaf(shape, gen), leaf(shape, gen, 0.5, 2.0)},
        400 + trial);
    gradcheck(
        "mul_scalar", [](const auto& in) { return mul_scalar(in[0], -2.5); }, {leaf(shape, gen)}, 500 + trial);
    gradcheck(
        "add_scalar", [](const auto& in) { return add_scalar(in[0], 0.75); }, {leaf(shape, gen)}, 600 + trial);
    gradcheck(
        "neg", [](const auto& in) { return neg(in[0]); }, {leaf(shape, gen)}, 700 + trial);
    gradcheck(
        "sum", [](const auto& in) { return sum(in[0]); }, {leaf(shape, gen)}, 800 + trial);
    gradcheck(
        "mean", [](const auto& in) { return mean(in[0]); }, {leaf(shape, gen)}, 900 + trial);
    gradcheck(
        "relu", [](const auto& in) { return relu(in[0]); }, {away_from_zero_leaf(shape, gen)}, 1000 + trial);
  }
}

TEST_CASE("gradcheck: a tensor used twice accumulates both paths", "[gradcheck]") {
  Generator gen(12);
  gradcheck(
      "x*x + x", [](const auto& in) { return add(mul(in[0], in[0]), in[0]); }, {leaf({3, 4}, gen)}, 1);
}

TEST_CASE("gradcheck: views", "[gradcheck]") {
  Generator gen(13);
  gradcheck(
      "reshape",
      [](const auto& in) {
        return in[0].reshape({-1, 6});
      },
      {leaf({2, 3, 4}, gen)}, 1);
  gradcheck(
      "flatten", [](const auto& in) { return in[0].flatten(1); }, {leaf({3, 2, 5}, gen)}, 2);
  gradcheck(
      "permute",
      [](const auto& in) {
        return in[0].permute({2, 0, 1});
      },
      {leaf({2, 3, 5}, gen)}, 3);
  gradcheck(
      "transpose + contiguous", [](const auto& in) { return in[0].transpose(0, 1).contiguous(); }, {leaf({4, 3}, gen)},
      4);
  gradcheck(
      "narrow", [](const auto& in) { return in[0].narrow(1, 1, 3); }, {leaf({2, 5, 3}, gen)}, 5);
  gradcheck(
      "permute then reshape (copy)",
      [](const auto& in) {
        return in[0].permute({1, 0, 2}).reshape({-1});
      },
      {leaf({2, 3, 2}, gen)}, 6);
  gradcheck(
      "clone", [](const auto& in) { return in[0].clone(); }, {leaf({7}, gen)}, 7);
}

TEST_CASE("gradcheck: bias_add", "[gradcheck]") {
  Generator gen(14);
  gradcheck(
      "bias_add 2-D", [](const auto& in) { return bias_add(in[0], in[1]); }, {leaf({3, 5}, gen), leaf({5}, gen)}, 1);
  gradcheck(
      "bias_add 4-D", [](const auto& in) { return bias_add(in[0], in[1]); }, {leaf({2, 3, 3, 5}, gen), leaf({3}, gen)},
      2);
}

TEST_CASE("gradcheck: linear", "[gradcheck]") {
  Generator gen(15);
  for (int trial = 0; trial < 3; ++trial) {
    const std::int64_t batch = between(gen, 1, 5), in = between(gen, 1, 19), out = between(gen, 1, 7);
    INFO("batch " << batch << " in " << in << " out " << out);
    gradcheck(
        "linear", [](const auto& x) { return linear(x[0], x[1], x[2]); },
        {leaf({batch, in}, gen), leaf({out, in}, gen), leaf({out}, gen)}, 10 + trial);
  }
}

TEST_CASE("gradcheck: conv2d with stride and padding", "[gradcheck]") {
  Generator gen(16);
  struct Case {
    std::int64_t n, c_in, h, w, c_out, kh, kw, stride, pad;
  };
  std::vector<Case> cases = {
      {2, 3, 5, 6, 4, 3, 3, 1, 1},  // SmallCNN's configuration, odd sizes
      {1, 2, 7, 5, 3, 3, 3, 2, 1},  // stride 2 with padding
      {2, 1, 6, 6, 2, 2, 2, 2, 0},  // no padding
      {1, 2, 4, 5, 2, 1, 3, 1, 2},  // rectangular kernel, wide padding
  };
  for (int trial = 0; trial < 2; ++trial) {  // and two fully random ones
    const std::int64_t k = between(gen, 1, 3);
    cases.push_back({between(gen, 1, 2), between(gen, 1, 3), between(gen, k, 7), between(gen, k, 7), between(gen, 1, 3),
                     k, k, between(gen, 1, 2), between(gen, 0, 1)});
  }
  int index = 0;
  for (const auto& c : cases) {
    INFO("case " << index << ": x [" << c.n << "," << c.c_in << "," << c.h << "," << c.w << "] kernel " << c.kh << "x"
                 << c.kw << " stride " << c.stride << " pad " << c.pad);
    const Conv2dOptions options{c.stride, c.stride, c.pad, c.pad};
    gradcheck(
        "conv2d", [options](const auto& in) { return conv2d(in[0], in[1], in[2], options); },
        {leaf({c.n, c.c_in, c.h, c.w}, gen), leaf({c.c_out, c.c_in, c.kh, c.kw}, gen), leaf({c.c_out}, gen)},
        20 + static_cast<std::uint64_t>(index++));
  }
}

TEST_CASE("gradcheck: max_pool2d", "[gradcheck]") {
  Generator gen(17);
  gradcheck(
      "max_pool2d 2x2", [](const auto& in) { return max_pool2d(in[0], Pool2dOptions::square(2)); },
      {distinct_leaf({2, 3, 6, 4}, gen)}, 1);
  gradcheck(
      "max_pool2d odd size", [](const auto& in) { return max_pool2d(in[0], Pool2dOptions::square(2)); },
      {distinct_leaf({1, 2, 7, 5}, gen)}, 2);
  gradcheck(
      "max_pool2d 3x3 stride 2 pad 1", [](const auto& in) { return max_pool2d(in[0], Pool2dOptions::square(3, 2, 1)); },
      {distinct_leaf({1, 2, 7, 6}, gen)}, 3);
  gradcheck(
      "max_pool2d overlapping 3x3 stride 1",
      [](const auto& in) { return max_pool2d(in[0], Pool2dOptions::square(3, 1)); }, {distinct_leaf({1, 1, 5, 5}, gen)},
      4);
}

TEST_CASE("gradcheck: cross_entropy", "[gradcheck]") {
  Generator gen(18);
  for (int trial = 0; trial < 3; ++trial) {
    const std::int64_t batch = between(gen, 1, 6), classes = between(gen, 2, 11);
    std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
    for (auto& l : labels) l = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(classes)));
    const Tensor y = Tensor::from_vector(labels, {batch}, ref());
    gradcheck(
        "cross_entropy", [y](const auto& in) { return cross_entropy(in[0], y); }, {leaf({batch, classes}, gen, -3, 3)},
        30 + trial);
  }
}

TEST_CASE("gradcheck: fused conv2d and linear", "[gradcheck]") {
  Generator gen(20);
  for (bool relu : {false, true}) {
    INFO("relu " << relu);
    gradcheck(
        "conv2d_fused",
        [relu](const auto& in) { return conv2d_fused(in[0], in[1], in[2], relu, Conv2dOptions::square(1, 1)); },
        {leaf({2, 3, 5, 4}, gen), leaf({4, 3, 3, 3}, gen), leaf({4}, gen)}, relu ? 1 : 2);
    gradcheck(
        "conv2d_fused stride 2",
        [relu](const auto& in) { return conv2d_fused(in[0], in[1], in[2], relu, Conv2dOptions::square(2, 0)); },
        {leaf({1, 2, 7, 6}, gen), leaf({3, 2, 3, 3}, gen), leaf({3}, gen)}, relu ? 3 : 4);
    gradcheck(
        "linear_fused", [relu](const auto& in) { return linear_fused(in[0], in[1], in[2], relu); },
        {leaf({3, 7}, gen), leaf({5, 7}, gen), leaf({5}, gen)}, relu ? 5 : 6);
  }
}

TEST_CASE("gradcheck: channels_last layouts", "[gradcheck]") {
  Generator gen(21);
  const auto cl = MemoryFormat::channels_last;
  gradcheck(
      "conv2d nhwc",
      [cl](const auto& in) { return conv2d(in[0].contiguous(cl), in[1], in[2], Conv2dOptions::square(1, 1)); },
      {leaf({2, 3, 5, 4}, gen), leaf({4, 3, 3, 3}, gen), leaf({4}, gen)}, 1);
  gradcheck(
      "conv2d_fused nhwc",
      [cl](const auto& in) {
        return conv2d_fused(in[0].contiguous(cl), in[1], in[2], true, Conv2dOptions::square(2, 1));
      },
      {leaf({1, 2, 6, 7}, gen), leaf({3, 2, 3, 3}, gen), leaf({3}, gen)}, 2);
  gradcheck(
      "max_pool2d nhwc", [cl](const auto& in) { return max_pool2d(in[0].contiguous(cl), Pool2dOptions::square(2)); },
      {distinct_leaf({2, 3, 6, 4}, gen)}, 3);
  gradcheck(
      "relu nhwc", [cl](const auto& in) { return relu(in[0].contiguous(cl)); },
      {away_from_zero_leaf({2, 3, 2, 3}, gen)}, 4);
  gradcheck(
      "bias_add nhwc", [cl](const auto& in) { return bias_add(in[0].contiguous(cl), in[1]); },
      {leaf({2, 3, 2, 3}, gen), leaf({3}, gen)}, 5);
  gradcheck(
      "mixed layouts add", [cl](const auto& in) { return add(in[0].contiguous(cl), in[1]); },
      {leaf({1, 2, 3, 3}, gen), leaf({1, 2, 3, 3}, gen)}, 6);
}

TEST_CASE("gradcheck: a small conv net end to end", "[gradcheck]") {
  Generator gen(19);
  const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{1, 0}, {2}, ref());
  auto net = [labels](const std::vector<Tensor>& in) {
    Tensor h = relu(conv2d(in[0], in[1], in[2], Conv2dOptions::square(1, 1)));
    h = max_pool2d(h, Pool2dOptions::square(2)).flatten(1);
    return cross_entropy(linear(h, in[3], in[4]), labels);
  };
  gradcheck("conv-relu-pool-linear-ce", net,
            {leaf({2, 2, 4, 4}, gen), leaf({3, 2, 3, 3}, gen), leaf({3}, gen), leaf({2, 12}, gen), leaf({2}, gen)}, 40);
}

TEST_CASE("gradcheck: batch_norm, training and eval, with its epilogue", "[gradcheck]") {
  Generator gen(22);
  const auto cl = MemoryFormat::channels_last;
  auto buffer = [&](double lo, double hi) { return random_tensor({3}, gen, DType::f64, lo, hi); };
  const Tensor rm = buffer(-0.5, 0.5), rv = buffer(0.5, 2);
  for (bool nhwc : {false, true}) {
    for (bool training : {true, false}) {
      INFO((nhwc ? "nhwc" : "nchw") << (training ? " training" : " eval"));
      BatchNormOptions o;
      o.training = training;
      // Fresh buffers each call in training (the op moves them); the eval ones are read only.
      gradcheck(
          "batch_norm",
          [=](const auto& in) {
            const Tensor x = nhwc ? in[0].contiguous(cl) : in[0];
            return batch_norm(x, in[1], in[2], training ? rm.clone() : rm, training ? rv.clone() : rv, o);
          },
          {leaf({2, 3, 3, 4}, gen, -1, 2), leaf({3}, gen, 0.5, 1.5), leaf({3}, gen)}, 50 + (nhwc ? 2 : 0) + training);
      // The residual block's tail: gamma small and the residual at least 0.5 from zero, so the
      // ReLU's kink is never crossed by a perturbation.
      gradcheck(
          "batch_norm + residual + relu",
          [=](const auto& in) {
            const Tensor x = nhwc ? in[0].contiguous(cl) : in[0];
            return batch_norm(x, in[1], in[2], rm.clone(), rv.clone(), o, nhwc ? in[3].contiguous(cl) : in[3], true);
          },
          {leaf({2, 3, 3, 2}, gen), leaf({3}, gen, 0.05, 0.1), leaf({3}, gen, -0.05, 0.05),
           away_from_zero_leaf({2, 3, 3, 2}, gen, 0.5)},
          60 + (nhwc ? 2 : 0) + training);
      // A ReLU without a residual: its sign recomputed from x in backward; beta at least 0.5 from
      // zero and gamma small keep every pre-activation away from the kink.
      Tensor beta = away_from_zero_leaf({3}, gen, 0.5);
      gradcheck(
          "batch_norm + relu",
          [=](const auto& in) {
            const Tensor x = nhwc ? in[0].contiguous(cl) : in[0];
            return batch_norm(x, in[1], in[2], rm.clone(), rv.clone(), o, Tensor(), true);
          },
          {leaf({2, 3, 3, 2}, gen), leaf({3}, gen, 0.05, 0.1), beta}, 80 + (nhwc ? 2 : 0) + training);
    }
  }
  gradcheck(
      "batch_norm 2-D, no running statistics",
      [](const auto& in) { return batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), BatchNormOptions{}); },
      {leaf({5, 4}, gen), leaf({4}, gen, 0.5, 1.5), leaf({4}, gen)}, 70);
}

TEST_CASE("gradcheck: global_avg_pool2d, pad_channels, dropout", "[gradcheck]") {
  Generator gen(23);
  const auto cl = MemoryFormat::channels_last;
  gradcheck(
      "global_avg_pool2d", [](const auto& in) { return global_avg_pool2d(in[0]); }, {leaf({2, 3, 4, 5}, gen)}, 1);
  gradcheck(
      "global_avg_pool2d nhwc", [cl](const auto& in) { return global_avg_pool2d(in[0].contiguous(cl)); },
      {leaf({2, 3, 4, 5}, gen)}, 2);
  gradcheck(
      "pad_channels", [](const auto& in) { return pad_channels(in[0], 6, 2, 1); }, {leaf({2, 3, 5, 4}, gen)}, 3);
  gradcheck(
      "pad_channels nhwc", [cl](const auto& in) { return pad_channels(in[0].contiguous(cl), 7, 2, 2); },
      {leaf({1, 4, 4, 6}, gen)}, 4);
  gradcheck(
      "dropout",
      [](const auto& in) {
        dropout_stream() = CounterStream{5, 0};  // the same mask for every evaluation
        return dropout(in[0], 0.3, true);
      },
      {leaf({4, 9}, gen)}, 5);
}

TEST_CASE("gradcheck: layer_norm, gelu, softmax, embedding, matmul", "[gradcheck]") {
  Generator gen(24);
  gradcheck(
      "layer_norm", [](const auto& in) { return layer_norm(in[0], in[1], in[2]); },
      {leaf({3, 2, 7}, gen, -2, 3), leaf({7}, gen, 0.5, 1.5), leaf({7}, gen)}, 1);
  gradcheck(
      "layer_norm no affine", [](const auto& in) { return layer_norm(in[0], Tensor(), Tensor(), 1e-3); },
      {leaf({4, 5}, gen)}, 2);
  gradcheck(
      "gelu", [](const auto& in) { return gelu(in[0]); }, {leaf({5, 9}, gen, -4, 4)}, 3);
  gradcheck(
      "softmax", [](const auto& in) { return softmax(in[0], 0.7); }, {leaf({4, 6}, gen, -2, 2)}, 4);
  gradcheck(
      "softmax causal", [](const auto& in) { return softmax(in[0], 0.5, true); }, {leaf({2, 5, 5}, gen, -2, 2)}, 5);
  gradcheck(
      "softmax causal, more keys", [](const auto& in) { return softmax(in[0], 1.0, true); },
      {leaf({2, 3, 6}, gen, -2, 2)}, 6);
  const Tensor ids = Tensor::from_vector<std::int64_t>({3, 0, 3, 1, 4, 3}, {2, 3}, ref());
  gradcheck(
      "embedding", [ids](const auto& in) { return embedding(ids, in[0]); }, {leaf({5, 4}, gen)}, 7);
  gradcheck(
      "matmul", [](const auto& in) { return matmul(in[0], in[1]); }, {leaf({2, 3, 4}, gen), leaf({2, 4, 5}, gen)}, 8);
  gradcheck(
      "attention causal", [](const auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], true); },
      {leaf({1, 2, 4, 3}, gen), leaf({1, 2, 5, 3}, gen), leaf({1, 2, 5, 3}, gen)}, 10);
  gradcheck(
      "attention", [](const auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], false); },
      {leaf({2, 1, 3, 4}, gen), leaf({2, 1, 6, 4}, gen), leaf({2, 1, 6, 4}, gen)}, 11);
  gradcheck(
      "attention packed, causal", [](const auto& in) { return scaled_dot_product_attention_packed(in[0], true); },
      {leaf({3, 2, 2, 5, 3}, gen)}, 12);
  gradcheck(
      "matmul, transposed views", [](const auto& in) { return matmul(in[0].transpose(1, 2), in[1].transpose(1, 2)); },
      {leaf({2, 4, 3}, gen), leaf({2, 5, 4}, gen)}, 9);
}
