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
#include <type_traits>
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

// The loops below run over rows of the [outer, channels, inner] view with raw pointers: a
// channels_last row spans the channels (per-channel coefficients, one per element: `Each`), an
// NCHW row spans one channel's plane (one coefficient for the row: `One`). The compiler vectorises
// each row loop; the rows are split over the threads.
template <typename C>
struct Each {
  const C* __restrict p;
  C operator[](std::int64_t i) const { return p[i]; }
};
template <typename C>
struct One {
  C v;
  C operator[](std::int64_t) const { return v; }
};

enum class Mask { none, from_x, from_y };

// dy past the epilogue's ReLU: dy where the pre-activation was > 0 (its sign from y where a residual
// was added, else recomputed from x by the forward's own scale and shift), else +0.
template <Mask M, typename C>
inline C masked(C g, C x, C y, C scale, C shift) {
  if constexpr (M == Mask::none) {
    return g;
  } else {
    const C pre = M == Mask::from_y ? y : x * scale + shift;
    return pre > C(0) ? g : C(0);
  }
}

// y = x * scale + shift (+ residual), then ReLU (a NaN passes, as torch.relu), over one row.
template <typename S, bool RES, bool RELU, typename K>
void apply_row(const S* __restrict x, const S* __restrict res, K scale, K shift, S* __restrict y, std::int64_t n) {
  using C = compute_t<S>;
  for (std::int64_t i = 0; i < n; ++i) {
    C v = load<C>(x[i]) * scale[i] + shift[i];
    if constexpr (RES) v += load<C>(res[i]);
    if constexpr (RELU) v = v <= C(0) ? C(0) : v;
    y[i] = store<S>(v);
  }
}

// The backward's second pass over one row: dresidual = dz, dx = k dz + b x + d.
template <typename S, Mask M, bool DX, bool DRES, typename K>
void grad_row(const S* __restrict x, const S* __restrict dy, const S* __restrict y, K scale, K shift, K kc, K bc, K dc,
              S* __restrict dx, S* __restrict dres, std::int64_t n) {
  using C = compute_t<S>;
  for (std::int64_t i = 0; i < n; ++i) {
    const C xv = load<C>(x[i]);
    const C z = masked<M>(load<C>(dy[i]), xv, M == Mask::from_y ? load<C>(y[i]) : C(0), scale[i], shift[i]);
    if constexpr (DRES) dres[i] = store<S>(z);  // dz is dy or 0: exact in S
    if constexpr (DX) dx[i] = store<S>(kc[i] * z + bc[i] * xv + dc[i]);
  }
}

// Per-channel pair sums (a, b) over the view, in blocks added in a fixed order (the same bits at
// any thread count): an NCHW row's plane in lanes, then the rows of a channel in order; channels_last
// rows kRowsPerBlock at a time into per-channel partials, then the blocks in order. `row(a, b, o, c)`
// adds one row's terms: channels_last, into a[0..C) and b[0..C) for row o; NCHW, into lane arrays
// a[0..kLanes), b[0..kLanes) for row (o, c).
template <typename C, typename PlaneRow, typename ChannelRow>
void pair_sums(const BatchNormShape& s, const PlaneRow& plane_row, const ChannelRow& channel_row,
               std::vector<Pair>& sums, int threads) {
  const std::int64_t ch = s.channels;
  sums.assign(static_cast<std::size_t>(ch), Pair{});
  if (s.inner > 1) {
    std::vector<C> part(static_cast<std::size_t>(s.outer * ch * 2));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t row = 0; row < s.outer * ch; ++row) {
      C a[kLanes] = {}, b[kLanes] = {};
      plane_row(a, b, row / ch, row % ch);
      C ta = 0, tb = 0;
      for (int l = 0; l < kLanes; ++l) ta += a[l], tb += b[l];
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
    std::fill(a, a + 2 * ch, C(0));
    const std::int64_t end = std::min(s.outer, (blk + 1) * kRowsPerBlock);
    for (std::int64_t o = blk * kRowsPerBlock; o < end; ++o) channel_row(a, a + ch, o);
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

// row(o, c, base, n) over every row (channels_last: c = -1, n = channels; NCHW: n = inner), split
// over the threads.
template <typename Row>
void for_each_row(const BatchNormShape& s, int threads, const Row& row) {
  const std::int64_t ch = s.channels, inner = s.inner;
  if (inner > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t r = 0; r < s.outer * ch; ++r) row(r % ch, r * inner, inner);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t o = 0; o < s.outer; ++o) row(std::int64_t{-1}, o * ch, ch);
}

// y = x * scale[c] + shift[c] (+ residual), then ReLU, in the compute type.
template <typename S>
void bn_apply(const BatchNormShape& s, const S* x, const std::vector<compute_t<S>>& scale,
              const std::vector<compute_t<S>>& shift, const BatchNormEpilogue& e, S* y, int threads) {
  using C = compute_t<S>;
  const S* res = as<S>(e.residual);
  const auto run = [&](auto has_res, auto relu) {
    constexpr bool R = decltype(has_res)::value, U = decltype(relu)::value;
    for_each_row(s, threads, [&](std::int64_t c, std::int64_t base, std::int64_t n) {
      if (c < 0)
        apply_row<S, R, U>(x + base, R ? res + base : nullptr, Each<C>{scale.data()}, Each<C>{shift.data()}, y + base,
                           n);
      else
        apply_row<S, R, U>(x + base, R ? res + base : nullptr, One<C>{scale[static_cast<std::size_t>(c)]},
                           One<C>{shift[static_cast<std::size_t>(c)]}, y + base, n);
    });
  };
  using T = std::true_type;
  using F = std::false_type;
  if (res && e.relu) run(T{}, T{});
  if (res && !e.relu) run(T{}, F{});
  if (!res && e.relu) run(F{}, T{});
  if (!res && !e.relu) run(F{}, F{});
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
    const C* f = first.data();
    pair_sums<C>(
        s,
        [&](C* a, C* b, std::int64_t o, std::int64_t c) {
          const S* __restrict row = px + (o * ch + c) * inner;
          const C k = f[c];
          std::int64_t i = 0;
          for (; i + kLanes <= inner; i += kLanes)
            for (int l = 0; l < kLanes; ++l) {
              const C d = load<C>(row[i + l]) - k;
              a[l] += d;
              b[l] += d * d;
            }
          for (; i < inner; ++i) {
            const C d = load<C>(row[i]) - k;
            a[0] += d;
            b[0] += d * d;
          }
        },
        [&](C* __restrict a, C* __restrict b, std::int64_t o) {
          const S* __restrict row = px + o * ch;
          for (std::int64_t c = 0; c < ch; ++c) {
            const C d = load<C>(row[c]) - f[c];
            a[c] += d;
            b[c] += d * d;
          }
        },
        sums, threads_);
    const auto m = static_cast<double>(s.count());
    std::vector<double> mean(static_cast<std::size_t>(ch)), invstd(static_cast<std::size_t>(ch));
    for (std::int64_t c = 0; c < ch; ++c) {
      const auto u = static_cast<std::size_t>(c);
      const double d = sums[u].a / m, var = std::max(0.0, sums[u].b / m - d * d);
      // Applied as saved (P): the backward recomputes the ReLU's sign from the saved statistics.
      as<P>(save_mean)[c] = static_cast<P>(static_cast<double>(first[u]) + d);
      as<P>(save_invstd)[c] = static_cast<P>(1.0 / std::sqrt(var + s.eps));
      mean[u] = static_cast<double>(as<P>(save_mean)[c]);
      invstd[u] = static_cast<double>(as<P>(save_invstd)[c]);
      if (running_mean != nullptr) {
        const double unbiased = m > 1 ? var * m / (m - 1) : var;
        P& rm = as<P>(running_mean)[c];
        P& rv = as<P>(running_var)[c];
        rm = static_cast<P>((1 - momentum) * static_cast<double>(rm) + momentum * (static_cast<double>(first[u]) + d));
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
      invstd[c] =
          static_cast<double>(static_cast<P>(1.0 / std::sqrt(static_cast<double>(as<P>(running_var)[c]) + s.eps)));
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

// Two passes: the first sums dz and dz (x - mean) per channel, the second writes dx and dresidual
// (= dz). The ReLU's mask comes from y where a residual was added, else from x by the forward's own
// scale and shift: no pass over y. Each combination of mask and outputs is its own loop, so the
// row loops carry no branch and vectorise.
void CpuBackend::batch_norm_backward(DType dtype, const BatchNormShape& s, const BatchNormSaved& saved, const void* dy,
                                     void* dx, void* dgamma, void* dbeta, void* dresidual) {
  dispatch_floating(dtype, op_name("batch_norm_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = stat_t<S>;
    const std::int64_t ch = s.channels, inner = s.inner;
    const auto uch = static_cast<std::size_t>(ch);
    std::vector<double> mean(uch), invstd(uch);
    for (std::size_t c = 0; c < uch; ++c) {
      mean[c] = static_cast<double>(as<P>(saved.mean)[c]);
      invstd[c] = static_cast<double>(as<P>(saved.invstd)[c]);
    }
    std::vector<C> scale, shift, cmean(mean.begin(), mean.end());
    affine_of<S>(s, as<P>(saved.gamma), as<P>(saved.beta), mean.data(), invstd.data(), scale, shift);
    const S *px = as<S>(saved.x), *pdy = as<S>(dy), *py = as<S>(saved.y);
    const auto run = [&](auto mask) {
      constexpr Mask M = decltype(mask)::value;
      const C *sc = scale.data(), *sh = shift.data(), *mu = cmean.data();
      std::vector<Pair> sums;
      pair_sums<C>(
          s,
          [&](C* a, C* b, std::int64_t o, std::int64_t c) {
            const std::int64_t base = (o * ch + c) * inner;
            const S* __restrict xr = px + base, * __restrict gr = pdy + base;
            const S* __restrict yr = M == Mask::from_y ? py + base : nullptr;
            const C k = sc[c], t = sh[c], m = mu[c];
            std::int64_t i = 0;
            for (; i + kLanes <= inner; i += kLanes)
              for (int l = 0; l < kLanes; ++l) {
                const C xv = load<C>(xr[i + l]);
                const C d = masked<M>(load<C>(gr[i + l]), xv, M == Mask::from_y ? load<C>(yr[i + l]) : C(0), k, t);
                a[l] += d;
                b[l] += d * (xv - m);
              }
            for (; i < inner; ++i) {
              const C xv = load<C>(xr[i]);
              const C d = masked<M>(load<C>(gr[i]), xv, M == Mask::from_y ? load<C>(yr[i]) : C(0), k, t);
              a[0] += d;
              b[0] += d * (xv - m);
            }
          },
          [&](C* __restrict a, C* __restrict b, std::int64_t o) {
            const S* __restrict xr = px + o * ch, * __restrict gr = pdy + o * ch;
            const S* __restrict yr = M == Mask::from_y ? py + o * ch : nullptr;
            for (std::int64_t c = 0; c < ch; ++c) {
              const C xv = load<C>(xr[c]);
              const C d = masked<M>(load<C>(gr[c]), xv, M == Mask::from_y ? load<C>(yr[c]) : C(0), sc[c], sh[c]);
              a[c] += d;
              b[c] += d * (xv - mu[c]);
            }
          },
          sums, threads_);
      const auto m = static_cast<double>(s.count());
      // dx = k dz + b x + d per channel: k = gamma invstd, and with batch statistics
      // b = -k invstd dgamma / m, d = -k dbeta / m - b mean.
      std::vector<C> kc(uch), bc(uch), dc(uch);
      for (std::size_t c = 0; c < uch; ++c) {
        const double sum_dz = sums[c].a, dgam = sums[c].b * invstd[c];
        if (dbeta != nullptr) as<P>(dbeta)[c] = static_cast<P>(sum_dz);
        if (dgamma != nullptr) as<P>(dgamma)[c] = static_cast<P>(dgam);
        const double k = (saved.gamma ? static_cast<double>(as<P>(saved.gamma)[c]) : 1.0) * invstd[c];
        const double b = saved.batch_stats ? -k * invstd[c] * dgam / m : 0.0;
        kc[c] = static_cast<C>(k);
        bc[c] = static_cast<C>(b);
        dc[c] = static_cast<C>(saved.batch_stats ? -k * sum_dz / m - b * mean[c] : 0.0);
      }
      S *pdx = as<S>(dx), *pres = as<S>(dresidual);
      const auto second = [&](auto want_dx, auto want_dres) {
        constexpr bool DX = decltype(want_dx)::value, DR = decltype(want_dres)::value;
        for_each_row(s, threads_, [&](std::int64_t c, std::int64_t base, std::int64_t n) {
          const S* yr = M == Mask::from_y ? py + base : nullptr;
          S* dxr = DX ? pdx + base : nullptr;
          S* drr = DR ? pres + base : nullptr;
          if (c < 0) {
            grad_row<S, M, DX, DR>(px + base, pdy + base, yr, Each<C>{sc}, Each<C>{sh}, Each<C>{kc.data()},
                                   Each<C>{bc.data()}, Each<C>{dc.data()}, dxr, drr, n);
          } else {
            const auto u = static_cast<std::size_t>(c);
            grad_row<S, M, DX, DR>(px + base, pdy + base, yr, One<C>{sc[u]}, One<C>{sh[u]}, One<C>{kc[u]},
                                   One<C>{bc[u]}, One<C>{dc[u]}, dxr, drr, n);
          }
        });
      };
      using T = std::true_type;
      using F = std::false_type;
      if (pdx && pres) second(T{}, T{});
      if (pdx && !pres) second(T{}, F{});
      if (!pdx && pres) second(F{}, T{});
    };
    if (!saved.relu)
      run(std::integral_constant<Mask, Mask::none>{});
    else if (saved.y == nullptr)
      run(std::integral_constant<Mask, Mask::from_x>{});
    else
      run(std::integral_constant<Mask, Mask::from_y>{});
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
