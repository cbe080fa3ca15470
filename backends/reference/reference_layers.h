// The reference backend's plain loops for the layers past the matrix ops: batch norm (training,
// inference, backward, with its residual-add and ReLU epilogue), global average pooling and
// dropout. Obvious on purpose: statistics in double over each channel in index order, one element
// at a time; every other backend's kernels are tested against these (tests/backends/test_backends.cpp).
// Each loop reads and writes the storage type S through compute type C (cpu_kernels.h) and the
// statistics in P (batch_norm_stat_dtype: float, or double for f64).
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/backend.h"
#include "backends/counter_rng.h"
#include "backends/cpu/cpu_kernels.h"

namespace trainlab::reference {

using cpu::as;
using cpu::load;
using cpu::store;

// Statistics type for storage type S.
template <typename S>
using stat_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

// Element (o, c, i) of the [outer, channels, inner] view.
inline std::int64_t bn_index(const BatchNormShape& s, std::int64_t o, std::int64_t c, std::int64_t i) {
  return (o * s.channels + c) * s.inner + i;
}

// fn(index) for every element of channel c, in index order.
template <typename Fn>
void for_channel(const BatchNormShape& s, std::int64_t c, Fn&& fn) {
  for (std::int64_t o = 0; o < s.outer; ++o)
    for (std::int64_t i = 0; i < s.inner; ++i) fn(bn_index(s, o, c, i));
}

// y = scale * x + shift, then + residual, then ReLU (a NaN passes, as torch.relu), rounded once.
template <typename S>
void bn_apply(const BatchNormShape& s, std::int64_t c, const S* x, double scale, double shift,
              const BatchNormEpilogue& e, S* y) {
  for_channel(s, c, [&](std::int64_t k) {
    double v = scale * cpu::to_double(x[k]) + shift;
    if (e.residual) v += cpu::to_double(as<S>(e.residual)[k]);
    if (e.relu && v <= 0) v = 0;
    y[k] = cpu::from_double<S>(v);
  });
}

template <typename S>
void batch_norm_forward_training(const BatchNormShape& s, const S* x, const stat_t<S>* gamma, const stat_t<S>* beta,
                                 const BatchNormEpilogue& e, S* y, stat_t<S>* save_mean, stat_t<S>* save_invstd,
                                 stat_t<S>* running_mean, stat_t<S>* running_var, double momentum, int threads) {
  using P = stat_t<S>;
  const auto m = static_cast<double>(s.count());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < s.channels; ++c) {
    double total = 0;
    for_channel(s, c, [&](std::int64_t k) { total += cpu::to_double(x[k]); });
    const double mean = total / m;
    double squares = 0;
    for_channel(s, c, [&](std::int64_t k) {
      const double d = cpu::to_double(x[k]) - mean;
      squares += d * d;
    });
    const double var = squares / m;
    // The statistics as saved (P) are the ones applied: the backward recomputes the ReLU's sign from them.
    save_mean[c] = static_cast<P>(mean);
    save_invstd[c] = static_cast<P>(1.0 / std::sqrt(var + s.eps));
    const double invstd = save_invstd[c];
    if (running_mean != nullptr) {
      const double unbiased = m > 1 ? var * m / (m - 1) : var;
      running_mean[c] = static_cast<P>((1 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = static_cast<P>((1 - momentum) * running_var[c] + momentum * unbiased);
    }
    const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
    const double applied_mean = save_mean[c];
    bn_apply(s, c, x, g * invstd, b - applied_mean * g * invstd, e, y);
  }
}

template <typename S>
void batch_norm_forward_inference(const BatchNormShape& s, const S* x, const stat_t<S>* gamma, const stat_t<S>* beta,
                                  const stat_t<S>* running_mean, const stat_t<S>* running_var,
                                  const BatchNormEpilogue& e, S* y, stat_t<S>* save_mean, stat_t<S>* save_invstd,
                                  int threads) {
  using P = stat_t<S>;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < s.channels; ++c) {
    const double mean = running_mean[c];
    const double invstd = static_cast<P>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + s.eps));
    if (save_mean != nullptr) {
      save_mean[c] = static_cast<P>(mean);
      save_invstd[c] = static_cast<P>(invstd);
    }
    const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
    bn_apply(s, c, x, g * invstd, b - mean * g * invstd, e, y);
  }
}

template <typename S>
void batch_norm_backward(const BatchNormShape& s, const BatchNormSaved& saved, const S* dy, S* dx, stat_t<S>* dgamma,
                         stat_t<S>* dbeta, S* dresidual, int threads) {
  using P = stat_t<S>;
  const S* x = as<S>(saved.x);
  const S* y = as<S>(saved.y);
  const P *gamma = as<P>(saved.gamma), *beta = as<P>(saved.beta);
  const auto m = static_cast<double>(s.count());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < s.channels; ++c) {
    const double mean = as<P>(saved.mean)[c], invstd = as<P>(saved.invstd)[c];
    const double g = gamma ? static_cast<double>(gamma[c]) : 1.0, b = beta ? static_cast<double>(beta[c]) : 0.0;
    // The gradient past the epilogue: dy where the ReLU passed, else 0. Its sign from y where a
    // residual was added, else from the forward's own pre-activation, recomputed from x.
    auto dz = [&](std::int64_t k) {
      const double d = cpu::to_double(dy[k]);
      if (!saved.relu) return d;
      const double pre =
          y != nullptr ? cpu::to_double(y[k]) : g * invstd * cpu::to_double(x[k]) + (b - mean * g * invstd);
      return pre > 0 ? d : 0.0;
    };
    double sum_dz = 0, sum_dz_xhat = 0;
    for_channel(s, c, [&](std::int64_t k) {
      const double d = dz(k);
      sum_dz += d;
      sum_dz_xhat += d * (cpu::to_double(x[k]) - mean) * invstd;
    });
    if (dbeta != nullptr) dbeta[c] = static_cast<P>(sum_dz);
    if (dgamma != nullptr) dgamma[c] = static_cast<P>(sum_dz_xhat);
    const double k_c = g * invstd;
    for_channel(s, c, [&](std::int64_t k) {
      const double d = dz(k);
      if (dresidual != nullptr) dresidual[k] = cpu::from_double<S>(d);
      if (dx == nullptr) return;
      const double xhat = (cpu::to_double(x[k]) - mean) * invstd;
      dx[k] = cpu::from_double<S>(saved.batch_stats ? k_c * (d - sum_dz / m - xhat * sum_dz_xhat / m) : k_c * d);
    });
  }
}

// y[n, c] = the mean of x[n, c, :, :] (summed in double, in index order).
template <typename S>
void global_avg_pool2d_forward(std::int64_t batch, std::int64_t channels, std::int64_t spatial, bool channels_last,
                               const S* x, S* y) {
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      double total = 0;
      for (std::int64_t p = 0; p < spatial; ++p)
        total += cpu::to_double(x[channels_last ? (n * spatial + p) * channels + c : (n * channels + c) * spatial + p]);
      y[n * channels + c] = cpu::from_double<S>(total / static_cast<double>(spatial));
    }
}

template <typename S>
void global_avg_pool2d_backward(std::int64_t batch, std::int64_t channels, std::int64_t spatial, bool channels_last,
                                const S* dy, S* dx) {
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const S g = cpu::from_double<S>(cpu::to_double(dy[n * channels + c]) / static_cast<double>(spatial));
      for (std::int64_t p = 0; p < spatial; ++p)
        dx[channels_last ? (n * spatial + p) * channels + c : (n * channels + c) * spatial + p] = g;
    }
}

// Element i kept where its counter draw is at or above p's threshold; y = x / (1 - p) there.
template <typename S>
void dropout_forward(const S* x, S* y, std::uint8_t* mask, std::int64_t n, const DropoutDraw& d) {
  const std::uint32_t threshold = dropout_threshold(d.p);
  const auto scale = static_cast<cpu::compute_t<S>>(1.0 / (1.0 - d.p));
  for (std::int64_t i = 0; i < n; ++i) {
    const bool keep = counter_draw(d.seed, d.offset + static_cast<std::uint64_t>(i)) >= threshold;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? store<S>(load<cpu::compute_t<S>>(x[i]) * scale) : S(0);
  }
}

template <typename S>
void dropout_backward(const S* dy, const std::uint8_t* mask, S* dx, std::int64_t n, double scale) {
  const auto k = static_cast<cpu::compute_t<S>>(scale);
  for (std::int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? store<S>(load<cpu::compute_t<S>>(dy[i]) * k) : S(0);
}

}  // namespace trainlab::reference
