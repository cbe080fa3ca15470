// Scaled dot-product attention, fused (flash attention's form: the [queries, keys] scores are never
// in memory whole; the backend makes them a row or a tile at a time):
//   forward    y = softmax(q k^T / sqrt(D), causal?) v;  lse = each row's log-sum-exp (kept)
//   backward   P = exp(q k^T / sqrt(D) - lse);  dP = dy v^T;  dS = P (dP - rowsum(dy y))
//              dq = dS k / sqrt(D);  dk = dS^T q / sqrt(D);  dv = P^T dy
// q [B, H, T, D], k and v [B, H, S, D] (causal: T <= S, query i sees the keys j <= i + S - T), y as
// q. The same values as softmax(matmul(q, k^T) scaled, causal) then matmul with v, up to rounding.
// The packed form takes q, k and v as one [3, B, H, T, D] tensor (a model's qkv projection made
// dense) and gives its gradient as one tensor: no slice's gradient scattered into a zero copy of
// the whole and summed with the others.
#include <cmath>
#include <utility>

#include "engine/core/autocast.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

struct AttentionOperands {
  const void *q, *k, *v;
};
struct AttentionGradients {
  void *dq, *dk, *dv;
};

// y (shaped `shape`) and each row's log-sum-exp, from dense operands.
std::pair<Tensor, Tensor> attention_forward(Backend& be, DType dtype, const AttentionShape& s, const Shape& shape,
                                            const AttentionOperands& in) {
  Tensor y = Tensor::empty(shape, dtype, be);
  Tensor lse = Tensor::empty({s.batch_heads, s.queries}, batch_norm_stat_dtype(dtype), be);
  if (y.numel() > 0) be.attention_forward(dtype, s, in.q, in.k, in.v, y.raw_data(), lse.raw_data());
  return {y, lse};
}

// The gradients into `out`; with no queries, k's and v's are zero (`tensors` are the buffers).
void attention_backward(Backend& bk, const Tensor& dy, const AttentionShape& s, const AttentionOperands& in,
                        const Tensor& y, const Tensor& lse, const AttentionGradients& out,
                        const std::vector<Tensor>& tensors) {
  if (dy.numel() > 0) {
    bk.attention_backward(dy.dtype(), s, in.q, in.k, in.v, y.raw_data(), lse.raw_data(), dy.raw_data(), out.dq, out.dk,
                          out.dv);
    return;
  }
  for (const Tensor& t : tensors) bk.fill(t.dtype(), t.raw_data(), t.numel(), 0.0);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal) {
  TL_SPAN("attention.forward");
  ops_detail::check_defined("attention", "q", q_in);
  ops_detail::check_defined("attention", "k", k_in);
  ops_detail::check_defined("attention", "v", v_in);
  const Tensor qc = autocast_low(q_in), kc = autocast_low(k_in), vc = autocast_low(v_in);
  ops_detail::check_compatible("attention", qc, kc);
  ops_detail::check_compatible("attention", qc, vc);
  ops_detail::check_floating("attention", qc);
  ops_detail::check_rank("attention", "q", qc, 4, "[batch, heads, queries, head_dim]");
  ops_detail::check_rank("attention", "k", kc, 4, "[batch, heads, keys, head_dim]");
  TL_CHECK(kc.shape() == vc.shape(),
           "attention: k and v must have one shape, got " + shape_str(kc.shape()) + " and " + shape_str(vc.shape()));
  TL_CHECK(qc.size(0) == kc.size(0) && qc.size(1) == kc.size(1) && qc.size(3) == kc.size(3),
           "attention: q " + shape_str(qc.shape()) + " and k " + shape_str(kc.shape()) +
               " differ in batch, heads or head_dim");
  TL_CHECK(qc.size(3) > 0 && kc.size(2) > 0,
           "attention: empty heads or keys: q " + shape_str(qc.shape()) + ", k " + shape_str(kc.shape()));
  TL_CHECK(!causal || qc.size(2) <= kc.size(2),
           "attention: a causal mask needs at least as many keys as queries, got " + std::to_string(qc.size(2)) +
               " queries and " + std::to_string(kc.size(2)) + " keys");
  const Tensor q = ops_detail::dense(qc), k = ops_detail::dense(kc), v = ops_detail::dense(vc);
  const std::int64_t d = q.size(3);
  const AttentionShape s{
      q.size(0) * q.size(1), q.size(2), k.size(2), d, 1.0 / std::sqrt(static_cast<double>(d)), causal};
  AttentionOperands in{q.raw_data(), k.raw_data(), v.raw_data()};
  // Named, not a structured binding: the backward captures lse, which clang 14 refuses for a binding.
  const std::pair<Tensor, Tensor> forward = attention_forward(q.backend(), q.dtype(), s, q.shape(), in);
  const Tensor y = forward.first, lse = forward.second;
  const Tensor saved_y = y.detach();
  return record(
      y, causal ? "attention_causal" : "attention", {qc, kc, vc}, [=](const Tensor& g, const std::vector<bool>&) {
        const Tensor dy = ops_detail::dense(g);
        Backend& bk = dy.backend();
        Tensor dq = Tensor::empty(q.shape(), dy.dtype(), bk), dk = Tensor::empty(k.shape(), dy.dtype(), bk),
               dv = Tensor::empty(v.shape(), dy.dtype(), bk);
        attention_backward(bk, dy, s, in, saved_y, lse, {dq.raw_data(), dk.raw_data(), dv.raw_data()}, {dq, dk, dv});
        return std::vector<Tensor>{dq, dk, dv};
      });
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv_in, bool causal) {
  TL_SPAN("attention.forward");
  ops_detail::check_defined("attention", "qkv", qkv_in);
  const Tensor qc = autocast_low(qkv_in);
  ops_detail::check_floating("attention", qc);
  ops_detail::check_rank("attention", "qkv", qc, 5, "[3, batch, heads, tokens, head_dim]");
  TL_CHECK(qc.size(0) == 3,
           "attention: packed qkv must be [3, batch, heads, tokens, head_dim] (q, k, v), got " + shape_str(qc.shape()));
  TL_CHECK(qc.size(4) > 0 && qc.size(3) > 0, "attention: empty heads or tokens: qkv " + shape_str(qc.shape()));
  const Tensor qkv = ops_detail::dense(qc);
  const std::int64_t d = qkv.size(4), t = qkv.size(3);
  const AttentionShape s{qkv.size(1) * qkv.size(2), t, t, d, 1.0 / std::sqrt(static_cast<double>(d)), causal};
  const std::size_t third = static_cast<std::size_t>(qkv.numel() / 3) * dtype_size(qkv.dtype());
  const auto* base = static_cast<const char*>(qkv.raw_data());
  AttentionOperands in{base, base + third, base + 2 * third};
  const std::pair<Tensor, Tensor> forward =
      attention_forward(qkv.backend(), qkv.dtype(), s, {qkv.size(1), qkv.size(2), t, d}, in);
  const Tensor y = forward.first, lse = forward.second;
  const Tensor saved_y = y.detach();
  return record(y, causal ? "attention_causal" : "attention", {qc}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g);
    Tensor dqkv = Tensor::empty(qkv.shape(), dy.dtype(), dy.backend());
    auto* out = static_cast<char*>(dqkv.raw_data());
    attention_backward(dy.backend(), dy, s, in, saved_y, lse, {out, out + third, out + 2 * third}, {dqkv});
    return std::vector<Tensor>{dqkv};
  });
}

}  // namespace trainlab
