// The CPU backends' fused attention (CpuBackend, backends/cpu/cpu_backend.h; flash attention's
// online softmax, Dao et al. 2022, and its backward as FlashAttention-2 writes it). A head is one
// task: its q, k and v widened to f32 once (f64 stays f64) into the task's scratch, each query row's
// scores made a row at a time and never kept, the outputs rounded once. Heads run in parallel and
// each head's sums run in a fixed order, so the bits do not depend on the thread count. Memory beyond
// the operands: a head's rows in the compute type and one row of scores per thread: O(S), not O(S^2).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"

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
    for (std::int64_t i = 0; i < n; ++i) buffer[static_cast<std::size_t>(i)] = load<C>(src[i]);
    return buffer.data();
  }
}

// One head's forward: for each query, the scores against its visible keys, their maximum, then
// y = sum softmax(scores) v; lse = max + log(sum exp(score - max)).
template <typename C>
void head_forward(const AttentionShape& s, const C* q, const C* k, const C* v, C* y, C* lse, std::vector<C>& row) {
  const std::int64_t d = s.head_dim;
  const auto scale = static_cast<C>(s.scale);
  row.resize(static_cast<std::size_t>(s.keys));
  for (std::int64_t i = 0; i < s.queries; ++i) {
    const std::int64_t visible = attention_keys(s, i);
    C top = -INFINITY;
    for (std::int64_t j = 0; j < visible; ++j) {
      row[static_cast<std::size_t>(j)] = scale * row_dot(q + i * d, k + j * d, d);
      top = std::max(top, row[static_cast<std::size_t>(j)]);
    }
    C total = 0;
    C* out = y + i * d;
    std::fill(out, out + d, C(0));
    for (std::int64_t j = 0; j < visible; ++j) {
      const C p = std::exp(row[static_cast<std::size_t>(j)] - top);
      total += p;
      const C* vj = v + j * d;
      for (std::int64_t c = 0; c < d; ++c) out[c] += p * vj[c];
    }
    const C inv = C(1) / total;
    for (std::int64_t c = 0; c < d; ++c) out[c] *= inv;
    lse[i] = top + std::log(total);
  }
}

// One head's backward: per query i (in order), per visible key j (in order): P = exp(s - lse),
// dP = dy_i . v_j, dS = P (dP - delta_i); dq_i += dS k_j, dk_j += dS q_i, dv_j += P dy_i; then the
// scale on dq and dk.
template <typename C>
void head_backward(const AttentionShape& s, const C* q, const C* k, const C* v, const C* y, const C* lse, const C* dy,
                   C* dq, C* dk, C* dv) {
  const std::int64_t d = s.head_dim;
  const auto scale = static_cast<C>(s.scale);
  std::fill(dk, dk + s.keys * d, C(0));
  std::fill(dv, dv + s.keys * d, C(0));
  for (std::int64_t i = 0; i < s.queries; ++i) {
    const C* qi = q + i * d;
    const C* dyi = dy + i * d;
    C* dqi = dq + i * d;
    std::fill(dqi, dqi + d, C(0));
    const C delta = row_dot(dyi, y + i * d, d);
    for (std::int64_t j = 0; j < attention_keys(s, i); ++j) {
      const C p = std::exp(scale * row_dot(qi, k + j * d, d) - lse[i]);
      const C ds = p * (row_dot(dyi, v + j * d, d) - delta);
      const C* kj = k + j * d;
      C* dkj = dk + j * d;
      C* dvj = dv + j * d;
      for (std::int64_t c = 0; c < d; ++c) {
        dqi[c] += ds * kj[c];
        dkj[c] += ds * qi[c];
        dvj[c] += p * dyi[c];
      }
    }
    for (std::int64_t c = 0; c < d; ++c) dqi[c] *= scale;
  }
  for (std::int64_t e = 0; e < s.keys * d; ++e) dk[e] *= scale;
}

// dst (storage S) = src (compute C), rounded once.
template <typename S, typename C>
void round_rows(const C* src, S* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = store<S>(src[i]);
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
      std::vector<C> bq, bk, bv, out(static_cast<std::size_t>(qn)), row, sums(static_cast<std::size_t>(s.queries));
#pragma omp for schedule(static)
      for (std::int64_t h = 0; h < s.batch_heads; ++h) {
        const C* qh = head_rows(as<S>(q) + h * qn, qn, bq);
        const C* kh = head_rows(as<S>(k) + h * kn, kn, bk);
        const C* vh = head_rows(as<S>(v) + h * kn, kn, bv);
        head_forward(s, qh, kh, vh, out.data(), sums.data(), row);
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
#pragma omp for schedule(static)
      for (std::int64_t h = 0; h < s.batch_heads; ++h) {
        for (std::int64_t i = 0; i < s.queries; ++i)
          sums[static_cast<std::size_t>(i)] = static_cast<C>(as<P>(lse)[h * s.queries + i]);
        head_backward(s, head_rows(as<S>(q) + h * qn, qn, bq), head_rows(as<S>(k) + h * kn, kn, bk),
                      head_rows(as<S>(v) + h * kn, kn, bv), head_rows(as<S>(y) + h * qn, qn, by), sums.data(),
                      head_rows(as<S>(dy) + h * qn, qn, bdy), gq.data(), gk.data(), gv.data());
        round_rows(gq.data(), as<S>(dq) + h * qn, qn);
        round_rows(gk.data(), as<S>(dk) + h * kn, kn);
        round_rows(gv.data(), as<S>(dv) + h * kn, kn);
      }
    }
  });
}

}  // namespace trainlab::cpu
