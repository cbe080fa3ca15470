// The CPU backends share one set of kernels (backends/cpu/: elementwise, ReLU, bias, max-pool,
// cross-entropy, casts, the optimiser steps), so the cross-backend harness, which compares the
// fast backends with the reference, cannot see a bug in them: all three would agree. Each shared
// kernel is checked here against an independent computation written out in double, on every CPU
// backend, in f32 and bf16, with sizes that leave vector tails, ties, and NaN where it matters.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/conv_few_channels.h"
#include "backends/cpu/conv_winograd.h"
#include "backends/registry.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

// Values on `backend` in `dtype`, and what they are after rounding to it (the oracle's input).
struct Buffer {
  Tensor tensor;
  std::vector<double> exact;
};
Buffer make(Backend& backend, DType dtype, const std::vector<double>& v) {
  Buffer b;
  b.tensor = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}, ref()).to(dtype).to(backend);
  b.exact = values(b.tensor);
  return b;
}
Buffer zeros(Backend& backend, DType dtype, std::size_t n) { return make(backend, dtype, std::vector<double>(n, 0.0)); }

std::vector<double> uniform(std::size_t n, Generator& gen, double lo = -2, double hi = 2) {
  std::vector<double> v(n);
  for (auto& x : v) x = gen.uniform(lo, hi);
  return v;
}

double rounded(double v, DType dtype) {
  return values(Tensor::from_vector(std::vector<double>{v}, {1}, ref()).to(dtype))[0];
}

// Within one rounding of the dtype (NaN matching NaN).
void check_close(const std::vector<double>& got, const std::vector<double>& want, DType dtype, const char* what,
                 double tolerance = 0) {
  REQUIRE(got.size() == want.size());
  const double tol = tolerance > 0 ? tolerance : dtype == DType::bf16 ? 1e-2 : dtype == DType::f32 ? 1e-6 : 1e-12;
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else {
      CHECK(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
    }
  }
}

const DType kDtypes[] = {DType::f32, DType::bf16};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("shared kernels: elementwise, reductions, casts and strided copies against double", "[backends]") {
  Generator gen(11);
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    for (DType dt : kDtypes) {
      if (!be.supports(dt)) continue;
      INFO(name << " " << dtype_name(dt));
      const std::size_t n = 1000 + 37;  // past a chunk of 32 and 16-wide vectors, with a tail
      const Buffer a = make(be, dt, uniform(n, gen)), b = make(be, dt, uniform(n, gen, 0.5, 2));
      Buffer y = zeros(be, dt, n);
      const std::pair<BinaryOp, double (*)(double, double)> ops[] = {
          {BinaryOp::add, [](double x, double z) { return x + z; }},
          {BinaryOp::sub, [](double x, double z) { return x - z; }},
          {BinaryOp::mul, [](double x, double z) { return x * z; }},
          {BinaryOp::div, [](double x, double z) { return x / z; }}};
      for (const auto& [op, f] : ops) {
        be.binary(op, dt, a.tensor.raw_data(), b.tensor.raw_data(), y.tensor.raw_data(), static_cast<std::int64_t>(n));
        std::vector<double> want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = rounded(f(a.exact[i], b.exact[i]), dt);
        check_close(values(y.tensor), want, dt, "binary");
      }
      be.affine(dt, a.tensor.raw_data(), y.tensor.raw_data(), static_cast<std::int64_t>(n), 0.5, -0.25);
      std::vector<double> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = rounded(0.5 * a.exact[i] - 0.25, dt);
      check_close(values(y.tensor), want, dt, "affine");
      Buffer acc = make(be, dt, b.exact);
      be.axpy(dt, static_cast<std::int64_t>(n), -1.5, a.tensor.raw_data(), acc.tensor.raw_data());
      for (std::size_t i = 0; i < n; ++i) want[i] = rounded(b.exact[i] - 1.5 * a.exact[i], dt);
      check_close(values(acc.tensor), want, dt, "axpy");
      Buffer total = zeros(be, dt, 1);
      be.sum(dt, a.tensor.raw_data(), static_cast<std::int64_t>(n), total.tensor.raw_data());
      double s = 0, magnitude = 0;
      for (double v : a.exact) s += v, magnitude += std::abs(v);
      // Summed in f32 partials: within a few f32 roundings of the sum of magnitudes.
      check_close(values(total.tensor), {rounded(s, dt)}, dt, "sum",
                  (dt == DType::bf16 ? 1e-2 : 1e-6) * std::max(1.0, magnitude));
      be.fill(dt, y.tensor.raw_data(), static_cast<std::int64_t>(n), 3.25);
      check_close(values(y.tensor), std::vector<double>(n, 3.25), dt, "fill");
      // Casts both ways, and a strided copy (a transpose) against index arithmetic.
      Buffer wide = zeros(be, DType::f32, n);
      be.cast(dt, a.tensor.raw_data(), DType::f32, wide.tensor.raw_data(), static_cast<std::int64_t>(n));
      check_close(values(wide.tensor), a.exact, DType::f32, "cast");
      {  // narrowing by dtype.h's rule on every backend and ISA: subnormals kept, ties to even
        const std::vector<std::uint32_t> bits = {0x00010000u, 0x007fffffu, 0x80000001u, 0x00418000u,
                                                 0x00408000u, 0x3f808000u, 0xff7fffffu, 0x00000000u};
        const auto count = static_cast<std::int64_t>(bits.size());
        Tensor from = Tensor::empty({count}, DType::f32, be), to = Tensor::empty({count}, DType::bf16, be);
        std::memcpy(from.raw_data(), bits.data(), bits.size() * sizeof(float));
        be.cast(DType::f32, from.raw_data(), DType::bf16, to.raw_data(), count);
        const auto* narrowed = static_cast<const bf16*>(to.raw_data());
        for (std::size_t i = 0; i < bits.size(); ++i) {
          float v = 0;
          std::memcpy(&v, &bits[i], sizeof(float));
          INFO("f32 bits " << std::hex << bits[i]);
          CHECK(narrowed[i].bits == f32_to_bf16_bits(v));
        }
      }
      const std::int64_t rows = 13, cols = 29;
      const Buffer m = make(be, dt, uniform(static_cast<std::size_t>(rows * cols), gen));
      Buffer t = zeros(be, dt, static_cast<std::size_t>(rows * cols));
      be.copy_strided(dt, m.tensor.raw_data(), Layout{{rows, cols}, {cols, 1}, 0}, t.tensor.raw_data(),
                      Layout{{rows, cols}, {1, rows}, 0});
      std::vector<double> transposed(static_cast<std::size_t>(rows * cols));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          transposed[static_cast<std::size_t>(c * rows + r)] = m.exact[static_cast<std::size_t>(r * cols + c)];
      check_close(values(t.tensor), transposed, dt, "copy_strided");
      // NCHW -> NHWC and back, a block per sample (the flatten of a channels_last pool output).
      const std::int64_t nn = 3, ch = 24, hh = 5, ww = 9, plane = hh * ww, all = nn * ch * plane;
      const Buffer nchw = make(be, dt, uniform(static_cast<std::size_t>(all), gen));
      Buffer nhwc = zeros(be, dt, static_cast<std::size_t>(all)), back = zeros(be, dt, static_cast<std::size_t>(all));
      const Layout contiguous{{nn, ch, hh, ww}, {ch * plane, plane, ww, 1}, 0};
      const Layout channels_last{{nn, ch, hh, ww}, {ch * plane, 1, ww * ch, ch}, 0};
      be.copy_strided(dt, nchw.tensor.raw_data(), contiguous, nhwc.tensor.raw_data(), channels_last);
      std::vector<double> want_nhwc(static_cast<std::size_t>(all));
      for (std::int64_t img = 0; img < nn; ++img)
        for (std::int64_t c = 0; c < ch; ++c)
          for (std::int64_t q = 0; q < plane; ++q)
            want_nhwc[static_cast<std::size_t>((img * plane + q) * ch + c)] =
                nchw.exact[static_cast<std::size_t>((img * ch + c) * plane + q)];
      check_close(values(nhwc.tensor), want_nhwc, dt, "copy_strided to channels_last");
      be.copy_strided(dt, nhwc.tensor.raw_data(), channels_last, back.tensor.raw_data(), contiguous);
      check_close(values(back.tensor), nchw.exact, dt, "copy_strided back to NCHW");
    }
  }
}

TEST_CASE("shared kernels: relu, bias and cross-entropy against double", "[backends]") {
  Generator gen(12);
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    for (DType dt : kDtypes) {
      if (!be.supports(dt)) continue;
      INFO(name << " " << dtype_name(dt));
      const std::size_t n = 16 * 31 + 13;  // vector bodies and a tail
      std::vector<double> x = uniform(n, gen);
      x[5] = kNaN;
      x[6] = 0.0;
      x[7] = -0.0;
      const Buffer in = make(be, dt, x), dy = make(be, dt, uniform(n, gen));
      Buffer y = zeros(be, dt, n), dx = zeros(be, dt, n);
      be.relu_forward(dt, in.tensor.raw_data(), y.tensor.raw_data(), static_cast<std::int64_t>(n));
      be.relu_backward(dt, y.tensor.raw_data(), dy.tensor.raw_data(), dx.tensor.raw_data(),
                       static_cast<std::int64_t>(n));
      std::vector<double> want_y(n), want_dx(n);
      for (std::size_t i = 0; i < n; ++i) {
        want_y[i] = std::isnan(in.exact[i]) ? kNaN : std::max(in.exact[i], 0.0);
        want_dx[i] = std::isnan(want_y[i]) || want_y[i] > 0 ? dy.exact[i] : 0.0;  // PyTorch's threshold_backward
      }
      check_close(values(y.tensor), want_y, dt, "relu_forward");
      check_close(values(dx.tensor), want_dx, dt, "relu_backward");

      const std::int64_t outer = 3, channels = 7, inner = 11;
      const std::size_t m = static_cast<std::size_t>(outer * channels * inner);
      const Buffer bx = make(be, dt, uniform(m, gen)), bias = make(be, dt, uniform(7, gen)),
                   bdy = make(be, dt, uniform(m, gen));
      Buffer by = zeros(be, dt, m), dbias = zeros(be, dt, 7);
      be.bias_add_forward(dt, bx.tensor.raw_data(), bias.tensor.raw_data(), by.tensor.raw_data(), outer, channels,
                          inner);
      be.bias_add_backward(dt, bdy.tensor.raw_data(), dbias.tensor.raw_data(), outer, channels, inner);
      std::vector<double> want_by(m), want_db(7, 0.0);
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t c = 0; c < channels; ++c)
          for (std::int64_t k = 0; k < inner; ++k) {
            const auto i = static_cast<std::size_t>((o * channels + c) * inner + k);
            want_by[i] = rounded(bx.exact[i] + bias.exact[static_cast<std::size_t>(c)], dt);
            want_db[static_cast<std::size_t>(c)] += bdy.exact[i];
          }
      for (auto& v : want_db) v = rounded(v, dt);
      check_close(values(by.tensor), want_by, dt, "bias_add_forward");
      check_close(values(dbias.tensor), want_db, dt, "bias_add_backward");

      const std::int64_t batch = 5, classes = 9;
      const Buffer logits = make(be, dt, uniform(static_cast<std::size_t>(batch * classes), gen, -4, 4));
      const std::vector<std::int64_t> labels = {0, 8, 3, 3, 5};
      const Tensor lab = Tensor::from_vector(labels, {batch}, be);
      Buffer probs = zeros(be, dt, static_cast<std::size_t>(batch * classes)), loss = zeros(be, dt, 1),
             dlogits = zeros(be, dt, static_cast<std::size_t>(batch * classes));
      const Buffer dloss = make(be, dt, {0.75});
      be.softmax_cross_entropy_forward(dt, logits.tensor.raw_data(), lab.data<std::int64_t>(), batch, classes,
                                       probs.tensor.raw_data(), loss.tensor.raw_data());
      be.softmax_cross_entropy_backward(dt, probs.tensor.raw_data(), lab.data<std::int64_t>(), batch, classes,
                                        dloss.tensor.raw_data(), dlogits.tensor.raw_data());
      double want_loss = 0;
      std::vector<double> want_d(static_cast<std::size_t>(batch * classes));
      for (std::int64_t r = 0; r < batch; ++r) {
        const double* row = logits.exact.data() + r * classes;
        const double top = *std::max_element(row, row + classes);
        double z = 0;
        for (std::int64_t c = 0; c < classes; ++c) z += std::exp(row[c] - top);
        want_loss += -(row[labels[static_cast<std::size_t>(r)]] - top - std::log(z)) / static_cast<double>(batch);
        for (std::int64_t c = 0; c < classes; ++c) {
          const double p = std::exp(row[c] - top) / z;
          want_d[static_cast<std::size_t>(r * classes + c)] =
              (p - (c == labels[static_cast<std::size_t>(r)] ? 1.0 : 0.0)) * 0.75 / static_cast<double>(batch);
        }
      }
      check_close(values(loss.tensor), {want_loss}, dt, "cross_entropy loss");
      check_close(values(dlogits.tensor), want_d, dt, "cross_entropy gradient");
    }
  }
}

TEST_CASE("shared kernels: max-pool, the 2x2 fast path and the general loop, against double", "[backends]") {
  Generator gen(13);
  struct Case {
    std::int64_t n, c, h, w, k, stride, pad;
  };
  // 2x2 stride 2 (the fast path: channel counts that leave vector tails, odd sizes), and general windows.
  const Case cases[] = {{2, 37, 9, 7, 2, 2, 0},
                        {1, 64, 8, 8, 2, 2, 0},
                        {3, 5, 6, 10, 2, 2, 0},
                        {2, 3, 7, 9, 3, 2, 1},
                        {1, 4, 5, 5, 2, 1, 0}};
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    for (DType dt : kDtypes) {
      if (!be.supports(dt)) continue;
      for (const Case& k : cases) {
        for (bool nhwc : {false, true}) {
          INFO(name << " " << dtype_name(dt) << " [" << k.n << "," << k.c << "," << k.h << "," << k.w << "] k" << k.k
                    << " s" << k.stride << " p" << k.pad << (nhwc ? " nhwc" : " nchw"));
          const std::size_t size = static_cast<std::size_t>(k.n * k.c * k.h * k.w);
          std::vector<double> x(size);
          for (auto& v : x) v = static_cast<double>(gen.below(7)) - 3;  // small integers: many ties
          x[3] = kNaN;
          x[size / 2] = -std::numeric_limits<double>::infinity();
          const Buffer in = make(be, dt, x);  // the values in logical NCHW order...
          const Pool2dShape s{k.n, k.c, k.h, k.w, k.k, k.k, k.stride, k.stride, k.pad, k.pad, nhwc};
          // ... laid out in memory as the layout says.
          Tensor xin = in.tensor.view({k.n, k.c, k.h, k.w});
          if (nhwc) xin = xin.contiguous(MemoryFormat::channels_last);
          Tensor y = Tensor::empty({k.n, k.c, s.out_h(), s.out_w()}, dt, be,
                                   nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous);
          const std::size_t ws_bytes = be.max_pool2d_workspace_bytes(dt, s);
          Tensor ws = Tensor::empty({static_cast<std::int64_t>((ws_bytes + 7) / 8)}, DType::i64, be);
          be.max_pool2d_forward(dt, s, xin.raw_data(), y.raw_data(), ws.raw_data());
          // The gradient: each output's dy lands on its window's first maximum (a NaN wins).
          Tensor dy = Tensor::from_vector(uniform(static_cast<std::size_t>(k.n * k.c * s.out_h() * s.out_w()), gen),
                                          {k.n, k.c, s.out_h(), s.out_w()}, ref())
                          .to(dt)
                          .to(be);
          if (nhwc) dy = dy.contiguous(MemoryFormat::channels_last);
          Tensor dx = Tensor::empty({k.n, k.c, k.h, k.w}, dt, be,
                                    nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous);
          be.max_pool2d_backward(dt, s, dy.raw_data(), ws.raw_data(), dx.raw_data());
          const std::vector<double> dyv = values(dy);
          std::vector<double> want_y(static_cast<std::size_t>(k.n * k.c * s.out_h() * s.out_w()));
          std::vector<double> want_dx(size, 0.0);
          for (std::int64_t b = 0; b < k.n; ++b)
            for (std::int64_t c = 0; c < k.c; ++c)
              for (std::int64_t oh = 0; oh < s.out_h(); ++oh)
                for (std::int64_t ow = 0; ow < s.out_w(); ++ow) {
                  double best = 0;
                  std::int64_t at = -1;
                  for (std::int64_t i = 0; i < k.k; ++i)
                    for (std::int64_t j = 0; j < k.k; ++j) {
                      const std::int64_t ih = oh * k.stride - k.pad + i, iw = ow * k.stride - k.pad + j;
                      if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                      const std::int64_t idx = ((b * k.c + c) * k.h + ih) * k.w + iw;
                      const double v = in.exact[static_cast<std::size_t>(idx)];
                      if (at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                        best = v;
                        at = idx;
                      }
                    }
                  const auto o = static_cast<std::size_t>(((b * k.c + c) * s.out_h() + oh) * s.out_w() + ow);
                  want_y[o] = best;
                  want_dx[static_cast<std::size_t>(at)] += dyv[o];
                }
          for (auto& v : want_dx) v = rounded(v, dt);
          check_close(values(y), want_y, dt, "max_pool2d_forward");
          check_close(values(dx), want_dx, dt, "max_pool2d_backward");
        }
      }
    }
  }
}

TEST_CASE("shared kernels: a first layer's weight gradient (few input channels) against double", "[backends]") {
  // backends/cpu/conv_few_channels.h, which the onednn backend runs for 1..4 input channels: every
  // weight and bias gradient against the sum in double, both layouts, f32 and bf16, paddings 0..k-1,
  // kernels 1..5 and not square, output channels by 8, more than one group of 64 images; the same
  // bits whatever the thread count.
  const Conv2dShape base{2, 3, 8, 8, 16, 3, 3, 1, 1, 1, 1};
  if (cpu::simd().isa < cpu::CpuIsa::avx2) {
    // Below AVX2 the path is not taken: oneDNN's kernels compute these gradients.
    CHECK_FALSE(cpu::conv_few::applies(DType::f32, base));
    WARN("skipped: the first-layer weight gradient needs the AVX2 loops; this process runs the plain ones");
    return;
  }
  Generator gen(16);
  struct Case {
    std::int64_t n, c, h, w, o, kh, kw, ph, pw;
  };
  const Case cases[] = {{2, 3, 9, 7, 32, 3, 3, 1, 1},
                        {3, 1, 6, 6, 8, 5, 5, 2, 0},
                        {2, 4, 5, 8, 24, 1, 3, 0, 2},
                        {70, 2, 4, 4, 16, 3, 3, 1, 1},
                        {1, 3, 32, 32, 40, 3, 3, 0, 1}};
  for (DType dt : kDtypes) {
    for (const Case& k : cases) {
      for (bool nhwc : {false, true}) {
        Conv2dShape s{k.n, k.c, k.h, k.w, k.o, k.kh, k.kw, 1, 1, k.ph, k.pw};
        s.channels_last = nhwc;
        INFO(dtype_name(dt) << " x [" << k.n << "," << k.c << "," << k.h << "," << k.w << "] " << k.o
                            << " outputs, kernel " << k.kh << "x" << k.kw << " pad " << k.ph << "," << k.pw
                            << (nhwc ? " nhwc" : " nchw"));
        REQUIRE(cpu::conv_few::applies(dt, s));
        const std::int64_t oh = s.out_h(), ow = s.out_w();
        // Logical NCHW values, rounded to the dtype (the oracle's input), laid out as the layout says.
        const Buffer x = make(ref(), dt, uniform(static_cast<std::size_t>(k.n * k.c * k.h * k.w), gen));
        const Buffer dy = make(ref(), dt, uniform(static_cast<std::size_t>(k.n * k.o * oh * ow), gen, -1, 1));
        const auto format = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
        const Tensor xin = x.tensor.view({k.n, k.c, k.h, k.w}).contiguous(format);
        const Tensor dyin = dy.tensor.view({k.n, k.o, oh, ow}).contiguous(format);
        std::vector<double> want_w(static_cast<std::size_t>(k.o * k.c * k.kh * k.kw), 0.0),
            want_b(static_cast<std::size_t>(k.o), 0.0);
        for (std::int64_t n = 0; n < k.n; ++n)
          for (std::int64_t o = 0; o < k.o; ++o)
            for (std::int64_t y = 0; y < oh; ++y)
              for (std::int64_t xx = 0; xx < ow; ++xx) {
                const double g = dy.exact[static_cast<std::size_t>(((n * k.o + o) * oh + y) * ow + xx)];
                want_b[static_cast<std::size_t>(o)] += g;
                for (std::int64_t c = 0; c < k.c; ++c)
                  for (std::int64_t i = 0; i < k.kh; ++i)
                    for (std::int64_t j = 0; j < k.kw; ++j) {
                      const std::int64_t h = y + i - k.ph, w = xx + j - k.pw;
                      if (h < 0 || h >= k.h || w < 0 || w >= k.w) continue;
                      want_w[static_cast<std::size_t>(((o * k.c + c) * k.kh + i) * k.kw + j)] +=
                          g * x.exact[static_cast<std::size_t>(((n * k.c + c) * k.h + h) * k.w + w)];
                    }
              }
        std::vector<Tensor> dw, db;
        for (int threads : {1, 2}) {
          dw.push_back(Tensor::empty({k.o, k.c, k.kh, k.kw}, dt, ref()));
          db.push_back(Tensor::empty({k.o}, dt, ref()));
          std::vector<float> workspace(cpu::conv_few::workspace_bytes(dt, s, threads) / sizeof(float), kNaN);
          cpu::conv_few::backward_weights(dt, s, xin.raw_data(), dyin.raw_data(), dw.back().raw_data(),
                                          db.back().raw_data(), threads, workspace.data());
        }
        // f32 sums of up to 70 x 32 x 32 terms of either sign: 1e-5 of the largest gradient.
        double scale = 1;
        for (double v : want_w) scale = std::max(scale, std::abs(v));
        check_close(values(dw[0]), want_w, dt, "dweight", dt == DType::f32 ? 1e-5 * scale : 0);
        check_close(values(db[0]), want_b, dt, "dbias", dt == DType::f32 ? 1e-5 * scale : 0);
        CHECK(values(dw[0]) == values(dw[1]));
        CHECK(values(db[0]) == values(db[1]));
      }
    }
  }
  // What it does not take: stride 2, 5 input channels, 12 outputs (not a multiple of 8), f16.
  Conv2dShape strided = base, wide = base, odd = base;
  strided.stride_h = 2;
  wide.in_channels = 5;
  odd.out_channels = 12;
  CHECK_FALSE(cpu::conv_few::applies(DType::f32, strided));
  CHECK_FALSE(cpu::conv_few::applies(DType::f32, wide));
  CHECK_FALSE(cpu::conv_few::applies(DType::f32, odd));
  CHECK_FALSE(cpu::conv_few::applies(DType::f16, base));
}

namespace {
// Whether a bf16 working copy is its f32 parameter rounded once, bit for bit (CPU memory).
bool working_is_cast(const Tensor& param, const Tensor& working) {
  const auto* f = static_cast<const float*>(param.raw_data());
  const auto* b = static_cast<const bf16*>(working.raw_data());
  for (std::int64_t i = 0; i < param.numel(); ++i)
    if (b[i].bits != f32_to_bf16_bits(f[i])) return false;
  return true;
}
}  // namespace

TEST_CASE("shared kernels: the whole-model SGD and AdamW steps, with working copies, against double", "[backends]") {
  Generator gen(14);
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    INFO(name);
    const std::size_t sizes[] = {37, 70000, 5};  // the middle one spans three of the CPU loops' chunks
    std::vector<Buffer> params, grads, m, v;
    std::vector<Tensor> working;
    std::vector<OptimizerSlot> slots;
    for (std::size_t s : sizes) {
      params.push_back(make(be, DType::f32, uniform(s, gen)));
      grads.push_back(make(be, DType::f32, uniform(s, gen)));
      m.push_back(make(be, DType::f32, uniform(s, gen, -0.1, 0.1)));
      v.push_back(make(be, DType::f32, uniform(s, gen, 0, 0.1)));
      working.push_back(Tensor::empty({static_cast<std::int64_t>(s)}, DType::bf16, be));
    }
    SECTION("SGD with momentum, weight decay and nesterov") {
      const SgdStep step{0.1, 0.9, 0.0, 0.01, true, false};
      for (std::size_t i = 0; i < params.size(); ++i) {
        slots.push_back({params[i].tensor.raw_data(), grads[i].tensor.raw_data(), m[i].tensor.raw_data(), nullptr,
                         params[i].tensor.numel(), i == 2, 0, working[i].raw_data(), DType::bf16});
      }
      be.sgd_step_all(DType::f32, slots, step);
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::vector<double> want(params[i].exact.size()), want_buf(want.size());
        for (std::size_t k = 0; k < want.size(); ++k) {
          const double d = grads[i].exact[k] + 0.01 * params[i].exact[k];
          want_buf[k] = i == 2 ? d : 0.9 * m[i].exact[k] + d;  // the first step starts the buffer at d
          want[k] = params[i].exact[k] - 0.1 * (d + 0.9 * want_buf[k]);
        }
        check_close(values(params[i].tensor), want, DType::f32, "sgd param");
        check_close(values(m[i].tensor), want_buf, DType::f32, "sgd momentum buffer");
        for (auto& w : want) w = rounded(w, DType::bf16);
        check_close(values(working[i]), want, DType::bf16, "sgd working copy");
        CHECK(working_is_cast(params[i].tensor, working[i]));
      }
    }
    SECTION("AdamW at different steps per parameter") {
      const AdamWStep step{0.01, 0.9, 0.999, 1e-8, 0.1, 0};
      const std::int64_t steps[] = {1, 7, 3};
      for (std::size_t i = 0; i < params.size(); ++i) {
        slots.push_back({params[i].tensor.raw_data(), grads[i].tensor.raw_data(), m[i].tensor.raw_data(),
                         v[i].tensor.raw_data(), params[i].tensor.numel(), false, steps[i], working[i].raw_data(),
                         DType::bf16});
      }
      be.adamw_step_all(DType::f32, slots, step);
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::vector<double> want(params[i].exact.size());
        for (std::size_t k = 0; k < want.size(); ++k) {
          const double g = grads[i].exact[k];
          const double mm = 0.9 * m[i].exact[k] + 0.1 * g, vv = 0.999 * v[i].exact[k] + 0.001 * g * g;
          const double b1 = 1 - std::pow(0.9, static_cast<double>(steps[i]));
          const double b2 = 1 - std::pow(0.999, static_cast<double>(steps[i]));
          want[k] = params[i].exact[k] * (1 - 0.01 * 0.1) - 0.01 / b1 * mm / (std::sqrt(vv) / std::sqrt(b2) + 1e-8);
        }
        check_close(values(params[i].tensor), want, DType::f32, "adamw param");
        for (auto& w : want) w = rounded(w, DType::bf16);
        check_close(values(working[i]), want, DType::bf16, "adamw working copy");
        CHECK(working_is_cast(params[i].tensor, working[i]));
      }
    }
  }
}

TEST_CASE("shared kernels: the loss scaler's unscale and finiteness check against double", "[backends]") {
  Generator gen(15);
  for (const auto& name : cpu_backends()) {
    Backend& be = get_backend(name);
    INFO(name);
    std::vector<double> x = uniform(1000, gen, -1000, 1000);
    Buffer b = make(be, DType::f32, x);
    CHECK(be.unscale_and_check_finite(DType::f32, b.tensor.raw_data(), 1000, 1.0 / 1024));
    std::vector<double> want(b.exact.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = b.exact[i] / 1024;
    check_close(values(b.tensor), want, DType::f32, "unscale");
    x[999] = std::numeric_limits<double>::infinity();
    Buffer bad = make(be, DType::f32, x);
    CHECK_FALSE(be.unscale_and_check_finite(DType::f32, bad.tensor.raw_data(), 1000, 0.5));
  }
}

TEST_CASE("shared kernels: Winograd F(4x4, 3x3) convolution, forward and both gradients, against double",
          "[backends]") {
  // backends/cpu/conv_winograd.h, which the onednn backend runs for f32 3x3 convolutions of stride 1
  // on AVX2: the forward (with and without bias and ReLU) and the backward pass for the input (the
  // kernel turned, channels swapped) against the sums in double; images whose sides are not a
  // multiple of 4 (partial tiles), 1x1 images, output channels by 8 and by 16, more tiles than a
  // chunk; the backward pass for the weights and the bias too; the same bits at 1, 2 and 3 threads.
  Conv2dShape shape{2, 8, 8, 8, 16, 3, 3, 1, 1, 1, 1};
  shape.channels_last = true;
  if (cpu::simd().isa < cpu::CpuIsa::avx2) {
    CHECK_FALSE(cpu::winograd::applies(DType::f32, shape));
    WARN("skipped: the Winograd convolution needs the AVX2 loops; this process runs the plain ones");
    return;
  }
  Generator gen(17);
  struct Case {
    std::int64_t n, c, h, w, o;
  };
  const Case cases[] = {{2, 8, 8, 8, 16}, {3, 16, 7, 5, 24}, {1, 32, 16, 16, 64},
                        {5, 8, 1, 1, 8},  {30, 8, 4, 4, 8},  {2, 64, 9, 11, 32}};
  for (const Case& k : cases) {
    INFO("x [" << k.n << "," << k.c << "," << k.h << "," << k.w << "] nhwc, " << k.o << " outputs");
    Conv2dShape s{k.n, k.c, k.h, k.w, k.o, 3, 3, 1, 1, 1, 1};
    s.channels_last = true;
    REQUIRE(cpu::winograd::applies(DType::f32, s));
    auto floats = [&](std::int64_t count) {
      std::vector<float> v(static_cast<std::size_t>(count));
      for (auto& e : v) e = static_cast<float>(gen.uniform(-1, 1));
      return v;
    };
    const std::vector<float> x = floats(k.n * k.h * k.w * k.c), weight = floats(k.o * k.c * 9), bias = floats(k.o),
                             dy = floats(k.n * k.h * k.w * k.o);
    // The sums in double: y [n][h][w][o] (before bias), dx [n][h][w][c].
    std::vector<double> want_y(static_cast<std::size_t>(k.n * k.h * k.w * k.o), 0.0),
        want_dx(static_cast<std::size_t>(k.n * k.h * k.w * k.c), 0.0);
    for (std::int64_t n = 0; n < k.n; ++n)
      for (std::int64_t r = 0; r < k.h; ++r)
        for (std::int64_t q = 0; q < k.w; ++q)
          for (std::int64_t i = 0; i < 3; ++i)
            for (std::int64_t j = 0; j < 3; ++j) {
              const std::int64_t rr = r + i - 1, qq = q + j - 1;
              if (rr < 0 || rr >= k.h || qq < 0 || qq >= k.w) continue;
              for (std::int64_t o = 0; o < k.o; ++o)
                for (std::int64_t c = 0; c < k.c; ++c) {
                  const double wv = weight[static_cast<std::size_t>(((o * k.c + c) * 3 + i) * 3 + j)];
                  want_y[static_cast<std::size_t>(((n * k.h + r) * k.w + q) * k.o + o)] +=
                      wv * x[static_cast<std::size_t>(((n * k.h + rr) * k.w + qq) * k.c + c)];
                  want_dx[static_cast<std::size_t>(((n * k.h + rr) * k.w + qq) * k.c + c)] +=
                      wv * dy[static_cast<std::size_t>(((n * k.h + r) * k.w + q) * k.o + o)];
                }
            }
    // f32 sums of up to 64 x 9 terms in [-1, 1] through the transforms: 2e-6 of the terms' count.
    const double tolerance = 2e-6 * static_cast<double>(std::max(k.c, k.o) * 9);
    std::vector<float> u(cpu::winograd::weights_floats(k.c, k.o)), ub(cpu::winograd::weights_floats(k.o, k.c));
    cpu::winograd::transform_weights(weight.data(), k.o, k.c, false, u.data());
    cpu::winograd::transform_weights(weight.data(), k.o, k.c, true, ub.data());
    for (const bool with_bias : {false, true}) {
      for (const bool relu : {false, true}) {
        INFO((with_bias ? "bias" : "no bias") << (relu ? ", relu" : ""));
        std::vector<std::vector<float>> y;
        for (int threads : {1, 2}) {
          std::vector<float> workspace(cpu::winograd::workspace_bytes(k.c, k.o, threads) / sizeof(float), kNaN);
          y.emplace_back(want_y.size(), kNaN);
          cpu::winograd::convolve(x.data(), k.n, k.h, k.w, k.c, u.data(), k.o, with_bias ? bias.data() : nullptr, relu,
                                  y.back().data(), threads, workspace.data());
        }
        double worst = 0;
        for (std::size_t e = 0; e < want_y.size(); ++e) {
          double want = want_y[e] + (with_bias ? bias[e % static_cast<std::size_t>(k.o)] : 0.0);
          if (relu && want <= 0) want = 0;
          worst = std::max(worst, std::abs(y[0][e] - want));
        }
        CHECK(worst <= tolerance);
        CHECK(y[0] == y[1]);
      }
    }
    // The weights' gradient and the bias's, in double: dW[o][c][i][j] = sum dy[o] x[c] under tap (i, j).
    std::vector<double> want_dw(weight.size(), 0.0), want_db(static_cast<std::size_t>(k.o), 0.0);
    for (std::int64_t n = 0; n < k.n; ++n)
      for (std::int64_t r = 0; r < k.h; ++r)
        for (std::int64_t q = 0; q < k.w; ++q)
          for (std::int64_t o = 0; o < k.o; ++o) {
            const double g = dy[static_cast<std::size_t>(((n * k.h + r) * k.w + q) * k.o + o)];
            want_db[static_cast<std::size_t>(o)] += g;
            for (std::int64_t i = 0; i < 3; ++i)
              for (std::int64_t j = 0; j < 3; ++j) {
                const std::int64_t rr = r + i - 1, qq = q + j - 1;
                if (rr < 0 || rr >= k.h || qq < 0 || qq >= k.w) continue;
                for (std::int64_t c = 0; c < k.c; ++c)
                  want_dw[static_cast<std::size_t>(((o * k.c + c) * 3 + i) * 3 + j)] +=
                      g * x[static_cast<std::size_t>(((n * k.h + rr) * k.w + qq) * k.c + c)];
              }
          }
    std::vector<std::vector<float>> dw, db;
    for (int threads : {1, 2, 3}) {
      std::vector<float> workspace(cpu::winograd::backward_weights_workspace_bytes(k.c, k.o, threads) / sizeof(float),
                                   kNaN);
      dw.emplace_back(want_dw.size(), kNaN);
      db.emplace_back(want_db.size(), kNaN);
      cpu::winograd::backward_weights(x.data(), dy.data(), k.n, k.h, k.w, k.c, k.o, dw.back().data(), db.back().data(),
                                      threads, workspace.data());
    }
    // Sums over every pixel of every image: 2e-6 of the pixels' count, at least the forward's.
    const double pixels = static_cast<double>(k.n * k.h * k.w);
    double worst_dw = 0, worst_db = 0;
    for (std::size_t e = 0; e < want_dw.size(); ++e) worst_dw = std::max(worst_dw, std::abs(dw[0][e] - want_dw[e]));
    for (std::size_t e = 0; e < want_db.size(); ++e) worst_db = std::max(worst_db, std::abs(db[0][e] - want_db[e]));
    CHECK(worst_dw <= std::max(tolerance, 2e-6 * pixels * 9));
    CHECK(worst_db <= std::max(tolerance, 2e-6 * pixels));
    CHECK(dw[0] == dw[1]);
    CHECK(dw[0] == dw[2]);
    CHECK(db[0] == db[2]);
    std::vector<float> dx(want_dx.size(), kNaN);
    std::vector<float> workspace(cpu::winograd::workspace_bytes(k.o, k.c, 2) / sizeof(float), kNaN);
    cpu::winograd::convolve(dy.data(), k.n, k.h, k.w, k.o, ub.data(), k.c, nullptr, false, dx.data(), 2,
                            workspace.data());
    double worst = 0;
    for (std::size_t e = 0; e < want_dx.size(); ++e) worst = std::max(worst, std::abs(dx[e] - want_dx[e]));
    CHECK(worst <= tolerance);
  }
  // What it does not take: stride 2, 12 channels, bf16, NCHW, padding 0.
  Conv2dShape strided = shape, odd = shape, nchw = shape, unpadded = shape;
  strided.stride_h = 2;
  odd.in_channels = 12;
  nchw.channels_last = false;
  unpadded.pad_w = 0;
  CHECK_FALSE(cpu::winograd::applies(DType::f32, strided));
  CHECK_FALSE(cpu::winograd::applies(DType::f32, odd));
  CHECK_FALSE(cpu::winograd::applies(DType::bf16, shape));
  CHECK_FALSE(cpu::winograd::applies(DType::f32, nchw));
  CHECK_FALSE(cpu::winograd::applies(DType::f32, unpadded));
}
