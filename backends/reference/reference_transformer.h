// The reference backend's plain loops for a transformer's layers: layer norm, GELU (tanh form),
// softmax (scaled, with the causal mask), embedding and a batch of matrix products. Obvious on
// purpose: every sum in double, in index order, one element at a time; the other backends' kernels
// are tested against these (tests/backends/test_backends_transformer.cpp). Storage type S is read
// and written through double; the statistics in P (stat_t<S>: float, or double for f64).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/reference/reference_layers.h"

namespace trainlab::reference {

// ---- layer norm: row r is x[r * width, (r + 1) * width) ----
template <typename S>
void layer_norm_forward(const LayerNormShape& s, const S* x, const stat_t<S>* gamma, const stat_t<S>* beta, S* y,
                        stat_t<S>* mean, stat_t<S>* rstd, int threads) {
  using P = stat_t<S>;
  const auto w = static_cast<double>(s.width);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const S* row = x + r * s.width;
    double total = 0;
    for (std::int64_t i = 0; i < s.width; ++i) total += cpu::to_double(row[i]);
    const double mu = total / w;
    double squares = 0;
    for (std::int64_t i = 0; i < s.width; ++i) {
      const double d = cpu::to_double(row[i]) - mu;
      squares += d * d;
    }
    // Applied as saved (P): the backward reads the saved statistics.
    mean[r] = static_cast<P>(mu);
    rstd[r] = static_cast<P>(1.0 / std::sqrt(squares / w + s.eps));
    const double m = mean[r], k = rstd[r];
    for (std::int64_t i = 0; i < s.width; ++i) {
      const double g = gamma ? static_cast<double>(gamma[i]) : 1.0, b = beta ? static_cast<double>(beta[i]) : 0.0;
      y[r * s.width + i] = cpu::from_double<S>((cpu::to_double(row[i]) - m) * k * g + b);
    }
  }
}

template <typename S>
void layer_norm_backward(const LayerNormShape& s, const S* x, const stat_t<S>* gamma, const stat_t<S>* mean,
                         const stat_t<S>* rstd, const S* dy, S* dx, stat_t<S>* dgamma, stat_t<S>* dbeta, int threads) {
  using P = stat_t<S>;
  const auto w = static_cast<double>(s.width);
  if (dx != nullptr) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const double m = mean[r], k = rstd[r];
      double sum_g = 0, sum_g_xhat = 0;
      for (std::int64_t i = 0; i < s.width; ++i) {
        const double g = cpu::to_double(dy[r * s.width + i]) * (gamma ? static_cast<double>(gamma[i]) : 1.0);
        sum_g += g;
        sum_g_xhat += g * (cpu::to_double(x[r * s.width + i]) - m) * k;
      }
      for (std::int64_t i = 0; i < s.width; ++i) {
        const double g = cpu::to_double(dy[r * s.width + i]) * (gamma ? static_cast<double>(gamma[i]) : 1.0);
        const double xhat = (cpu::to_double(x[r * s.width + i]) - m) * k;
        dx[r * s.width + i] = cpu::from_double<S>(k * (g - sum_g / w - xhat * sum_g_xhat / w));
      }
    }
  }
  if (dgamma == nullptr && dbeta == nullptr) return;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < s.width; ++i) {
    double sum_dy = 0, sum_dy_xhat = 0;
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const double d = cpu::to_double(dy[r * s.width + i]);
      sum_dy += d;
      sum_dy_xhat += d * (cpu::to_double(x[r * s.width + i]) - static_cast<double>(mean[r])) * rstd[r];
    }
    if (dbeta != nullptr) dbeta[i] = static_cast<P>(sum_dy);
    if (dgamma != nullptr) dgamma[i] = static_cast<P>(sum_dy_xhat);
  }
}

// ---- GELU, tanh form ----
inline constexpr double kGeluA = 0.044715;
inline double gelu_k() { return std::sqrt(2.0 / 3.14159265358979323846); }

template <typename S>
void gelu_forward(const S* x, S* y, std::int64_t n) {
  const double k = gelu_k();
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = cpu::to_double(x[i]);
    y[i] = cpu::from_double<S>(0.5 * v * (1.0 + std::tanh(k * (v + kGeluA * v * v * v))));
  }
}

template <typename S>
void gelu_backward(const S* x, const S* dy, S* dx, std::int64_t n) {
  const double k = gelu_k();
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = cpu::to_double(x[i]);
    const double t = std::tanh(k * (v + kGeluA * v * v * v));
    const double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * kGeluA * v * v);
    dx[i] = cpu::from_double<S>(cpu::to_double(dy[i]) * d);
  }
}

// ---- softmax over rows; the keys [0, visible) of row r take part ----
inline std::int64_t softmax_visible(const SoftmaxShape& s, std::int64_t r) {
  if (!s.causal) return s.cols;
  const std::int64_t q = r % s.queries;
  return std::min(s.cols, q + (s.cols - s.queries) + 1);
}

template <typename S>
void softmax_forward(const SoftmaxShape& s, const S* x, S* y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const S* in = x + r * s.cols;
    S* out = y + r * s.cols;
    const std::int64_t visible = softmax_visible(s, r);
    double top = -INFINITY;
    for (std::int64_t j = 0; j < visible; ++j) top = std::max(top, s.scale * cpu::to_double(in[j]));
    double total = 0;
    for (std::int64_t j = 0; j < visible; ++j) total += std::exp(s.scale * cpu::to_double(in[j]) - top);
    for (std::int64_t j = 0; j < s.cols; ++j)
      out[j] = j < visible ? cpu::from_double<S>(std::exp(s.scale * cpu::to_double(in[j]) - top) / total) : S(0);
  }
}

template <typename S>
void softmax_backward(const SoftmaxShape& s, const S* y, const S* dy, S* dx, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const std::int64_t base = r * s.cols;
    double dot = 0;
    for (std::int64_t j = 0; j < s.cols; ++j) dot += cpu::to_double(dy[base + j]) * cpu::to_double(y[base + j]);
    for (std::int64_t j = 0; j < s.cols; ++j)
      dx[base + j] = cpu::from_double<S>(s.scale * cpu::to_double(y[base + j]) * (cpu::to_double(dy[base + j]) - dot));
  }
}

// ---- embedding ----
template <typename S>
void embedding_backward(const std::int64_t* indices, std::int64_t n, const S* dy, std::int64_t vocab,
                        std::int64_t width, S* dweight) {
  std::vector<double> acc(static_cast<std::size_t>(vocab * width), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < width; ++c)
      acc[static_cast<std::size_t>(indices[i] * width + c)] += cpu::to_double(dy[i * width + c]);
  for (std::int64_t e = 0; e < vocab * width; ++e) dweight[e] = cpu::from_double<S>(acc[static_cast<std::size_t>(e)]);
}

// ---- matmul: y[b] = op(a[b]) op(c[b]) ----
template <typename S>
void matmul(const MatmulShape& s, const S* a, const S* c, S* y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t row = 0; row < s.batch * s.m; ++row) {
    const std::int64_t b = row / s.m, i = row % s.m;
    const S* ab = a + b * s.m * s.k;
    const S* cb = c + b * s.k * s.n;
    for (std::int64_t j = 0; j < s.n; ++j) {
      double total = 0;
      for (std::int64_t p = 0; p < s.k; ++p) {
        const double av = cpu::to_double(s.trans_a ? ab[p * s.m + i] : ab[i * s.k + p]);
        const double cv = cpu::to_double(s.trans_b ? cb[j * s.k + p] : cb[p * s.n + j]);
        total += av * cv;
      }
      y[row * s.n + j] = cpu::from_double<S>(total);
    }
  }
}

// ---- attention: per head, per query, the full row of scores in double ----
inline std::int64_t attention_visible(const AttentionShape& s, std::int64_t i) {
  return s.causal ? std::min(s.keys, i + (s.keys - s.queries) + 1) : s.keys;
}

// The softmax row of query i of head h: probabilities p[j] for j < visible; returns the log-sum-exp.
template <typename S>
double attention_row(const AttentionShape& s, const S* q, const S* k, std::int64_t h, std::int64_t i,
                     std::vector<double>& p) {
  const std::int64_t d = s.head_dim, visible = attention_visible(s, i);
  p.assign(static_cast<std::size_t>(visible), 0.0);
  double top = -INFINITY;
  for (std::int64_t j = 0; j < visible; ++j) {
    double score = 0;
    for (std::int64_t c = 0; c < d; ++c)
      score += cpu::to_double(q[(h * s.queries + i) * d + c]) * cpu::to_double(k[(h * s.keys + j) * d + c]);
    p[static_cast<std::size_t>(j)] = s.scale * score;
    top = std::max(top, p[static_cast<std::size_t>(j)]);
  }
  double total = 0;
  for (auto& x : p) total += std::exp(x - top);
  for (auto& x : p) x = std::exp(x - top) / total;
  return top + std::log(total);
}

template <typename S>
void attention_forward(const AttentionShape& s, const S* q, const S* k, const S* v, S* y, stat_t<S>* lse) {
  const std::int64_t d = s.head_dim;
  std::vector<double> p;
  for (std::int64_t h = 0; h < s.batch_heads; ++h)
    for (std::int64_t i = 0; i < s.queries; ++i) {
      lse[h * s.queries + i] = static_cast<stat_t<S>>(attention_row(s, q, k, h, i, p));
      for (std::int64_t c = 0; c < d; ++c) {
        double total = 0;
        for (std::size_t j = 0; j < p.size(); ++j)
          total += p[j] * cpu::to_double(v[(h * s.keys + static_cast<std::int64_t>(j)) * d + c]);
        y[(h * s.queries + i) * d + c] = cpu::from_double<S>(total);
      }
    }
}

// The backward of the composition: P from the recomputed row, dP = dy v^T, dS = P (dP - sum(dP P)).
template <typename S>
void attention_backward(const AttentionShape& s, const S* q, const S* k, const S* v, const S* dy, S* dq, S* dk, S* dv) {
  const std::int64_t d = s.head_dim;
  std::vector<double> gq(static_cast<std::size_t>(s.queries * d)), gk(static_cast<std::size_t>(s.keys * d)),
      gv(static_cast<std::size_t>(s.keys * d)), p, dp;
  for (std::int64_t h = 0; h < s.batch_heads; ++h) {
    std::fill(gq.begin(), gq.end(), 0.0);
    std::fill(gk.begin(), gk.end(), 0.0);
    std::fill(gv.begin(), gv.end(), 0.0);
    for (std::int64_t i = 0; i < s.queries; ++i) {
      (void)attention_row(s, q, k, h, i, p);
      dp.assign(p.size(), 0.0);
      double inner = 0;
      for (std::size_t j = 0; j < p.size(); ++j) {
        for (std::int64_t c = 0; c < d; ++c)
          dp[j] += cpu::to_double(dy[(h * s.queries + i) * d + c]) *
                   cpu::to_double(v[(h * s.keys + static_cast<std::int64_t>(j)) * d + c]);
        inner += dp[j] * p[j];
      }
      for (std::size_t j = 0; j < p.size(); ++j) {
        const double ds = p[j] * (dp[j] - inner) * s.scale;
        const auto jj = static_cast<std::int64_t>(j);
        for (std::int64_t c = 0; c < d; ++c) {
          gq[static_cast<std::size_t>(i * d + c)] += ds * cpu::to_double(k[(h * s.keys + jj) * d + c]);
          gk[static_cast<std::size_t>(jj * d + c)] += ds * cpu::to_double(q[(h * s.queries + i) * d + c]);
          gv[static_cast<std::size_t>(jj * d + c)] += p[j] * cpu::to_double(dy[(h * s.queries + i) * d + c]);
        }
      }
    }
    for (std::int64_t e = 0; e < s.queries * d; ++e)
      dq[h * s.queries * d + e] = cpu::from_double<S>(gq[static_cast<std::size_t>(e)]);
    for (std::int64_t e = 0; e < s.keys * d; ++e) {
      dk[h * s.keys * d + e] = cpu::from_double<S>(gk[static_cast<std::size_t>(e)]);
      dv[h * s.keys * d + e] = cpu::from_double<S>(gv[static_cast<std::size_t>(e)]);
    }
  }
}

}  // namespace trainlab::reference
