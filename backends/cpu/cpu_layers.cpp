// The CPU backends' batch norm, global average pooling and dropout (CpuBackend,
// backends/cpu/cpu_backend.h): loops over the [outer, channels, inner] view that the compiler
// vectorises (lane accumulators along the contiguous dimension), computed in f32 for f32, bf16 and
// f16 storage (f64 in f64). Every sum is taken in fixed blocks of the data added in block order, so
// the bits do not depend on the thread count; the reference backend's plain loops are the oracle.
//
// Batch norm's statistics are shifted sums: per channel, K = the channel's first element, then
// sum(x - K) and sum((x - K)^2) in f32 within a block and in double across blocks; the mean is
// K + S1/m and the variance S2/m - (S1/m)^2, which stays accurate while the mean is not far from a
// data value in units of the standard deviation (one data value is within a few of them).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/counter_rng.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/parallel_chunks.h"

namespace trainlab::cpu {

namespace {

// Rows of the channels_last view summed in one block (per-channel f32 partial sums).
constexpr std::int64_t kRowsPerBlock = 32;
// Lanes of the partial sums along a contiguous NCHW row.
constexpr int kLanes = 16;

template <typename S>
using stat_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

struct Pair {
  double a = 0, b = 0;
};

// sums[c] = (sum of first, sum of second) of elem(k, c) -> (first, second) over channel c's
// elements k, in blocks added in order: per (o, c) row of `inner` for NCHW, per block of
// kRowsPerBlock rows of `channels` for channels_last. `C` is the compute type.
template <typename C, typename Elem>
void channel_pair_sums(const BatchNormShape& s, const Elem& elem, std::vector<Pair>& sums, int threads) {
  const std::int64_t ch = s.channels, inner = s.inner;
  sums.assign(static_cast<std::size_t>(ch), Pair{});
  if (inner > 1) {
    std::vector<C> part(static_cast<std::size_t>(s.outer * ch * 2));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t row = 0; row < s.outer * ch; ++row) {
      const std::int64_t c = row % ch, base = row * inner;
      C a[kLanes] = {}, b[kLanes] = {};
      std::int64_t i = 0;
      for (; i + kLanes <= inner; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          const auto [u, v] = elem(base + i + l, c);
          a[l] += u;
          b[l] += v;
        }
      }
      C ta = 0, tb = 0;
      for (; i < inner; ++i) {
        const auto [u, v] = elem(base + i, c);
        ta += u;
        tb += v;
      }
      for (int l = 0; l < kLanes; ++l) {
        ta += a[l];
        tb += b[l];
      }
      part[static_cast<std::size_t>(row * 2)] = ta;
      part[static_cast<std::size_t>(row * 2 + 1)] = tb;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t c = 0; c < ch; ++c) {
      Pair p;
      for (std::int64_t o = 0; o < s.outer; ++o) {
        p.a += static_cast<double>(part[static_cast<std::size_t>((o * ch + c) * 2)]);
        p.b += static_cast<double>(part[static_cast<std::size_t>((o * ch + c) * 2 + 1)]);
      }
      sums[static_cast<std::size_t>(c)] = p;
    }
    return;
  }
  const std::int64_t blocks = (s.outer + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<C> part(static_cast<std::size_t>(blocks * ch * 2));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    C* a = part.data() + blk * ch * 2;
    C* b = a + ch;
    std::fill(a, a + 2 * ch, C(0));
    const std::int64_t end = std::min(s.outer, (blk + 1) * kRowsPerBlock);
    for (std::int64_t o = blk * kRowsPerBlock; o < end; ++o) {
      const std::int64_t base = o * ch;
      for (std::int64_t c = 0; c < ch; ++c) {
        const auto [u, v] = elem(base + c, c);
        a[c] += u;
        b[c] += v;
      }
    }
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < ch; ++c) {
    Pair p;
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      p.a += static_cast<double>(part[static_cast<std::size_t>(blk * ch * 2 + c)]);
      p.b += static_cast<double>(part[static_cast<std::size_t>(blk * ch * 2 + ch + c)]);
    }
    sums[static_cast<std::size_t>(c)] = p;
  }
}

// fn(k, c) for every element, rows split over the threads (the same arithmetic per element at any
// thread count).
template <typename Fn>
void for_each_element(const BatchNormShape& s, int threads, const Fn& fn) {
  const std::int64_t ch = s.channels, inner = s.inner;
  if (inner > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t row = 0; row < s.outer * ch; ++row) {
      const std::int64_t c = row % ch, base = row * inner;
      for (std::int64_t i = 0; i < inner; ++i) fn(base + i, c);
    }
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t o = 0; o < s.outer; ++o) {
    const std::int64_t base = o * ch;
    for (std::int64_t c = 0; c < ch; ++c) fn(base + c, c);
  }
}

// y = x * scale[c] + shift[c] (+ residual), then ReLU, in the compute type.
template <typename S>
void bn_apply(const BatchNormShape& s, const S* x, const std::vector<compute_t<S>>& scale,
              const std::vector<compute_t<S>>& shift, const BatchNormEpilogue& e, S* y, int threads) {
  using C = compute_t<S>;
  const S* res = as<S>(e.residual);
  const bool relu = e.relu;
  for_each_element(s, threads, [&](std::int64_t k, std::int64_t c) {
    C v = load<C>(x[k]) * scale[static_cast<std::size_t>(c)] + shift[static_cast<std::size_t>(c)];
    if (res) v += load<C>(res[k]);
    if (relu) v = v <= C(0) ? C(0) : v;  // NaN passes, as torch.relu
    y[k] = store<S>(v);
  });
}

// scale and shift per channel of y = (x - mean) * invstd * gamma + beta.
template <typename S>
void affine_of(const BatchNormShape& s, const stat_t<S>* gamma, const stat_t<S>* beta, const double* mean,
               const double* invstd, std::vector<compute_t<S>>& scale, std::vector<compute_t<S>>& shift) {
  scale.resize(static_cast<std::size_t>(s.channels));
  shift.resize(static_cast<std::size_t>(s.channels));
  for (std::int64_t c = 0; c < s.channels; ++c) {
    const double g = gamma ? static_cast<double>(gamma[c]) : 1.0, b = beta ? static_cast<double>(beta[c]) : 0.0;
    scale[static_cast<std::size_t>(c)] = static_cast<compute_t<S>>(g * invstd[c]);
    shift[static_cast<std::size_t>(c)] = static_cast<compute_t<S>>(b - mean[c] * g * invstd[c]);
  }
}

}  // namespace

void CpuBackend::batch_norm_forward_training(DType dtype, const BatchNormShape& s, const void* x, const void* gamma,
                                             const void* beta, const BatchNormEpilogue& e, void* y, void* save_mean,
                                             void* save_invstd, void* running_mean, void* running_var,
                                             double momentum) {
  dispatch_floating(dtype, op_name("batch_norm_forward_training").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = stat_t<S>;
    const S* px = as<S>(x);
    const std::int64_t ch = s.channels, inner = s.inner;
    // The shift: each channel's first element (o = 0, i = 0).
    std::vector<C> first(static_cast<std::size_t>(ch));
    for (std::int64_t c = 0; c < ch; ++c) first[static_cast<std::size_t>(c)] = load<C>(px[c * inner]);
    std::vector<Pair> sums;
    channel_pair_sums<C>(
        s,
        [&](std::int64_t k, std::int64_t c) {
          const C d = load<C>(px[k]) - first[static_cast<std::size_t>(c)];
          return std::pair<C, C>{d, d * d};
        },
        sums, threads_);
    const auto m = static_cast<double>(s.count());
    std::vector<double> mean(static_cast<std::size_t>(ch)), invstd(static_cast<std::size_t>(ch));
    for (std::int64_t c = 0; c < ch; ++c) {
      const auto u = static_cast<std::size_t>(c);
      const double d = sums[u].a / m, var = std::max(0.0, sums[u].b / m - d * d);
      mean[u] = static_cast<double>(first[u]) + d;
      invstd[u] = 1.0 / std::sqrt(var + s.eps);
      as<P>(save_mean)[c] = static_cast<P>(mean[u]);
      as<P>(save_invstd)[c] = static_cast<P>(invstd[u]);
      if (running_mean != nullptr) {
        const double unbiased = m > 1 ? var * m / (m - 1) : var;
        P& rm = as<P>(running_mean)[c];
        P& rv = as<P>(running_var)[c];
        rm = static_cast<P>((1 - momentum) * static_cast<double>(rm) + momentum * mean[u]);
        rv = static_cast<P>((1 - momentum) * static_cast<double>(rv) + momentum * unbiased);
      }
    }
    std::vector<C> scale, shift;
    affine_of<S>(s, as<P>(gamma), as<P>(beta), mean.data(), invstd.data(), scale, shift);
    bn_apply(s, px, scale, shift, e, as<S>(y), threads_);
  });
}

void CpuBackend::batch_norm_forward_inference(DType dtype, const BatchNormShape& s, const void* x, const void* gamma,
                                              const void* beta, const void* running_mean, const void* running_var,
                                              const BatchNormEpilogue& e, void* y, void* save_mean, void* save_invstd) {
  dispatch_floating(dtype, op_name("batch_norm_forward_inference").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = stat_t<S>;
    const auto ch = static_cast<std::size_t>(s.channels);
    std::vector<double> mean(ch), invstd(ch);
    for (std::size_t c = 0; c < ch; ++c) {
      mean[c] = static_cast<double>(as<P>(running_mean)[c]);
      invstd[c] = 1.0 / std::sqrt(static_cast<double>(as<P>(running_var)[c]) + s.eps);
      if (save_mean != nullptr) {
        as<P>(save_mean)[c] = static_cast<P>(mean[c]);
        as<P>(save_invstd)[c] = static_cast<P>(invstd[c]);
      }
    }
    std::vector<C> scale, shift;
    affine_of<S>(s, as<P>(gamma), as<P>(beta), mean.data(), invstd.data(), scale, shift);
    bn_apply(s, as<S>(x), scale, shift, e, as<S>(y), threads_);
  });
}

void CpuBackend::batch_norm_backward(DType dtype, const BatchNormShape& s, const void* x, const void* dy, const void* y,
                                     const void* gamma, const void* save_mean, const void* save_invstd,
                                     bool batch_stats, void* dx, void* dgamma, void* dbeta, void* dresidual) {
  dispatch_floating(dtype, op_name("batch_norm_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = stat_t<S>;
    const S *px = as<S>(x), *pdy = as<S>(dy), *py = as<S>(y);
    const auto ch = static_cast<std::size_t>(s.channels);
    std::vector<C> mean(ch), invstd(ch);
    for (std::size_t c = 0; c < ch; ++c) {
      mean[c] = static_cast<C>(as<P>(save_mean)[c]);
      invstd[c] = static_cast<C>(as<P>(save_invstd)[c]);
    }
    // The gradient past the epilogue's ReLU (dy where y > 0, else +0); dy itself without one.
    auto dz = [py, pdy](std::int64_t k) {
      const C g = load<C>(pdy[k]);
      if (py == nullptr) return g;
      return load<C>(py[k]) > C(0) ? g : C(0);
    };
    std::vector<Pair> sums;
    channel_pair_sums<C>(
        s,
        [&](std::int64_t k, std::int64_t c) {
          const C d = dz(k);
          return std::pair<C, C>{d, d * (load<C>(px[k]) - mean[static_cast<std::size_t>(c)])};
        },
        sums, threads_);
    const auto m = static_cast<double>(s.count());
    // dx = k dz + b x + d per channel: k = gamma invstd, and with batch statistics
    // b = -k invstd dgamma / m, d = -k dbeta / m - b mean.
    std::vector<C> kc(ch), bc(ch), dc(ch);
    for (std::size_t c = 0; c < ch; ++c) {
      const double sum_dz = sums[c].a, dgam = sums[c].b * static_cast<double>(invstd[c]);
      if (dbeta != nullptr) as<P>(dbeta)[c] = static_cast<P>(sum_dz);
      if (dgamma != nullptr) as<P>(dgamma)[c] = static_cast<P>(dgam);
      const double k = (gamma ? static_cast<double>(as<P>(gamma)[c]) : 1.0) * static_cast<double>(invstd[c]);
      const double b = batch_stats ? -k * static_cast<double>(invstd[c]) * dgam / m : 0.0;
      kc[c] = static_cast<C>(k);
      bc[c] = static_cast<C>(b);
      dc[c] = static_cast<C>(batch_stats ? -k * sum_dz / m - b * static_cast<double>(mean[c]) : 0.0);
    }
    S* pdx = as<S>(dx);
    S* pres = as<S>(dresidual);
    if (pdx == nullptr && pres == nullptr) return;
    for_each_element(s, threads_, [&](std::int64_t k, std::int64_t c) {
      const C d = dz(k);
      if (pres) pres[k] = store<S>(d);
      if (pdx) {
        const auto u = static_cast<std::size_t>(c);
        pdx[k] = store<S>(kc[u] * d + bc[u] * load<C>(px[k]) + dc[u]);
      }
    });
  });
}

void CpuBackend::global_avg_pool2d_forward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                           bool channels_last, const void* x, void* y) {
  dispatch_floating(dtype, op_name("global_avg_pool2d_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* px = as<S>(x);
    S* py = as<S>(y);
    const C inv = C(1) / static_cast<C>(spatial);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t n = 0; n < batch; ++n) {
      if (channels_last) {
        std::vector<C> acc(static_cast<std::size_t>(channels), C(0));
        for (std::int64_t p = 0; p < spatial; ++p) {
          const S* row = px + (n * spatial + p) * channels;
          for (std::int64_t c = 0; c < channels; ++c) acc[static_cast<std::size_t>(c)] += load<C>(row[c]);
        }
        for (std::int64_t c = 0; c < channels; ++c)
          py[n * channels + c] = store<S>(acc[static_cast<std::size_t>(c)] * inv);
        continue;
      }
      for (std::int64_t c = 0; c < channels; ++c) {
        const S* row = px + (n * channels + c) * spatial;
        C lanes[kLanes] = {};
        std::int64_t p = 0;
        for (; p + kLanes <= spatial; p += kLanes)
          for (int l = 0; l < kLanes; ++l) lanes[l] += load<C>(row[p + l]);
        C total = 0;
        for (; p < spatial; ++p) total += load<C>(row[p]);
        for (int l = 0; l < kLanes; ++l) total += lanes[l];
        py[n * channels + c] = store<S>(total * inv);
      }
    }
  });
}

void CpuBackend::global_avg_pool2d_backward(DType dtype, std::int64_t batch, std::int64_t channels,
                                            std::int64_t spatial, bool channels_last, const void* dy, void* dx) {
  dispatch_floating(dtype, op_name("global_avg_pool2d_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* pdy = as<S>(dy);
    S* pdx = as<S>(dx);
    const C inv = C(1) / static_cast<C>(spatial);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t n = 0; n < batch; ++n) {
      std::vector<S> g(static_cast<std::size_t>(channels));
      for (std::int64_t c = 0; c < channels; ++c)
        g[static_cast<std::size_t>(c)] = store<S>(load<C>(pdy[n * channels + c]) * inv);
      if (channels_last) {
        for (std::int64_t p = 0; p < spatial; ++p) std::copy(g.begin(), g.end(), pdx + (n * spatial + p) * channels);
      } else {
        for (std::int64_t c = 0; c < channels; ++c) {
          S* row = pdx + (n * channels + c) * spatial;
          std::fill(row, row + spatial, g[static_cast<std::size_t>(c)]);
        }
      }
    }
  });
}

void CpuBackend::dropout_forward(DType dtype, const void* x, void* y, std::uint8_t* mask, std::int64_t n,
                                 const DropoutDraw& draw) {
  dispatch_floating(dtype, op_name("dropout_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* px = as<S>(x);
    S* py = as<S>(y);
    const std::uint32_t threshold = dropout_threshold(draw.p);
    const auto scale = static_cast<C>(1.0 / (1.0 - draw.p));
    parallel_chunks(n, threads_, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const bool keep = counter_draw(draw.seed, draw.offset + static_cast<std::uint64_t>(i)) >= threshold;
        mask[i] = keep ? 1 : 0;
        py[i] = keep ? store<S>(load<C>(px[i]) * scale) : S(0);
      }
    });
  });
}

void CpuBackend::dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n,
                                  double scale) {
  dispatch_floating(dtype, op_name("dropout_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* pdy = as<S>(dy);
    S* pdx = as<S>(dx);
    const auto k = static_cast<C>(scale);
    parallel_chunks(n, threads_, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) pdx[i] = mask[i] ? store<S>(load<C>(pdy[i]) * k) : S(0);
    });
  });
}

}  // namespace trainlab::cpu
