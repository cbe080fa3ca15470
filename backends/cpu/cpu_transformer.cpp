// The CPU backends' transformer layers (CpuBackend, backends/cpu/cpu_backend.h): layer norm, GELU,
// softmax with the causal mask, embedding, and the batch of matrix products attention needs.
// Computed in f32 for f32, bf16 and f16 storage (f64 in f64). A row's sums run over lanes in a
// fixed order and rows are split over the threads, and the sums across rows (layer norm's
// dgamma and dbeta, embedding's gradient) are taken in fixed blocks added in block order, so the
// bits never depend on the thread count. The reference backend's plain loops are the oracle.
//
// matmul is each backend's own GEMM: every product of the batch goes through linear_forward
// (y = x w^T: oneDNN's or Eigen's), an operand stored the other way round transposed into scratch
// first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_math.h"
#include "backends/cpu/parallel_chunks.h"

namespace trainlab::cpu {

namespace {

template <typename S>
using norm_stat_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

// Partial sums along a row, lane by lane: the order is fixed, and the compiler vectorises it.
constexpr int kRowLanes = 16;
// Rows summed in one block for the sums across rows.
constexpr std::int64_t kRowsPerSum = 64;

template <typename C, typename F>
C lane_sum(std::int64_t n, F&& term) {
  C lanes[kRowLanes] = {};
  std::int64_t i = 0;
  for (; i + kRowLanes <= n; i += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l) lanes[l] += term(i + l);
  for (; i < n; ++i) lanes[i % kRowLanes] += term(i);
  C total = 0;
  for (int l = 0; l < kRowLanes; ++l) total += lanes[l];
  return total;
}

template <typename C, typename F>
C lane_max(std::int64_t n, F&& term) {
  C top = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) top = std::max(top, term(i));
  return top;
}

constexpr double kGeluCubic = 0.044715;
const double kGeluScale = std::sqrt(2.0 / 3.14159265358979323846);

std::int64_t visible_scores(const SoftmaxShape& s, std::int64_t r) {
  if (!s.causal) return s.cols;
  return std::min(s.cols, r % s.queries + (s.cols - s.queries) + 1);
}

// dst[j, i] = src[i, j] for a [rows, cols] matrix of `elem`-byte elements.
void transpose_into(std::size_t elem, const unsigned char* src, std::int64_t rows, std::int64_t cols,
                    unsigned char* dst) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (std::int64_t j0 = 0; j0 < cols; j0 += kTile)
      for (std::int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
        for (std::int64_t j = j0; j < std::min(cols, j0 + kTile); ++j)
          std::memcpy(dst + static_cast<std::size_t>(j * rows + i) * elem,
                      src + static_cast<std::size_t>(i * cols + j) * elem, elem);
}

}  // namespace

// ---- layer norm ----

void CpuBackend::layer_norm_forward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma,
                                    const void* beta, void* y, void* mean, void* rstd) {
  dispatch_floating(dtype, op_name("layer_norm_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = norm_stat_t<S>;
    const P *g = as<P>(gamma), *b = as<P>(beta);
    const C w = static_cast<C>(s.width);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const S* __restrict row = as<S>(x) + r * s.width;
      S* __restrict out = as<S>(y) + r * s.width;
      const C mu = lane_sum<C>(s.width, [&](std::int64_t i) { return load<C>(row[i]); }) / w;
      const C var = lane_sum<C>(s.width,
                                [&](std::int64_t i) {
                                  const C d = load<C>(row[i]) - mu;
                                  return d * d;
                                }) /
                    w;
      const C k = static_cast<C>(1) / std::sqrt(var + static_cast<C>(s.eps));
      as<P>(mean)[r] = static_cast<P>(mu);
      as<P>(rstd)[r] = static_cast<P>(k);
      for (std::int64_t i = 0; i < s.width; ++i) {
        const C v = (load<C>(row[i]) - mu) * k;
        out[i] = store<S>(v * (g ? static_cast<C>(g[i]) : C(1)) + (b ? static_cast<C>(b[i]) : C(0)));
      }
    }
  });
}

void CpuBackend::layer_norm_backward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma,
                                     const void* mean, const void* rstd, const void* dy, void* dx, void* dgamma,
                                     void* dbeta) {
  dispatch_floating(dtype, op_name("layer_norm_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = norm_stat_t<S>;
    const S *px = as<S>(x), *pdy = as<S>(dy);
    const P *g = as<P>(gamma), *pm = as<P>(mean), *pk = as<P>(rstd);
    const std::int64_t w = s.width;
    if (dx != nullptr) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t r = 0; r < s.rows; ++r) {
        const S* __restrict xr = px + r * w;
        const S* __restrict dyr = pdy + r * w;
        S* __restrict out = as<S>(dx) + r * w;
        const C m = static_cast<C>(pm[r]), k = static_cast<C>(pk[r]);
        auto gi = [&](std::int64_t i) { return load<C>(dyr[i]) * (g ? static_cast<C>(g[i]) : C(1)); };
        const C a = lane_sum<C>(w, gi) / static_cast<C>(w);
        const C bx =
            lane_sum<C>(w, [&](std::int64_t i) { return gi(i) * (load<C>(xr[i]) - m) * k; }) / static_cast<C>(w);
        for (std::int64_t i = 0; i < w; ++i) out[i] = store<S>(k * (gi(i) - a - (load<C>(xr[i]) - m) * k * bx));
      }
    }
    if (dgamma == nullptr && dbeta == nullptr) return;
    // Per block of rows, the partial sums over its rows in row order; then the blocks in order.
    const std::int64_t blocks = (s.rows + kRowsPerSum - 1) / kRowsPerSum;
    Scratch scratch(*this);
    C* partial = scratch.get<C>(2 * blocks * w);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      C* __restrict sb = partial + 2 * blk * w;
      C* __restrict sg = sb + w;
      std::fill(sb, sb + 2 * w, C(0));
      for (std::int64_t r = blk * kRowsPerSum; r < std::min(s.rows, (blk + 1) * kRowsPerSum); ++r) {
        const C m = static_cast<C>(pm[r]), k = static_cast<C>(pk[r]);
        const S* __restrict xr = px + r * w;
        const S* __restrict dyr = pdy + r * w;
        for (std::int64_t i = 0; i < w; ++i) {
          const C d = load<C>(dyr[i]);
          sb[i] += d;
          sg[i] += d * (load<C>(xr[i]) - m) * k;
        }
      }
    }
    parallel_chunks(w, threads_, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        double tb = 0, tg = 0;
        for (std::int64_t blk = 0; blk < blocks; ++blk) {
          tb += partial[2 * blk * w + i];
          tg += partial[(2 * blk + 1) * w + i];
        }
        if (dbeta != nullptr) as<P>(dbeta)[i] = static_cast<P>(tb);
        if (dgamma != nullptr) as<P>(dgamma)[i] = static_cast<P>(tg);
      }
    });
  });
}

// ---- GELU ----

void CpuBackend::gelu_forward(DType dtype, const void* x, void* y, std::int64_t n) {
  dispatch_floating(dtype, op_name("gelu_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const auto k = static_cast<C>(kGeluScale), a = static_cast<C>(kGeluCubic);
    parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
      const S* __restrict px = as<S>(x);
      S* __restrict py = as<S>(y);
      for (std::int64_t i = lo; i < hi; ++i) {
        const C v = load<C>(px[i]);
        py[i] = store<S>(C(0.5) * v * (C(1) + fast_tanh(k * (v + a * v * v * v))));
      }
    });
  });
}

void CpuBackend::gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n) {
  dispatch_floating(dtype, op_name("gelu_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const auto k = static_cast<C>(kGeluScale), a = static_cast<C>(kGeluCubic);
    parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
      const S* __restrict px = as<S>(x), * __restrict pdy = as<S>(dy);
      S* __restrict pdx = as<S>(dx);
      for (std::int64_t i = lo; i < hi; ++i) {
        const C v = load<C>(px[i]);
        const C t = fast_tanh(k * (v + a * v * v * v));
        const C d = C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * k * (C(1) + C(3) * a * v * v);
        pdx[i] = store<S>(load<C>(pdy[i]) * d);
      }
    });
  });
}

// ---- softmax ----

void CpuBackend::softmax_forward(DType dtype, const SoftmaxShape& s, const void* x, void* y) {
  dispatch_floating(dtype, op_name("softmax_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const auto scale = static_cast<C>(s.scale);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const S* __restrict in = as<S>(x) + r * s.cols;
      S* __restrict out = as<S>(y) + r * s.cols;
      const std::int64_t visible = visible_scores(s, r);
      const C top = lane_max<C>(visible, [&](std::int64_t j) { return scale * load<C>(in[j]); });
      // The exponentials written once (as f32 where the storage is narrower, in out's place when it is not).
      C total = 0;
      if constexpr (std::is_same_v<S, C>) {
        for (std::int64_t j = 0; j < visible; ++j) out[j] = fast_exp(scale * in[j] - top);
        total = lane_sum<C>(visible, [&](std::int64_t j) { return out[j]; });
        const C inv = C(1) / total;
        for (std::int64_t j = 0; j < visible; ++j) out[j] *= inv;
      } else {
        total = lane_sum<C>(visible, [&](std::int64_t j) { return fast_exp(scale * load<C>(in[j]) - top); });
        const C inv = C(1) / total;
        for (std::int64_t j = 0; j < visible; ++j) out[j] = store<S>(fast_exp(scale * load<C>(in[j]) - top) * inv);
      }
      for (std::int64_t j = visible; j < s.cols; ++j) out[j] = S(0);
    }
  });
}

void CpuBackend::softmax_backward(DType dtype, const SoftmaxShape& s, const void* y, const void* dy, void* dx) {
  dispatch_floating(dtype, op_name("softmax_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const auto scale = static_cast<C>(s.scale);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const S* __restrict yr = as<S>(y) + r * s.cols;
      const S* __restrict dyr = as<S>(dy) + r * s.cols;
      S* __restrict out = as<S>(dx) + r * s.cols;
      const std::int64_t visible = visible_scores(s, r);
      const C dot = lane_sum<C>(visible, [&](std::int64_t j) { return load<C>(dyr[j]) * load<C>(yr[j]); });
      for (std::int64_t j = 0; j < visible; ++j) out[j] = store<S>(scale * load<C>(yr[j]) * (load<C>(dyr[j]) - dot));
      for (std::int64_t j = visible; j < s.cols; ++j) out[j] = S(0);
    }
  });
}

// ---- embedding ----

void CpuBackend::embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight,
                                   std::int64_t vocab, std::int64_t width, void* y) {
  check_embedding_indices(indices, n, vocab);
  const std::size_t row = dtype_size(dtype) * static_cast<std::size_t>(width);
  const auto* src = static_cast<const unsigned char*>(weight);
  auto* dst = static_cast<unsigned char*>(y);
#pragma omp parallel for num_threads(threads_) schedule(static) if (n * width >= kChunk)
  for (std::int64_t i = 0; i < n; ++i)
    std::memcpy(dst + static_cast<std::size_t>(i) * row, src + static_cast<std::size_t>(indices[i]) * row, row);
}

void CpuBackend::embedding_backward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* dy,
                                    std::int64_t vocab, std::int64_t width, void* dweight) {
  check_embedding_indices(indices, n, vocab);
  dispatch_floating(dtype, op_name("embedding_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    // Accumulated in C (a scratch table where the storage is narrower), each element over the
    // positions in order; the columns split over the threads in fixed chunks.
    Scratch scratch(*this);
    C* acc = std::is_same_v<S, C> ? reinterpret_cast<C*>(dweight) : scratch.get<C>(vocab * width);
    parallel_chunks(vocab * width, threads_,
                    [&](std::int64_t lo, std::int64_t hi) { std::fill(acc + lo, acc + hi, C(0)); });
    constexpr std::int64_t kColumns = 64;
    const std::int64_t column_blocks = (width + kColumns - 1) / kColumns;
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t cb = 0; cb < column_blocks; ++cb) {
      const std::int64_t lo = cb * kColumns, hi = std::min(width, lo + kColumns);
      for (std::int64_t i = 0; i < n; ++i) {
        const S* __restrict g = as<S>(dy) + i * width;
        C* __restrict out = acc + indices[i] * width;
        for (std::int64_t c = lo; c < hi; ++c) out[c] += load<C>(g[c]);
      }
    }
    if constexpr (!std::is_same_v<S, C>) {
      parallel_chunks(vocab * width, threads_, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t e = lo; e < hi; ++e) as<S>(dweight)[e] = store<S>(acc[e]);
      });
    }
  });
}

// ---- matmul: each product through the backend's linear (y = x w^T) ----

void CpuBackend::matmul(DType dtype, const MatmulShape& s, const void* a, const void* b, void* y) {
  const std::size_t elem = dtype_size(dtype);
  Scratch scratch(*this);
  // linear reads x as [m, k] and w as [n, k]: a stored [k, m] and c stored [k, n] are transposed.
  unsigned char* at =
      s.trans_a ? static_cast<unsigned char*>(scratch.get(elem * static_cast<std::size_t>(s.m * s.k))) : nullptr;
  unsigned char* bt =
      !s.trans_b ? static_cast<unsigned char*>(scratch.get(elem * static_cast<std::size_t>(s.n * s.k))) : nullptr;
  for (std::int64_t i = 0; i < s.batch; ++i) {
    const auto* ai = static_cast<const unsigned char*>(a) + static_cast<std::size_t>(i * s.m * s.k) * elem;
    const auto* bi = static_cast<const unsigned char*>(b) + static_cast<std::size_t>(i * s.k * s.n) * elem;
    auto* yi = static_cast<unsigned char*>(y) + static_cast<std::size_t>(i * s.m * s.n) * elem;
    if (at != nullptr) transpose_into(elem, ai, s.k, s.m, at);
    if (bt != nullptr) transpose_into(elem, bi, s.k, s.n, bt);
    linear_forward(dtype, at != nullptr ? at : ai, bt != nullptr ? bt : bi, nullptr, false, yi, s.m, s.k, s.n);
  }
}

}  // namespace trainlab::cpu
