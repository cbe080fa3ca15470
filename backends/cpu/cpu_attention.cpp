// The CPU backends' fused attention (CpuBackend, backends/cpu/cpu_backend.h; flash attention's
// online softmax, Dao et al. 2022, and its backward as FlashAttention-2 writes it). A head is one
// task: its q, k and v widened to f32 once (f64 stays f64) into the task's scratch, each query row's
// scores made a row at a time and never kept, the outputs rounded once. Heads run in parallel and
// each head's sums run in a fixed order, so the bits do not depend on the thread count. Memory beyond
// the operands: a head's rows in the compute type (K and V also transposed, and dK, dV transposed in
// the backward) and one row of scores per thread: O(S), not O(S^2).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_math.h"
#include "backends/cpu/simd.h"

namespace trainlab::cpu {

namespace {

template <typename S>
using lse_stat_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

// The keys query i sees: [0, visible).
std::int64_t attention_keys(const AttentionShape& s, std::int64_t i) {
  return s.causal ? std::min(s.keys, i + (s.keys - s.queries) + 1) : s.keys;
}

template <typename C>
C row_dot(const C* __restrict a, const C* __restrict b, std::int64_t n) {
  C lanes[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) lanes[i % 8] += a[i] * b[i];
  C total = 0;
  for (int l = 0; l < 8; ++l) total += lanes[l];
  return total;
}

// A head's rows [rows, head_dim] of storage type S, in the compute type C (a view when S is C).
template <typename S, typename C>
const C* head_rows(const S* src, std::int64_t n, std::vector<C>& buffer) {
  if constexpr (std::is_same_v<S, C>) {
    (void)n;
    (void)buffer;
    return src;
  } else {
    buffer.resize(static_cast<std::size_t>(n));
    if constexpr (std::is_same_v<C, float> && (std::is_same_v<S, bf16> || std::is_same_v<S, f16>)) {
      widen_run(src, buffer.data(), n);  // the SIMD casts, exact
    } else {
      for (std::int64_t i = 0; i < n; ++i) buffer[static_cast<std::size_t>(i)] = load<C>(src[i]);
    }
    return buffer.data();
  }
}

// A head's keys and values transposed ([head_dim][keys]) so that a query's scores against every key
// (and dy's against every value) are sums over the head's channels of contiguous rows: loops over
// the keys the compiler vectorises, no horizontal sum per (query, key) pair. The backward's dK and
// dV build up transposed the same way (a rank-1 update per query), then are transposed back.
template <typename C>
struct HeadScratch {
  std::vector<C> kt, vt, dkt, dvt, p, ds;
  void size_for(const AttentionShape& s) {
    const auto kn = static_cast<std::size_t>(s.keys * s.head_dim);
    for (auto* v : {&kt, &vt, &dkt, &dvt}) v->resize(kn);
    p.resize(static_cast<std::size_t>(s.keys));
    ds.resize(static_cast<std::size_t>(s.keys));
  }
};

// src [rows][cols] -> dst [cols][rows].
template <typename C>
void transpose_rows(const C* src, std::int64_t rows, std::int64_t cols, C* dst) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// out[j] = sum over c of a[c] * mt[c][j], j < n (mt's rows `stride` apart), in c order.
template <typename C>
void row_times_transposed(const C* __restrict a, const C* __restrict mt, std::int64_t d, std::int64_t stride,
                          std::int64_t n, C* __restrict out) {
  std::fill(out, out + n, C(0));
  for (std::int64_t c = 0; c < d; ++c) {
    const C ac = a[c];
    const C* __restrict m = mt + c * stride;
    for (std::int64_t j = 0; j < n; ++j) out[j] += ac * m[j];
  }
}

// The sum of x[0, n) in 16 fixed lanes (vectorised, the same order every run).
template <typename C>
C lane_total(const C* __restrict x, std::int64_t n) {
  C lanes[16] = {};
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) lanes[l] += x[j + l];
  for (; j < n; ++j) lanes[j % 16] += x[j];
  C total = 0;
  for (int l = 0; l < 16; ++l) total += lanes[l];
  return total;
}

// One head's forward: for each query, its scores against the visible keys (a row, the only one
// kept), their maximum, y = sum softmax(scores) v; lse = max + log(sum exp(score - max)).
template <typename C>
void head_forward(const AttentionShape& s, const C* q, const C* k, const C* v, C* y, C* lse, HeadScratch<C>& w) {
  const std::int64_t d = s.head_dim, n_keys = s.keys;
  const auto scale = static_cast<C>(s.scale);
  transpose_rows(k, n_keys, d, w.kt.data());
  C* __restrict p = w.p.data();
  for (std::int64_t i = 0; i < s.queries; ++i) {
    const std::int64_t visible = attention_keys(s, i);
    row_times_transposed(q + i * d, w.kt.data(), d, n_keys, visible, p);
    C top = -INFINITY;
    for (std::int64_t j = 0; j < visible; ++j) top = std::max(top, scale * p[j]);
    for (std::int64_t j = 0; j < visible; ++j) p[j] = fast_exp(scale * p[j] - top);
    const C total = lane_total(p, visible);
    C* __restrict out = y + i * d;
    std::fill(out, out + d, C(0));
    for (std::int64_t j = 0; j < visible; ++j) {
      const C pj = p[j];
      const C* __restrict vj = v + j * d;
      for (std::int64_t c = 0; c < d; ++c) out[c] += pj * vj[c];
    }
    const C inv = C(1) / total;
    for (std::int64_t c = 0; c < d; ++c) out[c] *= inv;
    lse[i] = top + std::log(total);
  }
}

// One head's backward (FlashAttention-2's): per query i, in order: P = exp(s - lse) and
// dP = dy_i . v over the visible keys, dS = P (dP - delta_i) with delta_i = dy_i . y_i; then
// dq_i = scale sum_j dS_j k_j, and dK^T += q_i dS^T, dV^T += dy_i P^T (rank-1 updates, transposed
// back at the end, dK scaled).
template <typename C>
void head_backward(const AttentionShape& s, const C* q, const C* k, const C* v, const C* y, const C* lse, const C* dy,
                   C* dq, C* dk, C* dv, HeadScratch<C>& w) {
  const std::int64_t d = s.head_dim, n_keys = s.keys;
  const auto scale = static_cast<C>(s.scale);
  transpose_rows(k, n_keys, d, w.kt.data());
  transpose_rows(v, n_keys, d, w.vt.data());
  std::fill(w.dkt.begin(), w.dkt.end(), C(0));
  std::fill(w.dvt.begin(), w.dvt.end(), C(0));
  C* __restrict p = w.p.data();
  C* __restrict ds = w.ds.data();
  for (std::int64_t i = 0; i < s.queries; ++i) {
    const std::int64_t visible = attention_keys(s, i);
    const C* qi = q + i * d;
    const C* dyi = dy + i * d;
    row_times_transposed(qi, w.kt.data(), d, n_keys, visible, p);
    for (std::int64_t j = 0; j < visible; ++j) p[j] = fast_exp(scale * p[j] - lse[i]);
    row_times_transposed(dyi, w.vt.data(), d, n_keys, visible, ds);
    const C delta = row_dot(dyi, y + i * d, d);
    for (std::int64_t j = 0; j < visible; ++j) ds[j] = p[j] * (ds[j] - delta);
    C* __restrict dqi = dq + i * d;
    std::fill(dqi, dqi + d, C(0));
    for (std::int64_t j = 0; j < visible; ++j) {
      const C dsj = ds[j];
      const C* __restrict kj = k + j * d;
      for (std::int64_t c = 0; c < d; ++c) dqi[c] += dsj * kj[c];
    }
    for (std::int64_t c = 0; c < d; ++c) {
      dqi[c] *= scale;
      const C qc = qi[c] * scale, dyc = dyi[c];
      C* __restrict dkc = w.dkt.data() + c * n_keys;
      C* __restrict dvc = w.dvt.data() + c * n_keys;
      for (std::int64_t j = 0; j < visible; ++j) {
        dkc[j] += qc * ds[j];
        dvc[j] += dyc * p[j];
      }
    }
  }
  transpose_rows(w.dkt.data(), d, n_keys, dk);
  transpose_rows(w.dvt.data(), d, n_keys, dv);
}

// dst (storage S) = src (compute C), rounded once.
template <typename S, typename C>
void round_rows(const C* src, S* dst, std::int64_t n) {
  if constexpr (std::is_same_v<C, float> && (std::is_same_v<S, bf16> || std::is_same_v<S, f16>)) {
    narrow_run(src, dst, n);  // the SIMD casts, bit-identical to store<S>
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = store<S>(src[i]);
  }
}

}  // namespace

void CpuBackend::attention_forward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                                   void* y, void* lse) {
  dispatch_floating(dtype, op_name("attention_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = lse_stat_t<S>;
    const std::int64_t qn = s.queries * s.head_dim, kn = s.keys * s.head_dim;
#pragma omp parallel num_threads(threads_)
    {
      std::vector<C> bq, bk, bv, out(static_cast<std::size_t>(qn)), sums(static_cast<std::size_t>(s.queries));
      HeadScratch<C> scratch;
      scratch.size_for(s);
#pragma omp for schedule(static)
      for (std::int64_t h = 0; h < s.batch_heads; ++h) {
        const C* qh = head_rows(as<S>(q) + h * qn, qn, bq);
        const C* kh = head_rows(as<S>(k) + h * kn, kn, bk);
        const C* vh = head_rows(as<S>(v) + h * kn, kn, bv);
        head_forward(s, qh, kh, vh, out.data(), sums.data(), scratch);
        round_rows(out.data(), as<S>(y) + h * qn, qn);
        for (std::int64_t i = 0; i < s.queries; ++i)
          as<P>(lse)[h * s.queries + i] = static_cast<P>(sums[static_cast<std::size_t>(i)]);
      }
    }
  });
}

void CpuBackend::attention_backward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                                    const void* y, const void* lse, const void* dy, void* dq, void* dk, void* dv) {
  dispatch_floating(dtype, op_name("attention_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    using P = lse_stat_t<S>;
    const std::int64_t qn = s.queries * s.head_dim, kn = s.keys * s.head_dim;
#pragma omp parallel num_threads(threads_)
    {
      std::vector<C> bq, bk, bv, by, bdy, sums(static_cast<std::size_t>(s.queries));
      std::vector<C> gq(static_cast<std::size_t>(qn)), gk(static_cast<std::size_t>(kn)),
          gv(static_cast<std::size_t>(kn));
      HeadScratch<C> scratch;
      scratch.size_for(s);
#pragma omp for schedule(static)
      for (std::int64_t h = 0; h < s.batch_heads; ++h) {
        for (std::int64_t i = 0; i < s.queries; ++i)
          sums[static_cast<std::size_t>(i)] = static_cast<C>(as<P>(lse)[h * s.queries + i]);
        head_backward(s, head_rows(as<S>(q) + h * qn, qn, bq), head_rows(as<S>(k) + h * kn, kn, bk),
                      head_rows(as<S>(v) + h * kn, kn, bv), head_rows(as<S>(y) + h * qn, qn, by), sums.data(),
                      head_rows(as<S>(dy) + h * qn, qn, bdy), gq.data(), gk.data(), gv.data(), scratch);
        round_rows(gq.data(), as<S>(dq) + h * qn, qn);
        round_rows(gk.data(), as<S>(dk) + h * kn, kn);
        round_rows(gv.data(), as<S>(dv) + h * kn, kn);
      }
    }
  });
}

}  // namespace trainlab::cpu
