// The cross-backend harness (harness.h) for a residual network's layers: batch norm in training
// and eval, with and without its fused epilogue (residual add, ReLU), 4-D in both layouts and 2-D;
// global average pooling; the channel-padding shortcut; dropout, whose mask every backend draws
// alike (backends/counter_rng.h), so its output is compared as any other op's.
#include "backends/registry.h"
#include "engine/nn/module.h"
#include "harness.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;
using namespace trainlab::test::harness;

namespace {

// Running statistics on x's backend in the statistics dtype (the harness casts floating inputs to
// the case's dtype; buffers stay f32).
Tensor stat_buffer(const Tensor& values, const Tensor& like) {
  return values.to(like.backend()).to(batch_norm_stat_dtype(like.dtype())).detach();
}

}  // namespace

TEST_CASE("backends: batch_norm, training and eval, with its epilogue, both layouts", "[backends]") {
  Generator gen(120);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      // none; a residual; a ReLU (its sign recomputed from x); both (its sign from y); eval with each.
      for (int trial = 0; trial < 6; ++trial) {
        const std::int64_t n = between(gen, 1, 4), c = between(gen, 1, 19), h = between(gen, 1, 9),
                           w = between(gen, 2, 11);
        const bool training = trial < 4, residual = trial % 2 == 1 || trial == 4, relu = trial >= 2;
        INFO("x [" << n << "," << c << "," << h << "," << w << "]" << (nhwc ? " nhwc" : " nchw")
                   << (training ? " training" : " eval") << (residual ? " +residual" : "") << (relu ? " relu" : ""));
        // Off-centre inputs with a per-channel scale: the shifted sums must hold the mean.
        const std::vector<Tensor> in = {add_scalar(random({n, c, h, w}, gen, -2, 3), 1.5),
                                        random({c}, gen, 0.5, 1.5),
                                        random({c}, gen),
                                        random({n, c, h, w}, gen),
                                        random({c}, gen),
                                        random({c}, gen, 0.2, 2)};
        check_op(
            "batch_norm", BackendOp::batch_norm, dtype,
            [=](const auto& x) {
              BatchNormOptions o;
              o.training = training;
              return batch_norm(x[0], x[1], x[2], stat_buffer(x[4], x[0]), stat_buffer(x[5], x[0]), o,
                                residual ? x[3] : Tensor(), relu);
            },
            in, {true, true, true, residual, false, false}, {nhwc, false, false, nhwc, false, false},
            800 + static_cast<std::uint64_t>(trial));
      }
    }
    // [N, C] (a 1-D batch norm's view) and no affine.
    check_op(
        "batch_norm 2-D", BackendOp::batch_norm, dtype,
        [](const auto& x) { return batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), BatchNormOptions{}); },
        {random({9, 5}, gen), random({5}, gen, 0.5, 1.5), random({5}, gen)}, {true, true, true}, {}, 810);
    check_op(
        "batch_norm no affine", BackendOp::batch_norm, dtype,
        [](const auto& x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), BatchNormOptions{}); },
        {random({3, 6, 5, 4}, gen)}, {true}, {}, 811);
  }
}

TEST_CASE("backends: batch_norm's running statistics move as PyTorch's", "[backends]") {
  Generator gen(121);
  const Tensor x = random({4, 3, 5, 5}, gen, -1, 3);
  const auto xs = values(x);
  for (const auto& name : cpu_backends()) {
    Backend& backend = get_backend(name);
    for (bool nhwc : {false, true}) {
      INFO(name << (nhwc ? " nhwc" : " nchw"));
      Tensor rm = Tensor::full({3}, 0.5, DType::f32, backend), rv = Tensor::full({3}, 2.0, DType::f32, backend);
      Tensor xb = x.to(backend);
      if (nhwc) xb = xb.contiguous(MemoryFormat::channels_last);
      BatchNormOptions o;
      o.momentum = 0.25;
      (void)batch_norm(xb, Tensor(), Tensor(), rm, rv, o);
      const auto m = rm.to_vector<float>(), v = rv.to_vector<float>();
      for (std::int64_t c = 0; c < 3; ++c) {
        double mean = 0, sq = 0;
        for (std::int64_t i = 0; i < 4; ++i)
          for (std::int64_t p = 0; p < 25; ++p) mean += xs[static_cast<std::size_t>((i * 3 + c) * 25 + p)];
        mean /= 100;
        for (std::int64_t i = 0; i < 4; ++i)
          for (std::int64_t p = 0; p < 25; ++p) {
            const double d = xs[static_cast<std::size_t>((i * 3 + c) * 25 + p)] - mean;
            sq += d * d;
          }
        CHECK(m[static_cast<std::size_t>(c)] == Approx(0.75 * 0.5 + 0.25 * mean).epsilon(1e-6));
        CHECK(v[static_cast<std::size_t>(c)] == Approx(0.75 * 2.0 + 0.25 * sq / 99).epsilon(1e-6));  // unbiased
      }
    }
  }
}

TEST_CASE("backends: global_avg_pool2d, both layouts", "[backends]") {
  Generator gen(122);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      for (const Shape& shape : {Shape{2, 3, 4, 4}, Shape{3, 17, 7, 5}, Shape{1, 64, 8, 8}, Shape{2, 5, 1, 1}}) {
        INFO(shape_str(shape) << (nhwc ? " nhwc" : " nchw"));
        check_op(
            "global_avg_pool2d", BackendOp::avg_pool, dtype, [](const auto& x) { return global_avg_pool2d(x[0]); },
            {random(shape, gen)}, {true}, {nhwc}, 820);
      }
    }
  }
}

TEST_CASE("backends: pad_channels, the option-A shortcut, both layouts", "[backends]") {
  Generator gen(123);
  for (DType dtype : kDtypes) {
    for (bool nhwc : {false, true}) {
      struct Case {
        Shape shape;
        std::int64_t channels, stride, before;
      };
      for (const Case& c : {Case{{2, 4, 8, 8}, 8, 2, 2}, Case{{3, 5, 7, 9}, 11, 2, 0}, Case{{1, 3, 5, 5}, 7, 3, 4},
                            Case{{2, 6, 4, 4}, 6, 1, 0}}) {
        INFO(shape_str(c.shape) << " -> " << c.channels << " stride " << c.stride << (nhwc ? " nhwc" : " nchw"));
        check_op(
            "pad_channels", BackendOp::elementwise, dtype,
            [c](const auto& x) { return pad_channels(x[0], c.channels, c.stride, c.before); }, {random(c.shape, gen)},
            {true}, {nhwc}, 830);
      }
    }
  }
}

TEST_CASE("backends: dropout draws the same mask on every backend", "[backends]") {
  Generator gen(124);
  for (DType dtype : kDtypes) {
    for (double p : {0.1, 0.5, 0.9}) {
      INFO("p " << p);
      check_op(
          "dropout", BackendOp::dropout, dtype,
          [p](const auto& x) {
            dropout_stream() = CounterStream{77, 1000};  // the same draws for every backend's run
            return dropout(x[0], p, true);
          },
          {random({5, 33, 7}, gen)}, {true}, {}, 840);
    }
  }
}

TEST_CASE("backends: conv2d_batch_norm, inference's folded pattern, against the composed ops", "[backends]") {
  Generator gen(125);
  const Tensor x0 = random({3, 5, 9, 7}, gen), w0 = random({6, 5, 3, 3}, gen, -0.3, 0.3);
  const Tensor gamma = random({6}, gen, 0.5, 1.5), beta = random({6}, gen), rm = random({6}, gen, -0.2, 0.2),
               rv = random({6}, gen, 0.5, 2), residual0 = random({3, 6, 9, 7}, gen);
  const Conv2dOptions o = Conv2dOptions::square(1, 1);
  std::vector<std::string> names = fast_backends();
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool nhwc : {false, true}) {
      for (int epilogue = 0; epilogue < 3; ++epilogue) {
        const bool with_residual = epilogue >= 1, relu = epilogue == 2;
        const auto layout = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
        auto on = [&](Backend& be, const Tensor& t, bool activation) {
          Tensor out = t.to(be);
          if (activation) out = out.to(dtype).contiguous(layout);
          return out;
        };
        NoGradGuard no_grad;
        BatchNormOptions bn;
        bn.training = false;
        const Tensor expected = batch_norm(conv2d(on(ref(), x0, true), on(ref(), w0, true).detach(), o), gamma, beta,
                                           rm, rv, bn, with_residual ? on(ref(), residual0, true) : Tensor(), relu);
        for (const auto& name : names) {
          Backend& be = get_backend(name);
          if (!runs_here(be, BackendOp::conv2d, dtype, nhwc)) continue;
          const FusedPattern pattern =
              FusedPattern::conv_norm(with_residual, relu ? Activation::relu : Activation::none);
          INFO(name << " " << dtype_name(dtype) << (nhwc ? " nhwc" : " nchw") << " " << pattern.str() << ": "
                    << be.supports_fused(pattern, dtype, nhwc).how);
          const Tensor got = conv2d_batch_norm(on(be, x0, true), on(be, w0, true), on(be, gamma, false),
                                               on(be, beta, false), on(be, rm, false), on(be, rv, false), o, 1e-5,
                                               with_residual ? on(be, residual0, true) : Tensor(), relu);
          CHECK(got.memory_format() == expected.memory_format());
          CHECK(relative_error(got, expected) < tolerance(dtype));
        }
      }
    }
  }
}
