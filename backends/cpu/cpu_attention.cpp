// The CPU backends' fused attention (CpuBackend, backends/cpu/cpu_backend.h; flash attention's
// online softmax, Dao et al. 2022, and its backward as FlashAttention-2 writes it). A head is one
// task: its q, k and v widened to f32 once (f64 stays f64) into the task's scratch, each query row's
// scores made a row at a time and never kept, the outputs rounded once. Heads run in parallel and
// each head's sums run in a fixed order, so the bits do not depend on the thread count. Memory beyond
// the operands: a head's rows in the compute type (K and V also transposed, and dK, dV transposed in
// the backward) and one row of scores per thread: O(S), not O(S^2).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
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

// The blocked products a head is made of run on tiles of R rows by kTileLanes<C> columns (two of the
// build's vector registers per row: 32 f32 with AVX-512, 16 with AVX2), their sums in registers:
// out[r][w] (+)= sum over c in [c0, c1) of a[r][c] * bt[c][w]. Each output element is one lane
// summing in c order, so the bits depend neither on the thread count nor on the vector width.
#if defined(__AVX512F__)
constexpr int kTileVectorBytes = 64;
#else
constexpr int kTileVectorBytes = 32;
#endif
template <typename C>
constexpr std::int64_t kTileLanes = 2 * kTileVectorBytes / static_cast<std::int64_t>(sizeof(C));

template <typename C>
struct TileVector;
template <>
struct TileVector<float> {
  typedef float type __attribute__((vector_size(kTileVectorBytes)));
};
template <>
struct TileVector<double> {
  typedef double type __attribute__((vector_size(kTileVectorBytes)));
};

template <int R, typename C>
inline void attention_tile(const C* a, std::int64_t lda, const C* bt, std::int64_t ldb, std::int64_t c0,
                           std::int64_t c1, C* out, std::int64_t ldo, bool accumulate) {
  using V = typename TileVector<C>::type;
  constexpr std::int64_t per = static_cast<std::int64_t>(sizeof(V) / sizeof(C));
  V lo[R], hi[R];
  for (int r = 0; r < R; ++r) {
    lo[r] = V{};
    hi[r] = V{};
    if (accumulate) {
      std::memcpy(&lo[r], out + r * ldo, sizeof(V));
      std::memcpy(&hi[r], out + r * ldo + per, sizeof(V));
    }
  }
  for (std::int64_t c = c0; c < c1; ++c) {
    V b0, b1;
    std::memcpy(&b0, bt + c * ldb, sizeof(V));
    std::memcpy(&b1, bt + c * ldb + per, sizeof(V));
    for (int r = 0; r < R; ++r) {
      const C ar = a[r * lda + c];
      lo[r] += ar * b0;
      hi[r] += ar * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    std::memcpy(out + r * ldo, &lo[r], sizeof(V));
    std::memcpy(out + r * ldo + per, &hi[r], sizeof(V));
  }
}

// The product over `rows` rows of a and the column tiles [0, width) of bt (width a multiple of
// kTileLanes), with inner range [c0(j0), c1(row group)) per tile: the causal products skip what the
// mask makes zero.
template <typename C, typename Inner>
void tiled_product(const C* a, std::int64_t lda, std::int64_t rows, const C* bt, std::int64_t ldb, std::int64_t width,
                   C* out, std::int64_t ldo, bool accumulate, const Inner& inner) {
  constexpr std::int64_t L = kTileLanes<C>;
  std::int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    for (std::int64_t j = 0; j < width; j += L) {
      const auto [c0, c1] = inner(r, 4, j);
      attention_tile<4>(a + r * lda, lda, bt + j, ldb, c0, c1, out + r * ldo + j, ldo, accumulate);
    }
  }
  for (; r < rows; ++r) {
    for (std::int64_t j = 0; j < width; j += L) {
      const auto [c0, c1] = inner(r, 1, j);
      attention_tile<1>(a + r * lda, lda, bt + j, ldb, c0, c1, out + r * ldo + j, ldo, accumulate);
    }
  }
}

template <typename C>
std::int64_t tile_lanes_up(std::int64_t n) {
  return (n + kTileLanes<C> - 1) / kTileLanes<C> * kTileLanes<C>;
}

// A head's operands laid out for the tiles (rows padded with zeros to whole tiles): K and V
// transposed ([head_dim][keys]) for the scores, K and V as rows of head_dim padded for the products
// over keys; per block of queries its scores (then probabilities) and their gradient, its outputs,
// and Q and dY transposed for the key gradients, which build up transposed ([head_dim][keys]).
constexpr std::int64_t kQueryBlock = 64;

template <typename C>
struct HeadScratch {
  std::int64_t kp = 0, dp = 0;  // keys and head_dim padded to whole tiles
  std::vector<C> kt, vt, kr, vr, dkt, dvt, p, ds, out, qt, dyt, inverse;
  void size_for(const AttentionShape& s, bool backward) {
    kp = tile_lanes_up<C>(s.keys);
    dp = tile_lanes_up<C>(s.head_dim);
    auto sized = [](std::vector<C>& v, std::int64_t n) { v.assign(static_cast<std::size_t>(n), C(0)); };
    sized(kt, s.head_dim * kp);
    sized(vr, s.keys * dp);
    sized(p, kQueryBlock * kp);
    sized(out, kQueryBlock * dp);
    sized(inverse, kQueryBlock);
    if (backward) {
      sized(vt, s.head_dim * kp);
      sized(kr, s.keys * dp);
      sized(dkt, s.head_dim * kp);
      sized(dvt, s.head_dim * kp);
      sized(ds, kQueryBlock * kp);
      sized(qt, s.head_dim * kQueryBlock);
      sized(dyt, s.head_dim * kQueryBlock);
    }
  }
};

// src [rows][cols] -> dst [cols][ld] (dst[c * ld + r] = src[r * cols + c]).
template <typename C>
void transpose_rows(const C* src, std::int64_t rows, std::int64_t cols, C* dst, std::int64_t ld) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ld + r] = src[r * cols + c];
}

// src [rows][cols] -> dst [rows][ld], the padding left as it is (zero).
template <typename C>
void pad_head_rows(const C* src, std::int64_t rows, std::int64_t cols, C* dst, std::int64_t ld) {
  for (std::int64_t r = 0; r < rows; ++r) std::copy(src + r * cols, src + (r + 1) * cols, dst + r * ld);
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

// The scores of queries [i0, i0 + rows) (rows of a, head_dim wide) against bt's keys, each group
// of rows only as far as its last row sees: out's rows, kp apart.
template <typename C>
void block_scores(const AttentionShape& s, const C* a, std::int64_t i0, std::int64_t rows, const C* bt, C* out,
                  std::int64_t kp) {
  const std::int64_t d = s.head_dim;
  auto all_channels = [d](std::int64_t, std::int64_t, std::int64_t) {
    return std::pair<std::int64_t, std::int64_t>{0, d};
  };
  for (std::int64_t r = 0; r < rows; r += 4) {
    const std::int64_t n = std::min<std::int64_t>(4, rows - r);
    const std::int64_t width = tile_lanes_up<C>(attention_keys(s, i0 + r + n - 1));
    tiled_product(a + (i0 + r) * d, d, n, bt, kp, width, out + r * kp, kp, false, all_channels);
  }
}

// One head's forward, a block of queries at a time: the block's scores (O(block x keys), never
// S x S), each row's maximum, P = exp(score - max) (zero past what the row sees), Y = P V / sum,
// lse = max + log(sum).
template <typename C>
void head_forward(const AttentionShape& s, const C* q, const C* k, const C* v, C* y, C* lse, HeadScratch<C>& w) {
  const std::int64_t d = s.head_dim, kp = w.kp, dp = w.dp;
  const auto scale = static_cast<C>(s.scale);
  transpose_rows(k, s.keys, d, w.kt.data(), kp);
  pad_head_rows(v, s.keys, d, w.vr.data(), dp);
  for (std::int64_t i0 = 0; i0 < s.queries; i0 += kQueryBlock) {
    const std::int64_t rows = std::min(kQueryBlock, s.queries - i0);
    const std::int64_t block_width = tile_lanes_up<C>(attention_keys(s, i0 + rows - 1));
    block_scores(s, q, i0, rows, w.kt.data(), w.p.data(), kp);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t visible = attention_keys(s, i0 + r);
      C* __restrict p = w.p.data() + r * kp;
      C top = -INFINITY;
      for (std::int64_t j = 0; j < visible; ++j) top = std::max(top, scale * p[j]);
      for (std::int64_t j = 0; j < visible; ++j) p[j] = fast_exp(scale * p[j] - top);
      std::fill(p + visible, p + block_width, C(0));
      const C total = lane_total(p, visible);
      w.inverse[static_cast<std::size_t>(r)] = C(1) / total;
      lse[i0 + r] = top + std::log(total);
    }
    auto keys_seen = [&](std::int64_t r, std::int64_t n, std::int64_t) {
      return std::pair<std::int64_t, std::int64_t>{0, attention_keys(s, i0 + r + n - 1)};
    };
    tiled_product(w.p.data(), kp, rows, w.vr.data(), dp, dp, w.out.data(), dp, false, keys_seen);
    for (std::int64_t r = 0; r < rows; ++r) {
      const C inv = w.inverse[static_cast<std::size_t>(r)];
      const C* __restrict o = w.out.data() + r * dp;
      C* __restrict out = y + (i0 + r) * d;
      for (std::int64_t c = 0; c < d; ++c) out[c] = o[c] * inv;
    }
  }
}

// One head's backward (FlashAttention-2's), a block of queries at a time: P = exp(s - lse) and
// dP = dY V^T over what each row sees, dS = P (dP - delta) with delta_i = dy_i . y_i; then
// dQ = scale dS K, and dK^T += scale Q^T dS, dV^T += dY^T P (transposed back at the end).
template <typename C>
void head_backward(const AttentionShape& s, const C* q, const C* k, const C* v, const C* y, const C* lse, const C* dy,
                   C* dq, C* dk, C* dv, HeadScratch<C>& w) {
  const std::int64_t d = s.head_dim, kp = w.kp, dp = w.dp, offset = s.keys - s.queries;
  const auto scale = static_cast<C>(s.scale);
  transpose_rows(k, s.keys, d, w.kt.data(), kp);
  transpose_rows(v, s.keys, d, w.vt.data(), kp);
  pad_head_rows(k, s.keys, d, w.kr.data(), dp);
  std::fill(w.dkt.begin(), w.dkt.end(), C(0));
  std::fill(w.dvt.begin(), w.dvt.end(), C(0));
  for (std::int64_t i0 = 0; i0 < s.queries; i0 += kQueryBlock) {
    const std::int64_t rows = std::min(kQueryBlock, s.queries - i0);
    const std::int64_t block_width = tile_lanes_up<C>(attention_keys(s, i0 + rows - 1));
    block_scores(s, q, i0, rows, w.kt.data(), w.p.data(), kp);
    block_scores(s, dy, i0, rows, w.vt.data(), w.ds.data(), kp);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = i0 + r, visible = attention_keys(s, i);
      C* __restrict p = w.p.data() + r * kp;
      C* __restrict ds = w.ds.data() + r * kp;
      const C delta = row_dot(dy + i * d, y + i * d, d);
      for (std::int64_t j = 0; j < visible; ++j) {
        p[j] = fast_exp(scale * p[j] - lse[i]);
        ds[j] = p[j] * (ds[j] - delta);
      }
      std::fill(p + visible, p + block_width, C(0));
      std::fill(ds + visible, ds + block_width, C(0));
    }
    auto keys_seen = [&](std::int64_t r, std::int64_t n, std::int64_t) {
      return std::pair<std::int64_t, std::int64_t>{0, attention_keys(s, i0 + r + n - 1)};
    };
    tiled_product(w.ds.data(), kp, rows, w.kr.data(), dp, dp, w.out.data(), dp, false, keys_seen);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < d; ++c) dq[(i0 + r) * d + c] = w.out[static_cast<std::size_t>(r * dp + c)] * scale;
    // The key tiles from j: only the rows that see key j or later add to them.
    auto rows_seeing = [&](std::int64_t, std::int64_t, std::int64_t j) {
      const std::int64_t first = s.causal ? std::clamp<std::int64_t>(j - offset - i0, 0, rows) : 0;
      return std::pair<std::int64_t, std::int64_t>{first, rows};
    };
    transpose_rows(q + i0 * d, rows, d, w.qt.data(), kQueryBlock);
    transpose_rows(dy + i0 * d, rows, d, w.dyt.data(), kQueryBlock);
    tiled_product(w.qt.data(), kQueryBlock, d, w.ds.data(), kp, block_width, w.dkt.data(), kp, true, rows_seeing);
    tiled_product(w.dyt.data(), kQueryBlock, d, w.p.data(), kp, block_width, w.dvt.data(), kp, true, rows_seeing);
  }
  for (std::int64_t j = 0; j < s.keys; ++j)
    for (std::int64_t c = 0; c < d; ++c) {
      dk[j * d + c] = w.dkt[static_cast<std::size_t>(c * kp + j)] * scale;
      dv[j * d + c] = w.dvt[static_cast<std::size_t>(c * kp + j)];
    }
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
      scratch.size_for(s, false);
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
      scratch.size_for(s, true);
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
