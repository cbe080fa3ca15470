// GPT's forward as the memory estimate's chain (engine/instrument/memory_model.h): seed 003's B x S x H
// activations op by op, in the order the forward records them. Per block, with n = B x T tokens, C
// the width and a the compute dtype's bytes (the residual stream and the layer norms stay in the
// parameters' dtype r: f32 under autocast):
//   saved   the block's input and ln_1's output (n C r each), q k v (3 n C a), the heads (n C a), the
//           MLP's 4C hidden twice (8 n C a: gelu's input and output), the attention's sum's input and
//           ln_2's output; composed attention also the softmax's [B, H, T, T] probabilities, which the
//           fused one never keeps (its log-sum-exp only, B H T f32): O(T) per block instead of O(T^2).
//   backward  the largest workspace is q, k and v's gradient: composed, each slice's is scattered into
//           a zero [3, B, H, T, D] gradient and summed with the others (engine/core/tensor.cpp, narrow),
//           10 n C a at once, on top of the residual's gradient and the tied head's; the fused
//           attention takes them packed and makes the [3, B, H, T, D] gradient itself (3 n C a).
// Under autocast every linear keeps its input cast to the compute dtype, so a layer norm's f32 output
// is a temporary held to the end of the residual branch, and the branch's output is widened to f32
// before the sum. Dropout is not described (a model with dropout > 0 is measured only).
#include "models/gpt/gpt.h"

namespace trainlab {

namespace {

struct GPTChain {
  double n, a, r, stat, master;  // tokens; bytes per activation, residual and statistic element; f32 copy
  bool low;                      // autocast: activations narrower than the residual stream
  std::vector<ChainOp> ops;
  int block = -1;

  ChainOp& add(ChainOp op) {
    op.block = block;
    ops.push_back(std::move(op));
    return ops.back();
  }
  std::size_t next() const { return ops.size(); }
  // A bias-free linear (the bias is its own op): under autocast it keeps its input's cast when that
  // input is the residual stream's layer norm (f32).
  ChainOp& linear(const std::string& name, double in, double out, bool from_norm) {
    ChainOp op{name, n * out * a, ChainLifetime::next_op, low && from_norm ? n * in * a : 0.0, n * in * a};
    op.dw_bytes = in * out * a;
    op.dw_master_bytes = in * out * master;
    return add(std::move(op));
  }
  ChainOp& bias(const std::string& name, double width, ChainLifetime lifetime) {
    ChainOp op{name, n * width * a, lifetime};
    op.passes_gradient = true;
    op.dw_bytes = width * a;
    op.dw_master_bytes = width * master;
    return add(std::move(op));
  }
  // A layer norm over the residual stream: mean and rstd saved; under autocast its output is cast
  // by the linear after it (that linear keeps the cast) and its input gradient comes back widened.
  ChainOp& layer_norm(const std::string& name, double width) {
    ChainOp op{name, n * width * r, low ? ChainLifetime::next_op : ChainLifetime::saved_next, 2 * n * stat,
               n * width * r};
    op.dw_bytes = 2 * width * stat;
    if (low) op.scratch_bytes = n * width * (r - a);
    return add(std::move(op));
  }
  // Under autocast a branch's output widened to the residual's dtype (freed by the sum), whose
  // gradient is narrowed again on the way back.
  void widen(const std::string& name, double width) {
    if (low) add({name, n * width * r, ChainLifetime::next_op, 0, n * width * a});
  }
  // The residual sum: its output saved by the next layer norm, its gradient handed both ways.
  void residual(const std::string& name, double width, std::size_t norm) {
    ChainOp& op = add({name, n * width * r, ChainLifetime::saved_next});
    op.passes_gradient = true;
    op.side = ChainSide::alias;
    ops[norm].side = ChainSide::join;
    // Under autocast the layer norm's f32 output lives until here (a temporary of the branch).
    if (low) ops[norm].outlives = static_cast<int>(ops.size() - 1 - norm);
  }
};

}  // namespace

std::vector<ChainOp> GPT::memory_chain(const ChainShape& shape, Backend& backend) const {
  (void)backend;
  TL_CHECK(shape.batch > 0, "GPT memory chain: batch must be > 0, got " + std::to_string(shape.batch));
  if (config_.dropout > 0) return {};
  const auto t = static_cast<double>(config_.block_size), c = static_cast<double>(config_.n_embd);
  const auto heads = static_cast<double>(config_.n_head), vocab = static_cast<double>(config_.vocab);
  const double r = static_cast<double>(dtype_size(wte->weight.dtype())),
               a = static_cast<double>(dtype_size(shape.dtype));
  const bool low = a < r;
  const double stat = r > 4 ? r : 4;  // layer norm's statistics: f32, f64 for an f64 model
  GPTChain g{static_cast<double>(shape.batch) * t, low ? a : r, r, stat, low ? 4.0 : 0.0, low, {}};
  const double e = g.n * c * g.a, scores = static_cast<double>(shape.batch) * heads * t * t * g.a;
  // The embeddings: the positions (i64, kept by wpe's backward), both lookups summed. The token
  // embedding's gradient is dense and summed with the head's, which waits for it.
  g.add({"positions", g.n * 8, ChainLifetime::saved_self});
  ChainOp& wte_op = g.add({"wte", g.n * c * r, ChainLifetime::next_op});
  wte_op.outlives = 2;
  wte_op.dw_bytes = vocab * c * r;
  wte_op.scratch_bytes = vocab * c * r;
  ChainOp& wpe_op = g.add({"wpe", g.n * c * r, ChainLifetime::next_op});
  wpe_op.passes_gradient = true;
  wpe_op.dw_bytes = t * c * r;
  g.add({"embeddings", g.n * c * r, ChainLifetime::saved_next}).passes_gradient = true;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    g.block = recompute_ != Recompute::none ? static_cast<int>(i) : -1;
    const std::string at = "h." + std::to_string(i) + ".";
    // Attention: qkv made dense as [3, B, H, T, D]; composed, its three slices' gradients scattered and summed.
    const std::size_t ln_1 = g.next();
    g.layer_norm(at + "ln_1", c);
    g.linear(at + "attn.c_attn", c, 3 * c, true);
    g.bias(at + "attn.c_attn.bias", 3 * c, ChainLifetime::next_op).scratch_bytes = 3 * e;  // its gradient made dense
    ChainOp& qkv = g.add({at + "attn.qkv", 3 * e, ChainLifetime::saved_next, 0, 3 * e});
    if (blocks[i]->attn->fused()) {
      // One call on q, k and v packed: the heads saved, and each row's log-sum-exp; the scores never
      // in memory; its gradient one [3, B, H, T, D] tensor.
      ChainOp& att = g.add({at + "attn.attention", e, ChainLifetime::saved_self,
                            static_cast<double>(shape.batch) * heads * t * stat, 3 * e});
      att.scratch_bytes = e;  // the heads' gradient made dense
    } else {
      qkv.scratch_bytes = 4 * e;  // the slices' gradients scattered and summed
      // q k^T, its softmax (kept), times v: dv waits through the softmax's and the first product's backward.
      ChainOp& qk = g.add({at + "attn.scores", scores, ChainLifetime::next_op, 0, 2 * e});
      qk.carry_bytes = e;
      g.add({at + "attn.softmax", scores, ChainLifetime::saved_self, 0, scores}).carry_bytes = e;
      ChainOp& av = g.add({at + "attn.probs_v", e, ChainLifetime::next_op, 0, scores + e});
      av.scratch_bytes = e;
      av.outlives = 3;  // the heads joined, c_proj and its bias
    }
    g.add({at + "attn.heads", e, ChainLifetime::saved_next}).passes_gradient = true;  // [B, T, C] dense
    g.linear(at + "attn.c_proj", c, c, false);
    g.bias(at + "attn.c_proj.bias", c, ChainLifetime::next_op).outlives = low ? 2 : 1;
    g.widen(at + "attn.widen", c);
    g.residual(at + "attn.residual", c, ln_1);
    // The MLP: c_fc's output kept by GELU, GELU's by c_proj.
    const std::size_t ln_2 = g.next();
    g.layer_norm(at + "ln_2", c);
    g.linear(at + "mlp.c_fc", c, 4 * c, true);
    g.bias(at + "mlp.c_fc.bias", 4 * c, ChainLifetime::saved_next);
    g.add({at + "mlp.gelu", 4 * e, ChainLifetime::saved_next, 0, 4 * e});
    g.linear(at + "mlp.c_proj", 4 * c, c, false);
    g.bias(at + "mlp.c_proj.bias", c, ChainLifetime::next_op).outlives = low ? 2 : 1;
    g.widen(at + "mlp.widen", c);
    g.residual(at + "mlp.residual", c, ln_2);
  }
  g.block = -1;
  // The final norm and the tied head: its weight gradient waits for the token embedding's.
  g.layer_norm("ln_f", c).outlives = 1;
  ChainOp& head = g.linear("lm_head", c, vocab, true);
  head.holds_weight_gradient = true;
  head.outlives = low ? 2 : 1;
  if (low) g.add({"logits.widen", g.n * vocab * 4, ChainLifetime::next_op, 0, g.n * vocab * g.a});
  // The loss in f32: the probabilities kept, the loss itself.
  g.add({"cross_entropy", 4, ChainLifetime::saved_self, g.n * vocab * 4, g.n * vocab * 4});
  return g.ops;
}

}  // namespace trainlab
