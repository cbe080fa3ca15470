// A small decoder-only GPT (Radford et al. 2019; nanoGPT's and llm.c's layout): token and position
// embeddings, n_layer pre-norm blocks of causal self-attention and a GELU MLP, a final layer norm
// and a head tied to the token embedding. nanoGPT's CPU configuration is the default: 4 layers, 4
// heads, 128 wide, context 64. Parameters are named as nanoGPT's state_dict names them
// (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...; the tied lm_head is
// transformer.wte.weight itself).
//
// The forward takes token indices [B, T] (i64, T <= block_size) and gives the logits of the next
// token at every position, [B * T, vocab]: the loss is cross_entropy against the targets [B * T].
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/nn/model_registry.h"
#include "engine/nn/module.h"

namespace trainlab {

struct GPTConfig {
  std::int64_t vocab = 0;  // required
  std::int64_t block_size = 64;
  std::int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0;
};
// Throws Error naming the value and what is allowed (n_embd not divisible by n_head, ...).
void check_gpt_config(const GPTConfig& config);

// Causal self-attention: q, k, v from one linear (c_attn), heads split, softmax(q k^T / sqrt(head_dim))
// with the causal mask, times v, heads joined, c_proj. x [B, T, C]. Composed (matmul, a causal
// softmax, matmul: the [T, T] scores in memory) by default; fused (--fuse) one
// scaled_dot_product_attention call that never keeps them, except where dropout on the attention
// probabilities is on in training (the fused kernels have none): composed there.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& config, const InitOptions& init);
  Tensor forward(const Tensor& x) override;
  void set_fused(bool fused) override {
    fused_ = fused;
    Module::set_fused(fused);
  }
  bool fused() const { return fused_; }
  std::shared_ptr<Linear> c_attn, c_proj;
  std::int64_t n_head, n_embd;
  double dropout;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override {
    ops.insert(
        {BackendOp::matmul, BackendOp::softmax, BackendOp::attention, BackendOp::elementwise, BackendOp::dropout});
  }

 private:
  bool fused_ = false;
};

// The MLP: c_fc (C -> 4C), GELU, c_proj (4C -> C), dropout. x [B, T, C].
class GPTMLP : public Module {
 public:
  GPTMLP(const GPTConfig& config, const InitOptions& init);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> c_fc, c_proj;
  double dropout;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert({BackendOp::gelu, BackendOp::dropout}); }
};

// x + attn(ln_1(x)), then + mlp(ln_2(x)): the residual stream stays in its own dtype (f32 under
// autocast, as PyTorch's promotion keeps it).
class GPTBlock : public Module {
 public:
  GPTBlock(const GPTConfig& config, const InitOptions& init);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GPTMLP> mlp;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override { ops.insert(BackendOp::elementwise); }
};

class GPT : public Module {
 public:
  GPT(const GPTConfig& config, const InitOptions& init);
  // tokens [B, T] i64 -> logits [B * T, vocab].
  Tensor forward(const Tensor& tokens) override;
  // Token indices have no memory layout to choose: the batch as it is.
  Tensor forward_in(const Tensor& tokens, MemoryFormat) override { return forward(tokens); }
  // Activation recomputation per transformer block (convs and all alike: every block keeps only its
  // input and runs again in backward; the embeddings and the head are not worth it).
  void set_recompute(Recompute mode) override { recompute_ = mode; }
  Recompute recompute() const override { return recompute_; }
  // No weight decay on biases, layer norms and embeddings (nanoGPT decays the 2-D weights only;
  // the tied head is the token embedding, and is not decayed here, as llm.c does not).
  bool decays(const std::string& name) const override;
  double flop_per_sample(bool forward_only) const override;
  // The forward as the memory estimate sees it (models/gpt/gpt_memory.cpp): empty with dropout > 0.
  std::vector<ChainOp> memory_chain(const ChainShape& shape, Backend& backend) const override;
  // embeddings (tokens -> [B, T, C]), h.0 .. h.{n_layer-1}, head (ln_f and the tied head, whose
  // weight is the embeddings' too): the forward, for pipeline stages (Module::parts).
  std::vector<ModelPart> parts() override;
  // Megatron's split (engine/nn/tensor_parallel.h): in every block, attention by heads (c_attn by
  // columns, each rank its heads' q, k and v; c_proj by rows) and the MLP (c_fc by columns, c_proj by
  // rows); the embeddings, norms and head replicated. n_head must divide over the ranks; dropout must
  // be 0 (the ranks would draw their heads' masks alike).
  void split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;
  const GPTConfig& config() const { return config_; }
  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<GPTBlock>> blocks;
  std::shared_ptr<LayerNorm> ln_f;

 protected:
  void declare_ops(std::set<BackendOp>& ops) const override {
    ops.insert({BackendOp::linear, BackendOp::elementwise, BackendOp::dropout});
  }

 private:
  // The forward's three pieces, shared with parts(): the embeddings summed (and dropout), block i
  // (recomputed when set), ln_f and the tied head.
  Tensor embed(const Tensor& tokens);
  Tensor block(std::size_t i, const Tensor& x);
  Tensor head(const Tensor& x);
  GPTConfig config_;
  Recompute recompute_ = Recompute::none;
};

// `--model gpt`: keys n_layer, n_head, n_embd, block_size, dropout; the data are windows of block_size
// tokens (ModelDef::context), the classes its vocabulary.
ModelDef gpt_model();

}  // namespace trainlab
