// The cross-backend harness (in the spirit of ggml's test-backend-ops): every op on every
// registered backend against the reference backend, forward and every gradient, on random shapes
// (odd sizes included), in f32, bf16 and f16, in both layouts, wherever the backend's capability
// table says it runs the combination (natively or emulated; the rest is skipped, saying why).
//
// Each case builds L = sum(op(inputs) * R) with a fixed random R and compares the output and the
// gradient of every input, norm-wise: |got - reference| / |reference| must stay below 1e-5 in f32
// (both sides accumulate in f32, in different orders) and 1e-2 in bf16 and f16 (8- and 11-bit
// mantissas; both sides accumulate in f32 and round the same inputs).
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/simd.h"
#include "backends/device_selection.h"
#include "backends/registry.h"
#include "bench/measure/throughput.h"
#include "engine/core/autocast.h"
#include "engine/optim/optim.h"
#include "engine/train/step.h"
#include "harness.h"
#include "models/smallcnn/smallcnn.h"
#include "test_util.h"

using namespace trainlab;
using trainlab::bench::measure_throughput;
using trainlab::bench::ThroughputConfig;
using trainlab::bench::ThroughputResult;
using namespace trainlab::test;

using namespace trainlab::test::harness;

TEST_CASE("backends: the harness finds the fast backends", "[backends]") {
  CHECK(fast_backends().size() >= 1);
  for (const auto& name : fast_backends()) {
    INFO(name << ": " << get_backend(name).describe());
    CHECK(get_backend(name).supports(DType::f32));
  }
}

TEST_CASE("backends: conv2d, plain and fused, both layouts", "[backends]") {
  Generator gen(100);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      for (int trial = 0; trial < 4; ++trial) {
        const std::int64_t k = between(gen, 1, 3);
        const std::int64_t n = between(gen, 1, 3), c_in = trial == 0 ? 3 : between(gen, 1, 17),
                           c_out = between(gen, 1, 19), h = between(gen, k, 13), w = between(gen, k, 11);
        const Conv2dOptions o = Conv2dOptions::square(between(gen, 1, 2), between(gen, 0, k / 2 + 1));
        const bool relu = trial % 2 == 1;
        INFO("x [" << n << "," << c_in << "," << h << "," << w << "] k " << k << " stride " << o.stride_h << " pad "
                   << o.pad_h << (nhwc ? " nhwc" : " nchw") << (relu ? " relu" : ""));
        const std::vector<Tensor> in = {random({n, c_in, h, w}, gen), random({c_out, c_in, k, k}, gen, -0.5, 0.5),
                                        random({c_out}, gen)};
        check_op(
            "conv2d", BackendOp::conv2d, dtype, [o](const auto& x) { return conv2d(x[0], x[1], o); }, {in[0], in[1]},
            {true, true}, {nhwc, false}, 200 + static_cast<std::uint64_t>(trial));
        check_op(
            "conv2d_fused", BackendOp::conv2d, dtype,
            [o, relu](const auto& x) { return conv2d_fused(x[0], x[1], x[2], relu, o); }, in, {true, true, true},
            {nhwc, false, false}, 300 + static_cast<std::uint64_t>(trial));
      }
    }
  }
}

TEST_CASE("backends: SmallCNN's own convolutions", "[backends]") {
  Generator gen(101);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      INFO((nhwc ? "nhwc" : "nchw"));
      const Conv2dOptions o = Conv2dOptions::square(1, 1);
      check_op(
          "conv1", BackendOp::conv2d, dtype, [o](const auto& x) { return conv2d_fused(x[0], x[1], x[2], true, o); },
          {random({4, 3, 32, 32}, gen), random({32, 3, 3, 3}, gen, -0.2, 0.2), random({32}, gen, -0.2, 0.2)},
          {true, true, true}, {nhwc, false, false}, 1);
      check_op(
          "conv2", BackendOp::conv2d, dtype, [o](const auto& x) { return conv2d(x[0], x[1], o); },
          {random({4, 32, 16, 16}, gen, 0, 1), random({64, 32, 3, 3}, gen, -0.06, 0.06)}, {true, true}, {nhwc, false},
          2);
    }
  }
}

TEST_CASE("backends: linear, plain and fused", "[backends]") {
  Generator gen(102);
  for (DType dtype : kDtypes) {
    for (int trial = 0; trial < 4; ++trial) {
      const std::int64_t batch = between(gen, 1, 9), in = between(gen, 1, 70), out = between(gen, 1, 33);
      const bool relu = trial % 2 == 0;
      INFO("batch " << batch << " in " << in << " out " << out << (relu ? " relu" : ""));
      const std::vector<Tensor> x = {random({batch, in}, gen), random({out, in}, gen), random({out}, gen)};
      check_op(
          "linear", BackendOp::linear, dtype, [](const auto& t) { return linear(t[0], t[1]); }, {x[0], x[1]},
          {true, true}, {}, 400 + static_cast<std::uint64_t>(trial));
      check_op(
          "linear_fused", BackendOp::linear, dtype,
          [relu](const auto& t) { return linear_fused(t[0], t[1], t[2], relu); }, x, {true, true, true}, {},
          500 + static_cast<std::uint64_t>(trial));
    }
    check_op(
        "fc1", BackendOp::linear, dtype, [](const auto& t) { return linear_fused(t[0], t[1], t[2], true); },
        {random({8, 4096}, gen, 0, 1), random({256, 4096}, gen, -0.015, 0.015), random({256}, gen, -0.015, 0.015)},
        {true, true, true}, {}, 600);
  }
}

TEST_CASE("backends: linear's backward-data reads the weight its forward prepared, never a second reorder",
          "[backends]") {
  for (const auto& name : fast_backends()) {
    Backend& backend = get_backend(name);
    if (backend.counters().count("kept_weight_reads") == 0) continue;
    for (DType dtype : kDtypes) {
      if (!runs_here(backend, BackendOp::linear, dtype, false)) continue;
      INFO(name << " " << dtype_name(dtype));
      Generator gen(61);
      const auto on = [&](const Tensor& t, bool grad) {
        Tensor out = t.to(backend).to(dtype).detach();
        out.set_requires_grad(grad);
        return out;
      };
      const Tensor x = on(random({8, 4096}, gen), true), w = on(random({256, 4096}, gen, -0.015, 0.015), true);
      const Tensor b = on(random({256}, gen), true);
      const auto counter = [&](const char* c) { return backend.counters().at(c); };
      const auto reorders = counter("weight_reorders"), again = counter("backward_weight_reorders");
      const Tensor y = linear_fused(x, w, b, true);
      sum(y).backward();
      // fc1's weight goes into the forward primitive's layout once (oneDNN's blocked one with
      // AVX-512, transposed with AVX2; widened to f32 where the dtype is emulated); the backward-data
      // reads that copy, or the weight as it is where its primitive takes the engine's layout.
      CHECK(counter("weight_reorders") == reorders + 1);
      CHECK(counter("backward_weight_reorders") == again);
      // Without a gradient for x there is no backward-data, and nothing is kept.
      const Tensor x_fixed = on(random({8, 4096}, gen), false);
      const auto reads_before = counter("kept_weight_reads");
      sum(linear_fused(x_fixed, w, b, true)).backward();
      CHECK(counter("kept_weight_reads") == reads_before);
    }
  }
}

TEST_CASE("backends: max_pool2d, both layouts", "[backends]") {
  Generator gen(103);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      struct Case {
        Shape shape;
        Pool2dOptions options;
        std::int64_t window;
      };
      for (const Case& c :
           {Case{{2, 3, 8, 6}, Pool2dOptions::square(2), 2}, Case{{1, 5, 7, 9}, Pool2dOptions::square(2), 2},
            Case{{2, 4, 9, 7}, Pool2dOptions::square(3, 2, 1), 3},
            Case{{4, 32, 32, 32}, Pool2dOptions::square(2), 2}}) {
        INFO(shape_str(c.shape) << (nhwc ? " nhwc" : " nchw") << " kernel " << c.options.kernel_h);
        const Pool2dOptions o = c.options;
        check_op(
            "max_pool2d", BackendOp::max_pool2d, dtype, [o](const auto& x) { return max_pool2d(x[0], o); },
            {pool_input(c.shape, c.window, gen)}, {true}, {nhwc}, 700);
      }
    }
  }
}

namespace {

// The bytes of `t`, NCHW on the host: for comparisons bit for bit (-0 against +0, NaN payloads).
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = t.to(ref()).contiguous();
  const auto* p = static_cast<const unsigned char*>(host.raw_data());
  return std::vector<unsigned char>(p, p + host.numel() * static_cast<std::int64_t>(dtype_size(host.dtype())));
}

}  // namespace

TEST_CASE("backends: max_pool2d_relu is relu(max_pool2d) bit for bit, forward and backward", "[backends]") {
  Generator gen(105);
  // Windows of negatives, zeros of both signs, ties and NaNs; gradients of every sign.
  const float levels[] = {-2.0f, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 3.0f, std::numeric_limits<float>::quiet_NaN()};
  const auto input = [&](const Shape& shape) {
    std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
    for (auto& x : v) x = levels[gen.below(8)];
    return Tensor::from_vector(v, shape, ref());
  };
  std::vector<std::string> names = fast_backends();
  names.push_back("reference");
  for (const auto& name : names) {
    Backend& backend = get_backend(name);
    for (DType dtype : kDtypes) {
      if (!runs_here(backend, BackendOp::max_pool2d, dtype, false)) continue;
      for (bool nhwc : {false, true}) {
        for (const auto& [shape, o] : {std::pair{Shape{2, 3, 8, 6}, Pool2dOptions::square(2)},
                                       std::pair{Shape{1, 5, 7, 9}, Pool2dOptions::square(2)},
                                       std::pair{Shape{2, 4, 9, 7}, Pool2dOptions::square(3, 2, 1)},
                                       std::pair{Shape{2, 64, 8, 8}, Pool2dOptions::square(2)}}) {
          INFO(name << " " << dtype_name(dtype) << " " << shape_str(shape) << (nhwc ? " nhwc" : " nchw") << " kernel "
                    << o.kernel_h);
          const Tensor host = input(shape);
          const auto prepare = [&] {
            Tensor x = host.to(backend).to(dtype);
            if (nhwc) x = x.contiguous(MemoryFormat::channels_last);
            x = x.detach();
            x.set_requires_grad(true);
            return x;
          };
          const Tensor a = prepare(), b = prepare();
          const Tensor fused = max_pool2d_relu(a, o), composed = relu(max_pool2d(b, o));
          CHECK(fused.memory_format() == composed.memory_format());
          CHECK(bytes_of(fused) == bytes_of(composed));
          const Tensor dy = Tensor::uniform(fused.shape(), -1, 1, gen, DType::f32, ref()).to(backend).to(dtype);
          sum(mul(fused, dy)).backward();
          sum(mul(composed, dy)).backward();
          CHECK(bytes_of(a.grad()) == bytes_of(b.grad()));
        }
      }
    }
  }
}

TEST_CASE("backends: conv2d_relu_max_pool2d, inference's one-call conv block, is the composed ops", "[backends]") {
  // Where a backend fuses it (onednn: the convolution reads x where it lies and writes the layout it
  // likes, blocks of 8 or 16 by ISA, in slices of the batch) against the composed ops on the same
  // backend: the same values up to the convolution's rounding, NaN where they have NaN, in either
  // output layout; elsewhere the composed ops themselves. With a gradient wanted, the composed ops.
  Generator gen(106);
  std::vector<std::string> names = fast_backends();
  names.push_back("reference");
  struct Case {
    Shape x, w;
    bool bias;
  };
  // SmallCNN's conv1 and conv2, channels a multiple of 8 but not 16, odd sizes, and a batch cut into
  // slices of 2 (512 KiB of output per sample: 1 MiB slices).
  const Case cases[] = {{{2, 3, 12, 10}, {32, 3, 3, 3}, true},
                        {{3, 5, 9, 11}, {24, 5, 3, 3}, false},
                        {{2, 32, 16, 16}, {64, 32, 3, 3}, true},
                        {{5, 3, 64, 64}, {32, 3, 3, 3}, true}};
  const Conv2dOptions o = Conv2dOptions::square(1, 1);
  const Pool2dOptions pool = Pool2dOptions::square(2);
  for (const auto& name : names) {
    Backend& backend = get_backend(name);
    for (DType dtype : {DType::f32, DType::bf16}) {
      if (!runs_here(backend, BackendOp::conv2d, dtype, false)) continue;
      for (const Case& c : cases) {
        Tensor host_x = random(c.x, gen);
        std::vector<float> xv = host_x.to_vector<float>();
        xv[xv.size() / 3] = std::numeric_limits<float>::quiet_NaN();  // a NaN reaches a few windows
        host_x = Tensor::from_vector(xv, c.x, ref());
        const Tensor w = random(c.w, gen, -0.3, 0.3).to(backend).to(dtype);
        const Tensor b = c.bias ? random({c.w[0]}, gen).to(backend).to(dtype) : Tensor();
        for (bool in_nhwc : {false, true}) {
          for (bool out_nhwc : {false, true}) {
            INFO(name << " " << dtype_name(dtype) << " x " << shape_str(c.x) << " w " << shape_str(c.w)
                      << (in_nhwc ? " nhwc" : " nchw") << " -> " << (out_nhwc ? "nhwc" : "nchw"));
            const MemoryFormat out_format = out_nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
            Tensor x = host_x.to(backend).to(dtype);
            if (in_nhwc) x = x.contiguous(MemoryFormat::channels_last);
            NoGradGuard no_grad;
            const Tensor got = conv2d_relu_max_pool2d(x, w, b, o, pool, out_format);
            const Tensor want = max_pool2d_relu(conv2d_fused(x, w, b, false, o), pool);
            REQUIRE(got.shape() == want.shape());
            CHECK(got.is_contiguous(out_format));
            const auto g = values(got), e = values(want);
            double diff = 0, norm = 0;
            std::int64_t nans = 0;
            for (std::size_t i = 0; i < g.size(); ++i) {
              CHECK(std::isnan(g[i]) == std::isnan(e[i]));
              if (std::isnan(e[i])) {
                ++nans;
                continue;
              }
              CHECK(g[i] >= 0);  // the ReLU (+0 or more)
              diff += (g[i] - e[i]) * (g[i] - e[i]);
              norm += e[i] * e[i];
            }
            CHECK(nans > 0);
            CHECK(std::sqrt(diff / norm) < tolerance(dtype));
          }
        }
      }
    }
  }
  // With a gradient wanted: the composed ops, recorded for backward.
  Backend& backend = get_backend(fast_backends().front());
  Tensor x = random({2, 3, 8, 8}, gen).to(backend).detach();
  x.set_requires_grad(true);
  const Tensor w = random({16, 3, 3, 3}, gen).to(backend), b = random({16}, gen).to(backend);
  const Tensor y = conv2d_relu_max_pool2d(x, w, b, o, pool, MemoryFormat::channels_last);
  CHECK(y.memory_format() == MemoryFormat::channels_last);
  REQUIRE(y.grad_fn() != nullptr);
  sum(y).backward();
  CHECK(x.grad().defined());
}

// Winograd's results g against the direct sums' e: NaN and infinity in the same places (some of
// them exactly when the input was poisoned), the finite values within f32's tolerance.
void check_like_direct(const std::vector<double>& g, const std::vector<double>& e, bool poisoned) {
  REQUIRE(g.size() == e.size());
  double diff = 0, norm = 0;
  std::int64_t odd = 0, mismatched = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(e[i]) || !std::isfinite(g[i])) {
      ++odd;
      mismatched += std::isnan(e[i]) != std::isnan(g[i]) || (std::isinf(e[i]) && e[i] != g[i]) ? 1 : 0;
      continue;
    }
    diff += (g[i] - e[i]) * (g[i] - e[i]);
    norm += e[i] * e[i];
  }
  CHECK(mismatched == 0);
  CHECK((odd > 0) == poisoned);
  CHECK(std::sqrt(diff / norm) < tolerance(DType::f32));
}

TEST_CASE("backends: inference's conv block by Winograd (AVX2) is the composed ops, NaN where theirs is",
          "[backends][winograd-avx2]") {
  // Where cpu::winograd::chosen(Pass::inference) (auto: f32, channels_last, 3x3 stride 1, channels by
  // 8, on AVX2; engine.backends.winograd-avx2 runs this capped to AVX2) the onednn backend's
  // inference block is trainlab's Winograd then the pool, a slice of the batch at a time: against
  // the composed ops (the direct convolution), within F(4x4,3x3)'s rounding; an input with a NaN or
  // an infinity in one slice gets the direct convolution for that slice, so that NaN and infinity
  // land exactly where the composed ops put them. The same for a convolution alone on frozen
  // weights (inference's conv2d_forward, the ResNet's), with its ReLU and without. Elsewhere both are
  // the direct ones.
  const auto fast = fast_backends();
  if (std::find(fast.begin(), fast.end(), "onednn") == fast.end()) {
    WARN("skipped: no onednn backend in this build");
    return;
  }
  Backend& backend = get_backend("onednn");
  Generator gen(109);
  struct Case {
    Shape x, w;
  };
  // SmallCNN's conv2; odd sizes (a partial tile, a row and column in no window); 1 MiB of output a
  // sample (slices of one).
  const Case cases[] = {
      {{4, 32, 16, 16}, {64, 32, 3, 3}}, {{3, 16, 9, 11}, {24, 16, 3, 3}}, {{3, 8, 64, 64}, {64, 8, 3, 3}}};
  const Conv2dOptions o = Conv2dOptions::square(1, 1);
  const Pool2dOptions pool = Pool2dOptions::square(2);
  bool winograd = false;
  for (const Case& c : cases) {
    Conv2dShape cs{c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], 3, 3, 1, 1, 1, 1};
    cs.channels_last = true;
    winograd = winograd || cpu::winograd::chosen(DType::f32, cs, cpu::winograd::Pass::inference);
    for (int poisoned = 0; poisoned < 3; ++poisoned) {  // none, a NaN, an infinity: in the last sample
      INFO("x " << shape_str(c.x) << " w " << shape_str(c.w) << " poisoned " << poisoned);
      std::vector<float> xv = random(c.x, gen).to_vector<float>();
      if (poisoned > 0)
        xv[xv.size() - xv.size() / (2 * c.x[0])] =
            poisoned == 1 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
      const Tensor x = Tensor::from_vector(xv, c.x, ref()).to(backend).contiguous(MemoryFormat::channels_last);
      const Tensor w = random(c.w, gen, -0.3, 0.3).to(backend), b = random({c.w[0]}, gen).to(backend);
      NoGradGuard no_grad;
      auto check = [&](const Tensor& got, const Tensor& want) {
        REQUIRE(got.shape() == want.shape());
        check_like_direct(values(got), values(want), poisoned > 0);
      };
      const Tensor composed = conv2d_fused(x, w, b, false, o);
      // The conv block, and (the ResNet's inference) the convolution alone on frozen weights, with
      // its ReLU and without.
      check(conv2d_relu_max_pool2d(x, w, b, o, pool, MemoryFormat::channels_last), max_pool2d_relu(composed, pool));
      FrozenWeightsScope frozen(backend);
      check(conv2d_fused(x, w, b, false, o), composed);
      check(conv2d_fused(x, w, b, true, o), relu(composed));
    }
  }
  const std::string described = backend.describe();
  INFO(described);
  CHECK((described.find("Winograd F(4x4,3x3) inference") != std::string::npos) == winograd);
}

TEST_CASE("backends: Winograd's gradient for the input (AVX2) puts NaN and infinity where the direct one does",
          "[backends][winograd-avx2]") {
  // Training's backward-data by Winograd (auto: on AVX2; engine.backends.winograd-avx2 runs this
  // capped to AVX2) against the reference backend's direct sums: within F(4x4,3x3)'s rounding, and
  // with a NaN or an infinity in dy the pass computed again directly, so that dx is NaN (or
  // infinite) exactly where the direct sum's is.
  const auto fast = fast_backends();
  if (std::find(fast.begin(), fast.end(), "onednn") == fast.end()) {
    WARN("skipped: no onednn backend in this build");
    return;
  }
  Generator gen(110);
  const Shape xs{2, 16, 9, 11}, ws{24, 16, 3, 3};
  const Conv2dOptions o = Conv2dOptions::square(1, 1);
  const Tensor host_x = random(xs, gen), host_w = random(ws, gen, -0.3, 0.3);
  const Shape ys{2, 24, 9, 11};
  for (int poisoned = 0; poisoned < 3; ++poisoned) {  // none, a NaN, an infinity in dy
    INFO("poisoned " << poisoned);
    std::vector<float> rv = random(ys, gen).to_vector<float>();
    if (poisoned > 0)
      rv[rv.size() / 2 + 5] =
          poisoned == 1 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    std::vector<std::vector<double>> dx;
    for (Backend* be : {&get_backend("onednn"), &ref()}) {
      Tensor x = host_x.to(*be).contiguous(MemoryFormat::channels_last).detach();
      x.set_requires_grad(true);
      const Tensor y = conv2d_fused(x, host_w.to(*be), Tensor(), false, o);
      sum(mul(y, Tensor::from_vector(rv, ys, ref()).to(*be))).backward();
      dx.push_back(values(x.grad()));
    }
    check_like_direct(dx[0], dx[1], poisoned > 0);
  }
}

TEST_CASE("backends: conv2d_relu_max_pool2d in training, a first layer's block in one op, is the composed ops",
          "[backends]") {
  // Where the backend fuses it (supports_fused(FusedPattern::conv_block(true)): onednn, f32 and native bf16,
  // 1..4 input channels) the output, the weight and the bias gradients against the composed ops on the same
  // backend (y's gradient a random R; NaN-free so that the norms compare), every pair of layouts,
  // an odd convolution output (its last row and column in no window: no gradient from them), a
  // batch cut into slices, and a window whose maximum is <= 0 (no gradient through it); elsewhere
  // the composed ops. An input that needs a gradient gets the composed ops.
  Generator gen(107);
  struct Case {
    Shape x, w;
    std::int64_t pad;
  };
  const Case cases[] = {{{2, 3, 12, 10}, {32, 3, 3, 3}, 1},
                        {{3, 1, 9, 11}, {8, 1, 3, 3}, 1},
                        {{2, 4, 11, 9}, {16, 4, 3, 3}, 0},
                        {{5, 3, 64, 64}, {32, 3, 3, 3}, 1}};
  const Pool2dOptions pool = Pool2dOptions::square(2);
  std::int64_t fused_cases = 0;
  for (const auto& name : fast_backends()) {
    Backend& backend = get_backend(name);
    for (DType dtype : {DType::f32, DType::bf16}) {
      if (!runs_here(backend, BackendOp::conv2d, dtype, false)) continue;
      for (const Case& c : cases) {
        const Conv2dOptions o = Conv2dOptions::square(1, c.pad);
        const Tensor host_x = random(c.x, gen), host_w = random(c.w, gen, -0.3, 0.3), host_b = random({c.w[0]}, gen);
        for (bool in_nhwc : {false, true}) {
          for (bool out_nhwc : {false, true}) {
            INFO(name << " " << dtype_name(dtype) << " x " << shape_str(c.x) << " w " << shape_str(c.w) << " pad "
                      << c.pad << (in_nhwc ? " nhwc" : " nchw") << " -> " << (out_nhwc ? "nhwc" : "nchw"));
            const MemoryFormat out_format = out_nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
            Tensor x = host_x.to(backend).to(dtype);
            if (in_nhwc) x = x.contiguous(MemoryFormat::channels_last);
            std::vector<Tensor> w, b, y;
            for (int fused = 0; fused < 2; ++fused) {
              w.push_back(host_w.to(backend).to(dtype).detach());
              b.push_back(host_b.to(backend).to(dtype).detach());
              w.back().set_requires_grad(true);
              b.back().set_requires_grad(true);
              y.push_back(fused ? conv2d_relu_max_pool2d(x, w.back(), b.back(), o, pool, out_format)
                                : max_pool2d_relu(conv2d_fused(x, w.back(), b.back(), false, o), pool));
            }
            REQUIRE(y[1].shape() == y[0].shape());
            CHECK(y[1].is_contiguous(out_format));
            const bool one_op = std::string(y[1].grad_fn()->name) == "conv2d_relu_max_pool2d";
            fused_cases += one_op ? 1 : 0;
            Conv2dShape cs{c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], 3, 3, 1, 1, c.pad, c.pad};
            cs.channels_last = in_nhwc;
            Pool2dShape ps{c.x[0], c.w[0], cs.out_h(), cs.out_w(), 2, 2, 2, 2, 0, 0};
            ps.channels_last = out_nhwc;
            ps.relu = true;
            CHECK(one_op == backend.supports_fused(FusedPattern::conv_block(true), dtype, in_nhwc, {&cs, &ps}).runs());
            const Tensor r = random(y[0].shape(), gen).to(backend).to(dtype);
            for (int fused = 0; fused < 2; ++fused) sum(mul(y[static_cast<std::size_t>(fused)], r)).backward();
            CHECK(relative_error(y[1], y[0]) < tolerance(dtype));
            CHECK(relative_error(w[1].grad(), w[0].grad()) < tolerance(dtype));
            CHECK(relative_error(b[1].grad(), b[0].grad()) < tolerance(dtype));
          }
        }
      }
    }
  }
  const auto fast = fast_backends();
  if (std::find(fast.begin(), fast.end(), "onednn") != fast.end() && cpu::simd().isa >= cpu::CpuIsa::avx2)
    CHECK(fused_cases > 0);
  // An input that needs a gradient: the composed ops, and the gradient reaches it.
  Backend& backend = get_backend(fast_backends().front());
  Tensor x = random({2, 3, 8, 8}, gen).to(backend).detach();
  x.set_requires_grad(true);
  Tensor w = random({16, 3, 3, 3}, gen).to(backend).detach();
  w.set_requires_grad(true);
  const Tensor y = conv2d_relu_max_pool2d(x, w, Tensor(), Conv2dOptions::square(1, 1), pool, MemoryFormat::contiguous);
  CHECK(std::string(y.grad_fn()->name) != "conv2d_relu_max_pool2d");
  sum(y).backward();
  CHECK(x.grad().defined());
  CHECK(w.grad().defined());
}

TEST_CASE("backends: a fused Sequential takes the backend's patterns and gives the composed layers' values and grads",
          "[backends]") {
  // Any model of the engine's layers gets the fusions (engine/nn/module.h): conv ReLU pool as one
  // block (conv1), a conv alone with its bias (conv2), pool ReLU, linear ReLU, each where the backend runs it, on every
  // CPU backend, in f32 and under bf16 autocast, against the same network composed; the fused graph records the fused
  // ops (its last op is the head's linear_bias, its first conv block one op where the backend fuses it for an input
  // that needs no gradient).
  auto network = [](Backend& backend, std::uint64_t seed) {
    Generator gen(seed);
    const InitOptions init{&gen, DType::f32, &backend};
    auto net = std::make_shared<Sequential>();
    net->add("conv1", std::make_shared<Conv2d>(3, 16, 3, 1, 1, init)).add(std::make_shared<ReLU>());
    net->add(std::make_shared<MaxPool2d>(2)).add("conv2", std::make_shared<Conv2d>(16, 8, 3, 1, 1, init));
    net->add(std::make_shared<MaxPool2d>(2)).add(std::make_shared<ReLU>()).add(std::make_shared<Flatten>());
    net->add("fc1", std::make_shared<Linear>(8 * 2 * 2, 16, init));
    net->add(std::make_shared<ReLU>()).add("fc2", std::make_shared<Linear>(16, 4, init));
    return net;
  };
  Generator data(108);
  const Tensor host_x = random({3, 3, 8, 8}, data), host_r = random({3, 4}, data);
  std::vector<std::string> names = fast_backends();
  names.push_back("reference");
  for (const auto& name : names) {
    Backend& backend = get_backend(name);
    for (DType dtype : {DType::f32, DType::bf16}) {
      if (!runs_here(backend, BackendOp::conv2d, dtype, false)) continue;
      INFO(name << " " << dtype_name(dtype));
      // Composed and fused in `dtype`, and composed in f32: in bf16 the two forms round at different
      // places (the composed bias_add rounds the convolution's output once more), so each is held
      // to the f32 result and the fused one may not be worse than twice the composed one's error.
      std::vector<std::shared_ptr<Sequential>> nets{network(backend, 5), network(backend, 5), network(backend, 5)};
      nets[1]->set_fused(true);
      CHECK(nets[1]->fused());
      CHECK(nets[1]->named_parameters().front().first == "conv1.weight");
      std::vector<Tensor> y;
      for (std::size_t k = 0; k < nets.size(); ++k) {
        AutocastGuard autocast(k == 2 ? DType::f32 : dtype);
        y.push_back(nets[k]->forward(host_x.to(backend)));
        sum(mul(y.back(), host_r.to(backend).to(y.back().dtype()))).backward();
      }
      CHECK(std::string(y[1].grad_fn()->name) == "linear_bias");
      CHECK(std::string(y[0].grad_fn()->name) != "linear_bias");
      auto close = [&](const Tensor& fused, const Tensor& composed, const Tensor& f32) {
        if (dtype == DType::f32) return relative_error(fused, composed) < tolerance(dtype);
        const double fused_error = relative_error(fused, f32), composed_error = relative_error(composed, f32);
        INFO("fused " << fused_error << ", composed " << composed_error << " against f32");
        return fused_error <= 2 * composed_error + tolerance(dtype);
      };
      CHECK(close(y[1], y[0], y[2]));
      const auto p0 = nets[0]->named_parameters(), p1 = nets[1]->named_parameters(), p2 = nets[2]->named_parameters();
      REQUIRE(p0.size() == p1.size());
      for (std::size_t i = 0; i < p0.size(); ++i) {
        INFO(p0[i].first);
        REQUIRE(p1[i].second.grad().defined());
        CHECK(close(p1[i].second.grad(), p0[i].second.grad(), p2[i].second.grad()));
      }
    }
  }
}

TEST_CASE("backends: SmallCNN inference reads the NCHW batch where it lies and gives the training forward's logits",
          "[backends]") {
  for (const auto& name : fast_backends()) {
    Backend& backend = get_backend(name);
    for (DType dtype : {DType::f32, DType::bf16}) {
      if (!runs_here(backend, BackendOp::conv2d, dtype, true)) continue;
      INFO(name << " " << dtype_name(dtype));
      Generator gen(107);
      SmallCNN model(InitOptions{&gen, DType::f32, &backend});
      model.set_fused(true);
      const Tensor images = random({6, 3, 32, 32}, gen, 0, 1).to(backend);
      AutocastGuard autocast(dtype == DType::f32 ? DType::f32 : dtype);
      const Tensor trained = model.forward(images.contiguous(MemoryFormat::channels_last));  // grad mode on
      NoGradGuard no_grad;
      FrozenWeightsScope frozen(backend);
      const Tensor inferred = model.forward_in(images, MemoryFormat::channels_last);
      CHECK(relative_error(inferred, trained) < (dtype == DType::f32 ? 1e-5 : 2e-2));
      // The same on a channels_last batch, and with NCHW activations.
      CHECK(
          relative_error(model.forward_in(images.contiguous(MemoryFormat::channels_last), MemoryFormat::channels_last),
                         trained) < (dtype == DType::f32 ? 1e-5 : 2e-2));
      CHECK(relative_error(model.forward_in(images, MemoryFormat::contiguous), trained) <
            (dtype == DType::f32 ? 1e-5 : 2e-2));
    }
  }
}

TEST_CASE("backends: relu, bias_add, elementwise and reductions", "[backends]") {
  Generator gen(104);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      const Shape shape{3, 5, 7, 4};
      check_op(
          "relu", BackendOp::relu, dtype, [](const auto& x) { return relu(x[0]); }, {random(shape, gen)}, {true},
          {nhwc}, 800);
      check_op(
          "bias_add", BackendOp::bias_add, dtype, [](const auto& x) { return bias_add(x[0], x[1]); },
          {random(shape, gen), random({5}, gen)}, {true, true}, {nhwc, false}, 801);
      check_op(
          "mul", BackendOp::elementwise, dtype, [](const auto& x) { return mul(x[0], x[1]); },
          {random(shape, gen), random(shape, gen)}, {true, true}, {nhwc, nhwc}, 802);
    }
    check_op(
        "add_sub", BackendOp::elementwise, dtype, [](const auto& x) { return sub(add(x[0], x[1]), x[0]); },
        {random({17, 3}, gen), random({17, 3}, gen)}, {true, true}, {}, 803);
    check_op(
        "bias_add 2-D", BackendOp::bias_add, dtype, [](const auto& x) { return bias_add(x[0], x[1]); },
        {random({6, 11}, gen), random({11}, gen)}, {true, true}, {}, 804);
    check_op(
        "relu big", BackendOp::relu, dtype, [](const auto& x) { return relu(x[0]); }, {random({1 << 17}, gen)}, {true},
        {}, 805);
    check_op(
        "sum", BackendOp::elementwise, dtype, [](const auto& x) { return sum(x[0]); }, {random({1000, 3}, gen)}, {true},
        {}, 806);
  }
}

TEST_CASE("backends: cross_entropy", "[backends]") {
  Generator gen(105);
  for (DType dtype : kDtypes) {
    std::vector<std::int64_t> labels(13);
    for (auto& l : labels) l = static_cast<std::int64_t>(gen.below(10));
    const Tensor y = Tensor::from_vector(labels, {13}, ref());
    check_op(
        "cross_entropy", BackendOp::cross_entropy, dtype, [](const auto& x) { return cross_entropy(x[0], x[1]); },
        {random({13, 10}, gen, -4, 4), y}, {true, false}, {}, 900);
  }
}

TEST_CASE("backends: casts and optimiser steps", "[backends]") {
  Generator gen(106);
  const Tensor x = Tensor::normal({5000}, gen, DType::f32, ref());
  for (const auto& name : fast_backends()) {
    INFO(name);
    Backend& backend = get_backend(name);
    for (DType to : {DType::bf16, DType::f16, DType::f64}) {
      CHECK(bitwise_equal(x.to(backend).to(to).to(ref()), x.to(to)));
      CHECK(bitwise_equal(x.to(to).to(backend).to(DType::f32).to(ref()), x.to(to).to(DType::f32)));
    }
    for (const std::string kind : {"sgd", "adamw"}) {
      INFO(kind);
      auto make = [&](Backend& be, Tensor& p) -> std::unique_ptr<Optimizer> {
        p = x.to(be).detach();
        p.set_requires_grad(true);
        if (kind == "sgd") return std::make_unique<SGD>(NamedTensors{{"p", p}}, SgdOptions{0.1, 0.9, 0.0, 0.01, true});
        return std::make_unique<AdamW>(NamedTensors{{"p", p}}, AdamWOptions{});
      };
      Tensor pr, pb;
      auto opt_r = make(ref(), pr);
      auto opt_b = make(backend, pb);
      for (int step = 0; step < 3; ++step) {
        const Tensor g = Tensor::normal({5000}, gen, DType::f32, ref());
        pr.set_grad(g.clone());
        pb.set_grad(g.to(backend).clone());
        opt_r->step();
        opt_b->step();
      }
      CHECK(relative_error(pb.to(ref()), pr) < 1e-6);
    }
  }
}

TEST_CASE("backends: a steady-state training step allocates nothing and creates no primitive", "[backends]") {
  for (const auto& name : fast_backends()) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const MemoryFormat layout : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        for (bool fuse : {false, true}) {
          INFO(name << " " << dtype_name(dtype) << " " << memory_format_name(layout) << (fuse ? " fused" : ""));
          ThroughputConfig config;
          config.backend = name;
          config.dtype = dtype;
          config.layout = layout;
          config.fuse = fuse;
          config.batch = 16;
          config.warmup = 2;
          config.min_steps = 3;
          config.seconds = 0.01;
          config.ceiling_seconds = 0;
          const ThroughputResult result = measure_throughput(config);
          CHECK(result.steps >= 3);
          for (const char* counter : {"allocations", "primitives_created"}) {
            INFO(counter);
            if (result.counter_deltas.count(counter)) CHECK(result.counter_deltas.at(counter) == 0);
          }
          CHECK(result.counter_deltas.count("allocations") == 1);
        }
      }
    }
  }
  // The reference allocates on every step (it does not cache): the counter does see allocations.
  ThroughputConfig config;
  config.backend = "reference";
  config.batch = 4;
  config.warmup = 1;
  config.seconds = 0.01;
  CHECK(measure_throughput(config).counter_deltas.at("allocations") > 0);
}

TEST_CASE("backends: inference on frozen weights reorders each weight once and sees a changed one", "[backends]") {
  for (const auto& name : fast_backends()) {
    Backend& backend = get_backend(name);
    if (backend.frozen_weights() == nullptr) continue;
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (bool nhwc : {false, true}) {
        INFO(name << " " << dtype_name(dtype) << (nhwc ? " nhwc" : " nchw"));
        Generator gen(7);
        const Conv2dOptions o = Conv2dOptions::square(1, 1);
        auto on_backend = [&](const Tensor& t, bool cl = false) {
          Tensor out = t.to(backend).to(dtype);
          return cl ? out.contiguous(MemoryFormat::channels_last) : out;
        };
        const Tensor x = on_backend(random({4, 3, 12, 12}, gen), nhwc), h = on_backend(random({4, 40}, gen));
        Tensor conv_w = on_backend(random({8, 3, 3, 3}, gen, -0.3, 0.3)), fc_w = on_backend(random({16, 40}, gen));
        const Tensor conv_b = on_backend(random({8}, gen)), fc_b = on_backend(random({16}, gen));
        NoGradGuard no_grad;
        auto forward = [&] {
          return std::vector<Tensor>{conv2d_fused(x, conv_w, conv_b, true, o), linear_fused(h, fc_w, fc_b, true)};
        };
        const std::vector<Tensor> trained = forward();
        auto counter = [&](const char* counter_name) { return backend.counters().at(counter_name); };
        std::vector<Tensor> after_change;
        std::int64_t bytes_while_frozen = 0;
        {
          FrozenWeightsScope frozen(backend);
          REQUIRE(frozen.active());
          const std::vector<Tensor> first = forward();
          const auto after_first = counter("weight_reorders");
          const auto kept = counter("frozen_weights_kept");  // those not used in place: the conv's at least
          CHECK(kept >= 1);
          const std::vector<Tensor> second = forward();
          CHECK(counter("weight_reorders") == after_first);  // nothing reordered again
          for (std::size_t i = 0; i < trained.size(); ++i) {
            CHECK(relative_error(first[i], trained[i]) < tolerance(dtype));
            CHECK(values(second[i]) == values(first[i]));
          }
          // A weight changed in place under the promise is still seen (a sample of it differs).
          const auto changed = counter("frozen_weights_changed");
          conv_w.copy_(on_backend(random({8, 3, 3, 3}, gen, -0.3, 0.3)));
          fc_w.copy_(on_backend(random({16, 40}, gen)));
          after_change = forward();
          CHECK(counter("frozen_weights_changed") == changed + kept);
          {
            FrozenWeightsScope nested(backend);  // the same promise again: nothing is dropped when it ends
          }
          CHECK(counter("frozen_weights_kept") == kept);
          CHECK(counter("weight_reorders") == after_first + kept);
          bytes_while_frozen = backend.allocator_stats().bytes_in_use;
        }
        CHECK(counter("frozen_weights_kept") == 0);
        CHECK(backend.allocator_stats().bytes_in_use < bytes_while_frozen);  // the kept weights went back
        const std::vector<Tensor> unfrozen = forward();                      // the changed weights, training primitives
        for (std::size_t i = 0; i < unfrozen.size(); ++i) {
          CHECK(relative_error(after_change[i], unfrozen[i]) < tolerance(dtype));
          CHECK(relative_error(unfrozen[i], trained[i]) > 0.1);
        }
      }
    }
  }
}

namespace {

// Compares element by element, NaN-aware: NaN where the reference has NaN, the same infinity where
// it has one, and finite values within the dtype's tolerance (relative to the finite part's norm).
// With `spread_allowed`, a NaN may also stand where the reference is finite or infinite (never the
// other way round): oneDNN's bf16 convolutions multiply inputs beyond a window by zero weights
// (their tiles are padded), so an inf there becomes a NaN next door. Nothing non-finite is dropped.
void check_nonfinite_match(const Tensor& got, const Tensor& expected, DType dtype, const std::string& what,
                           bool spread_allowed = false) {
  const auto g = values(got), e = values(expected);
  REQUIRE(g.size() == e.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO(what << ": element " << i << " is " << g[i] << ", the reference has " << e[i]);
    if (std::isnan(e[i])) {
      CHECK(std::isnan(g[i]));
    } else if (spread_allowed && std::isnan(g[i])) {
      continue;
    } else if (std::isinf(e[i])) {
      CHECK(g[i] == e[i]);
    } else {
      CHECK(std::isfinite(g[i]));
      if (!std::isfinite(g[i])) continue;
      diff += (g[i] - e[i]) * (g[i] - e[i]);
      norm += e[i] * e[i];
    }
  }
  INFO(what);
  CHECK((norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm)) < tolerance(dtype));
}

// `op` on the reference and on every fast backend, with inputs that hold NaN and infinities:
// outputs and gradients must carry them in the same places.
void check_op_nonfinite(const std::string& label, BackendOp backend_op, DType dtype, const Op& op,
                        const std::vector<Tensor>& host_inputs, const std::vector<bool>& differentiable,
                        std::vector<bool> channels_last) {
  if (channels_last.empty()) channels_last.assign(host_inputs.size(), false);
  Generator gen(7);
  Tensor probe;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> inputs;
    for (const auto& t : host_inputs) inputs.push_back(is_floating(t.dtype()) ? t.to(dtype) : t);
    probe = op(inputs);
  }
  const Tensor weights = Tensor::uniform(probe.shape(), 0.5, 1, gen, DType::f32, ref());
  const Result expected = run(ref(), dtype, op, host_inputs, differentiable, channels_last, weights);
  for (const auto& name : fast_backends()) {
    Backend& backend = get_backend(name);
    if (!runs_here(backend, backend_op, dtype, channels_last[0])) continue;
    const std::string where = label + " on " + name + " in " + dtype_name(dtype);
    const Result got = run(backend, dtype, op, host_inputs, differentiable, channels_last, weights);
    // oneDNN's native bf16 convolutions spread a NaN across the outputs of its block (an emulated
    // one is an f32 convolution, which does not).
    const bool spread = name == "onednn" && dtype == DType::bf16 && backend_op == BackendOp::conv2d &&
                        backend.supports_op(backend_op, dtype, channels_last[0]).level == Support::native;
    check_nonfinite_match(got.output, expected.output, dtype, where + ", output", spread);
    for (std::size_t i = 0; i < expected.grads.size(); ++i) {
      const std::string what = where + ", gradient " + std::to_string(i);
      if (!spread) {
        check_nonfinite_match(got.grads[i], expected.grads[i], dtype, what);
        continue;
      }
      // The spread NaNs flow back through the ReLU, so only this holds: nothing non-finite in the
      // reference's gradient is finite here.
      const auto g = values(got.grads[i]), e = values(expected.grads[i]);
      for (std::size_t k = 0; k < e.size(); ++k) {
        INFO(what << ": element " << k << " is " << g[k] << ", the reference has " << e[k]);
        if (!std::isfinite(e[k])) CHECK(!std::isfinite(g[k]));
      }
    }
  }
}

// Uniform values with NaN, +inf and -inf planted at a few places.
Tensor with_nonfinite(const Shape& shape, Generator& gen, std::initializer_list<std::pair<std::int64_t, double>> at) {
  Tensor t = random(shape, gen);
  std::vector<double> v = values(t);
  for (const auto& [index, value] : at) v[static_cast<std::size_t>(index)] = value;
  return Tensor::from_vector(v, shape, ref()).to(DType::f32);
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("backends: relu and max-pool carry NaN and inf as PyTorch does", "[backends]") {
  // The oracle's own semantics, spelled out (torch.relu, threshold_backward on the result,
  // max_pool2d's NaN-propagating maximum with the gradient routed to it).
  const Tensor x =
      Tensor::from_vector(std::vector<double>{kNaN, kInf, -kInf, -1, 0, 2}, {6}, ref()).to(DType::f32).detach();
  for (const auto& name : [] {
         auto all = fast_backends();
         all.push_back("reference");
         return all;
       }()) {
    Backend& backend = get_backend(name);
    for (DType dtype : kDtypes) {
      if (!runs_here(backend, BackendOp::relu, dtype, false)) continue;
      INFO(name << " " << dtype_name(dtype));
      Tensor in = x.to(backend).to(dtype).detach();
      in.set_requires_grad(true);
      const Tensor y = relu(in);
      sum(y).backward();
      const auto out = values(y), grad = values(in.grad());
      CHECK(std::isnan(out[0]));
      CHECK(out[1] == kInf);
      CHECK(out[2] == 0);
      CHECK(out[3] == 0);
      CHECK(out[4] == 0);
      CHECK(out[5] == 2);
      CHECK(grad == std::vector<double>{1, 1, 0, 0, 0, 1});  // NaN positions pass the gradient, as in PyTorch

      // A 2x2 max-pool over three windows: {NaN, 1, 2, 3} -> NaN; {-inf x 4} -> -inf (its first
      // element takes the gradient); {inf, 5, NaN, 0} -> NaN (a NaN wins even over inf).
      const Tensor image = Tensor::from_vector(std::vector<double>{kNaN, 1, -kInf, -kInf, kInf, 5,  //
                                                                   2, 3, -kInf, -kInf, kNaN, 0},
                                               {1, 1, 2, 6}, ref());
      for (bool nhwc : {false, true}) {
        INFO((nhwc ? "nhwc" : "nchw"));
        Tensor p = image.to(backend)
                       .to(dtype)
                       .contiguous(nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous)
                       .detach();
        p.set_requires_grad(true);
        const Tensor pooled = max_pool2d(p, Pool2dOptions::square(2));
        sum(pooled).backward();
        const auto o = values(pooled);
        REQUIRE(o.size() == 3);
        CHECK(std::isnan(o[0]));
        CHECK(o[1] == -kInf);
        CHECK(std::isnan(o[2]));
        CHECK(values(p.grad()) == std::vector<double>{1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0});
      }
    }
  }
}

TEST_CASE("backends: NaN and inf inputs, every op against the reference", "[backends]") {
  Generator gen(106);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      INFO((nhwc ? "nhwc" : "nchw"));
      const Conv2dOptions o = Conv2dOptions::square(1, 1);
      const Tensor x = with_nonfinite({2, 3, 6, 5}, gen, {{7, kNaN}, {40, kInf}, {75, -kInf}});
      const std::vector<Tensor> conv_in = {x, random({4, 3, 3, 3}, gen), random({4}, gen)};
      for (bool relu_after : {false, true}) {
        check_op_nonfinite("conv2d_fused", BackendOp::conv2d, dtype,
                           [o, relu_after](const auto& t) { return conv2d_fused(t[0], t[1], t[2], relu_after, o); },
                           conv_in, {true, true, true}, {nhwc, false, false});
      }
      check_op_nonfinite("relu", BackendOp::relu, dtype, [](const auto& t) { return relu(t[0]); }, {x}, {true}, {nhwc});
      check_op_nonfinite("max_pool2d", BackendOp::max_pool2d, dtype,
                         [](const auto& t) { return max_pool2d(t[0], Pool2dOptions::square(2)); },
                         {with_nonfinite({2, 3, 6, 4}, gen, {{3, kNaN}, {9, kInf}, {30, -kInf}, {31, kNaN}})}, {true},
                         {nhwc});
    }
    const std::vector<Tensor> fc_in = {with_nonfinite({3, 20}, gen, {{2, kNaN}, {45, kInf}}), random({5, 20}, gen),
                                       random({5}, gen)};
    for (bool relu_after : {false, true}) {
      check_op_nonfinite("linear_fused", BackendOp::linear, dtype,
                         [relu_after](const auto& t) { return linear_fused(t[0], t[1], t[2], relu_after); }, fc_in,
                         {true, true, true}, {});
    }
  }
}

TEST_CASE("backends: SmallCNN on NaN images has a NaN loss on every backend (as PyTorch)", "[backends]") {
  for (const auto& name : [] {
         auto all = fast_backends();
         all.push_back("reference");
         return all;
       }()) {
    Backend& backend = get_backend(name);
    for (bool fused : {false, true}) {
      INFO(name << (fused ? " fused" : ""));
      Generator gen(5);
      SmallCNN model(InitOptions{&gen, DType::f32, &backend});
      model.set_fused(fused);
      std::vector<float> nan_images(2 * 3 * 32 * 32, std::numeric_limits<float>::quiet_NaN());
      const Tensor images = Tensor::from_host(nan_images.data(), {2, 3, 32, 32}, DType::f32, backend);
      const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{1, 7}, {2}, backend);
      const Tensor loss = cross_entropy(model.forward(images), labels);
      CHECK(std::isnan(loss.item()));
      loss.backward();
      for (const auto& [pname, param] : model.named_parameters()) {
        INFO(pname);
        const auto g = values(param.grad());
        CHECK(std::all_of(g.begin(), g.end(), [](double v) { return std::isnan(v); }));
      }
    }
  }
}

// ---- one device per process (backends/device_selection.h) ----

namespace {
GetEnv environment(std::map<std::string, std::string> values) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}
}  // namespace

TEST_CASE("device selection: the launcher's local rank picks the GPU", "[backends]") {
  SECTION("no launcher: one process, GPU 0") {
    const LocalPlacement placement = placement_from_environment(environment({}));
    CHECK(placement.local_rank == 0);
    CHECK(placement.local_size == 1);
    CHECK(choose_device(placement, 1, nullptr).device == 0);
  }
  SECTION("Open MPI, MPICH, Slurm and torchrun variables, first found wins") {
    auto ompi = placement_from_environment(
        environment({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"LOCAL_RANK", "3"}}));
    CHECK(ompi.local_rank == 1);
    CHECK(ompi.local_size == 4);
    CHECK(ompi.source == "OMPI_COMM_WORLD_LOCAL_RANK");
    auto hydra = placement_from_environment(environment({{"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}}));
    CHECK(hydra.local_rank == 2);
    CHECK(hydra.local_size == 3);
    // Slurm's "2(x3)" form says nothing plain about this node: the size is at least rank + 1.
    auto slurm = placement_from_environment(environment({{"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "2(x3)"}}));
    CHECK(slurm.local_rank == 1);
    CHECK(slurm.local_size == 2);
    auto torchrun = placement_from_environment(environment({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "8"}}));
    CHECK(torchrun.local_size == 8);
    const DeviceChoice choice = choose_device(ompi, 4, nullptr);
    CHECK(choice.device == 1);
    CHECK_THAT(choice.reason, Catch::Contains("local rank 1 of 4") && Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK"));
  }
  SECTION("malformed launcher variables are named") {
    CHECK_THROWS_WITH(placement_from_environment(environment({{"OMPI_COMM_WORLD_LOCAL_RANK", "one"}})),
                      Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK='one'"));
    CHECK_THROWS_WITH(placement_from_environment(
                          environment({{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}})),
                      Catch::Contains("is not below OMPI_COMM_WORLD_LOCAL_SIZE=4"));
  }
  SECTION("more local ranks than GPUs is an error with the counts") {
    LocalPlacement placement;
    placement.local_rank = 1;
    placement.local_size = 2;
    placement.source = "OMPI_COMM_WORLD_LOCAL_RANK";
    CHECK_THROWS_WITH(choose_device(placement, 1, nullptr),
                      Catch::Contains("2 ranks run on this host") && Catch::Contains("it has 1 GPU(s)"));
    CHECK_THROWS_WITH(choose_device(placement, 0, nullptr), Catch::Contains("no GPU"));
  }
  SECTION("per-rank CUDA_VISIBLE_DEVICES (Slurm --gpus-per-task=1): each rank's own GPUs") {
    LocalPlacement placement;
    placement.local_rank = 1;
    placement.local_size = 2;
    placement.source = "SLURM_LOCALID";
    const DeviceChoice one = choose_device(placement, 1, nullptr, "3");  // rank 1 sees only physical GPU 3
    CHECK(one.device == 0);
    CHECK(one.reason.find("CUDA_VISIBLE_DEVICES=3 shows this rank 1 GPU(s), so it takes visible device 0") !=
          std::string::npos);
    placement.local_rank = 3;
    placement.local_size = 4;
    CHECK(choose_device(placement, 2, nullptr, "4,5").device == 1);  // two GPUs per rank: local rank modulo
    // Enough GPUs for every local rank: the local rank, as without the variable.
    placement.local_size = 2;
    placement.local_rank = 1;
    CHECK(choose_device(placement, 2, nullptr, "0,1").device == 1);
    // Unset or empty: the counts decide, as before.
    CHECK_THROWS_WITH(choose_device(placement, 1, nullptr, ""), Catch::Contains("CUDA_VISIBLE_DEVICES"));
  }
  SECTION("TRAINLAB_CUDA_DEVICE overrides, within range") {
    LocalPlacement placement;
    placement.local_rank = 1;
    placement.local_size = 2;
    const DeviceChoice choice = choose_device(placement, 4, "3");
    CHECK(choice.device == 3);
    CHECK(choice.reason == "TRAINLAB_CUDA_DEVICE=3");
    CHECK_THROWS_WITH(choose_device(placement, 4, "4"), Catch::Contains("allowed: 0..3"));
    CHECK_THROWS_WITH(choose_device(placement, 4, "x"), Catch::Contains("TRAINLAB_CUDA_DEVICE='x'"));
  }
}

TEST_CASE("device selection: the backend and the communicator claim the same GPU, or fail naming both", "[backends]") {
  // The same local placement seen by both (the launcher's variables, and MPI_Comm_split_type).
  LocalPlacement from_launcher;
  from_launcher.local_rank = 1;
  from_launcher.local_size = 2;
  from_launcher.source = "OMPI_COMM_WORLD_LOCAL_RANK";
  LocalPlacement from_mpi = from_launcher;
  from_mpi.source = "MPI_Comm_split_type";
  {
    DeviceClaim claim;
    CHECK(claim.claim(choose_device(from_launcher, 2, nullptr), "cuda backend") == 1);
    CHECK(claim.claim(choose_device(from_mpi, 2, nullptr), "nccl communicator") == 1);
    REQUIRE(claim.claimed());
    CHECK(claim.claimant() == "cuda backend");
  }
  {
    // A launcher that sets no variables: the backend sees one process (GPU 0), MPI sees rank 1.
    DeviceClaim claim;
    claim.claim(choose_device(placement_from_environment(environment({})), 2, nullptr), "cuda backend");
    CHECK_THROWS_WITH(claim.claim(choose_device(from_mpi, 2, nullptr), "nccl communicator"),
                      Catch::Contains("cuda backend runs on GPU 0") &&
                          Catch::Contains("nccl communicator chose GPU 1 (local rank 1 of 2 (MPI_Comm_split_type))"));
  }
  {
    // The override applies to both.
    DeviceClaim claim;
    claim.claim(choose_device(from_launcher, 2, "0"), "cuda backend");
    CHECK(claim.claim(choose_device(from_mpi, 2, "0"), "nccl communicator") == 0);
  }
}
