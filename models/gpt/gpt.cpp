// The GPT model (models/gpt/gpt.h): nanoGPT's layout, written with the engine's ops.
#include "models/gpt/gpt.h"

#include <cmath>
#include <string>

#include "engine/core/autograd.h"

namespace trainlab {

namespace {

// A module that only names its children (nanoGPT's `transformer` ModuleDict and `h` ModuleList).
class GPTChildren : public Module {
 public:
  Tensor forward(const Tensor&) override { throw Error("gpt: a module container has no forward of its own"); }
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> module) {
    return register_module(name, module);
  }
};

// GPT-2's initialisation, as nanoGPT draws it: weights ~ N(0, std^2), biases 0.
void init_normal(Tensor& t, double std, const InitOptions& init) {
  NoGradGuard no_grad;
  t.copy_(mul_scalar(Tensor::normal(t.shape(), *init.generator, t.dtype(), t.backend()), std));
}

void init_linear(Linear& layer, double std, const InitOptions& init) {
  NoGradGuard no_grad;
  init_normal(layer.weight, std, init);
  layer.bias.zero_();
}

// The residual stream keeps its dtype: a branch that came back narrower (a linear under autocast) is
// widened before the add, as PyTorch's type promotion does.
Tensor residual_add(const Tensor& x, const Tensor& branch) {
  return add(x, branch.dtype() == x.dtype() ? branch : branch.to(x.dtype()));
}

}  // namespace

void check_gpt_config(const GPTConfig& c) {
  TL_CHECK(c.vocab >= 1, "gpt: the vocabulary must have at least 1 token, got " + std::to_string(c.vocab));
  TL_CHECK(c.block_size >= 1, "gpt: block_size must be >= 1, got " + std::to_string(c.block_size));
  TL_CHECK(c.n_layer >= 1 && c.n_head >= 1 && c.n_embd >= 1,
           "gpt: n_layer, n_head and n_embd must be >= 1, got " + std::to_string(c.n_layer) + ", " +
               std::to_string(c.n_head) + ", " + std::to_string(c.n_embd));
  TL_CHECK(c.n_embd % c.n_head == 0, "gpt: n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " +
                                         std::to_string(c.n_head) + " (each head gets n_embd / n_head channels)");
  TL_CHECK(c.dropout >= 0 && c.dropout < 1, "gpt: dropout must be in [0, 1), got " + std::to_string(c.dropout));
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c, const InitOptions& init)
    : n_head(c.n_head), n_embd(c.n_embd), dropout(c.dropout) {
  c_attn = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, init));
  init_linear(*c_attn, 0.02, init);
  init_linear(*c_proj, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)), init);  // GPT-2's scaled projections
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const std::int64_t b = x.size(0), t = x.size(1), d = n_embd / n_head;
  // This rank's heads (all of them unless split over a tensor-parallel group), and their width.
  const std::int64_t h = c_attn->weight.size(0) / (3 * d), c = h * d;
  // [B T, 3C] -> [3, B, H, T, D]: q, k and v, each [B, H, T, D] and dense.
  const Tensor qkv =
      c_attn->forward(x.view({b * t, n_embd})).view({b, t, 3, h, d}).permute({2, 0, 3, 1, 4}).contiguous();
  Tensor heads;
  if (fused_ && (dropout == 0 || !is_training())) {
    heads = scaled_dot_product_attention_packed(qkv, true);  // its gradient one [3, B, H, T, D] tensor
  } else {
    const Tensor q = qkv.narrow(0, 0, 1).view({b, h, t, d});
    const Tensor k = qkv.narrow(0, 1, 1).view({b, h, t, d});
    const Tensor v = qkv.narrow(0, 2, 1).view({b, h, t, d});
    Tensor att = softmax(matmul(q, k.transpose(2, 3)), 1.0 / std::sqrt(static_cast<double>(d)), true);
    heads = matmul(trainlab::dropout(att, dropout, is_training()), v);
  }
  const Tensor y = heads.permute({0, 2, 1, 3}).contiguous().view({b * t, c});
  return trainlab::dropout(c_proj->forward(y), dropout, is_training()).view({b, t, n_embd});
}

GPTMLP::GPTMLP(const GPTConfig& c, const InitOptions& init) : dropout(c.dropout) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, init));
  init_linear(*c_fc, 0.02, init);
  init_linear(*c_proj, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)), init);
}

Tensor GPTMLP::forward(const Tensor& x) {
  const std::int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  const Tensor y = c_proj->forward(gelu(c_fc->forward(x.view({b * t, c}))));
  return trainlab::dropout(y, dropout, is_training()).view({b, t, c});
}

GPTBlock::GPTBlock(const GPTConfig& c, const InitOptions& init) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, init));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c, init));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, init));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c, init));
}

Tensor GPTBlock::forward(const Tensor& x) {
  const Tensor y = residual_add(x, attn->forward(ln_1->forward(x)));
  return residual_add(y, mlp->forward(ln_2->forward(y)));
}

GPT::GPT(const GPTConfig& c, const InitOptions& init) : config_(c) {
  check_gpt_config(c);
  TL_CHECK(init.generator != nullptr, "gpt: InitOptions needs a generator");
  auto transformer = register_module("transformer", std::make_shared<GPTChildren>());
  wte = transformer->add("wte", std::make_shared<Embedding>(c.vocab, c.n_embd, init, 0.02));
  wpe = transformer->add("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, init, 0.02));
  auto h = transformer->add("h", std::make_shared<GPTChildren>());
  for (std::int64_t i = 0; i < c.n_layer; ++i)
    blocks.push_back(h->add(std::to_string(i), std::make_shared<GPTBlock>(c, init)));
  ln_f = transformer->add("ln_f", std::make_shared<LayerNorm>(c.n_embd, init));
}

Tensor GPT::forward(const Tensor& tokens) {
  Tensor x = embed(tokens);
  for (std::size_t i = 0; i < blocks.size(); ++i) x = block(i, x);
  return head(x);
}

Tensor GPT::embed(const Tensor& tokens) {
  TL_CHECK(tokens.dtype() == DType::i64 && tokens.dim() == 2,
           "gpt: the input must be token indices [batch, time] in i64, got " + shape_str(tokens.shape()) + " " +
               dtype_name(tokens.dtype()));
  const std::int64_t b = tokens.size(0), t = tokens.size(1);
  TL_CHECK(t >= 1 && t <= config_.block_size,
           "gpt: a window of " + std::to_string(t) + " tokens does not fit block_size " +
               std::to_string(config_.block_size) + " (allowed: 1.." + std::to_string(config_.block_size) + ")");
  // The positions [B, T] (0..T-1 in each row), so the position embedding's gradient sums over the batch.
  std::vector<std::int64_t> positions(static_cast<std::size_t>(b * t));
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i) % t;
  const Tensor pos = Tensor::from_vector(positions, {b, t}, tokens.backend());
  return trainlab::dropout(add(wte->forward(tokens), wpe->forward(pos)), config_.dropout, is_training());
}

Tensor GPT::block(std::size_t i, const Tensor& x) {
  GPTBlock& b = *blocks.at(i);
  // A recomputed block keeps only its input (engine/core/autograd.h, checkpoint); its dropout
  // draws again from where its first forward started.
  if (recompute_ == Recompute::none) return b.forward(x);
  return checkpoint(
      "recompute(block " + std::to_string(i) + ")", [&b](const Tensor& in) { return b.forward(in); }, x,
      b.parameters());
}

Tensor GPT::head(const Tensor& x) {
  const std::int64_t b = x.size(0), t = x.size(1);
  return linear(ln_f->forward(x).view({b * t, config_.n_embd}), wte->weight);  // the tied head, no bias
}

std::vector<ModelPart> GPT::parts() {
  std::vector<std::string> embeddings = parameter_names("transformer.wte."),
                           head_names = parameter_names("transformer.ln_f.");
  const std::vector<std::string> wpe_names = parameter_names("transformer.wpe.");
  embeddings.insert(embeddings.end(), wpe_names.begin(), wpe_names.end());
  head_names.push_back("transformer.wte.weight");  // tied: the first part's and the last's
  std::vector<ModelPart> out{{"embeddings", [this](const Tensor& tokens) { return embed(tokens); }, embeddings}};
  for (std::size_t i = 0; i < blocks.size(); ++i)
    out.push_back({"h." + std::to_string(i), [this, i](const Tensor& x) { return block(i, x); },
                   parameter_names("transformer.h." + std::to_string(i) + ".")});
  out.push_back({"head", [this](const Tensor& x) { return head(x); }, head_names});
  return out;
}

void GPT::split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  TL_CHECK(group != nullptr, "gpt: tensor parallelism needs a group");
  const int p = group->size();
  TL_CHECK(config_.n_head % p == 0, "gpt: n_head " + std::to_string(config_.n_head) + " does not divide over " +
                                        std::to_string(p) + " tensor-parallel ranks (each rank takes whole heads; " +
                                        "allowed: a rank count that divides " + std::to_string(config_.n_head) + ")");
  TL_CHECK(config_.dropout == 0, "gpt: tensor parallelism needs dropout 0, got " + std::to_string(config_.dropout) +
                                     " (the ranks would draw their heads' dropout masks alike)");
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = "transformer.h." + std::to_string(i) + ".";
    GPTBlock& blk = *blocks[i];
    blk.attn->c_attn->split(LinearSplit::columns, group, at + "attn.c_attn", 3);
    blk.attn->c_proj->split(LinearSplit::rows, group, at + "attn.c_proj");
    blk.mlp->c_fc->split(LinearSplit::columns, group, at + "mlp.c_fc");
    blk.mlp->c_proj->split(LinearSplit::rows, group, at + "mlp.c_proj");
  }
}

bool GPT::decays(const std::string& name) const {
  // The linear layers' weights only (c_attn, c_proj, c_fc): not the embeddings, norms or biases.
  const bool linear_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
                             (name.find(".c_attn.") != std::string::npos ||
                              name.find(".c_proj.") != std::string::npos || name.find(".c_fc.") != std::string::npos);
  return linear_weight;
}

// Per token: 2 x the multiply-adds of the linears (12 C^2 per layer, and the head's V C) and of
// attention (2 T C per layer at the window's full length, as nanoGPT's estimate counts it); a
// sample is a window of block_size tokens. Training adds the backward's two matrix products per forward one.
double GPT::flop_per_sample(bool forward_only) const {
  const auto c = static_cast<double>(config_.n_embd), t = static_cast<double>(config_.block_size);
  const double per_token = 2.0 * (static_cast<double>(config_.n_layer) * (12.0 * c * c + 2.0 * t * c) +
                                  static_cast<double>(config_.vocab) * c);
  return per_token * t * (forward_only ? 1.0 : 3.0);
}

namespace {

GPTConfig gpt_config_of(const ModelInput& input, const ModelOptions& options) {
  const ModelDef def = gpt_model();
  GPTConfig c;
  c.n_layer = model_option_int(def, options, "n_layer", 1, 96);
  c.n_head = model_option_int(def, options, "n_head", 1, 256);
  c.n_embd = model_option_int(def, options, "n_embd", 1, 16384);
  c.block_size = model_option_int(def, options, "block_size", 1, 65536);
  c.dropout = model_option_number(def, options, "dropout", 0, 0.9);
  c.vocab = input.classes;
  return c;
}

void check_gpt_input(const ModelInput& input, const GPTConfig& c) {
  TL_CHECK(input.sample.size() == 1,
           "GPT takes windows of token ids [T], not samples of shape " + shape_str(input.sample));
  TL_CHECK(input.sample[0] == c.block_size, "GPT with block_size " + std::to_string(c.block_size) +
                                                " takes windows of " + std::to_string(c.block_size) + " tokens, not " +
                                                std::to_string(input.sample[0]));
  TL_CHECK(input.classes >= 2 && input.classes <= (std::int64_t{1} << 24),
           "GPT needs a vocabulary of 2..16777216 tokens, not " + std::to_string(input.classes));
}

}  // namespace

ModelDef gpt_model() {
  ModelDef def;
  def.name = "gpt";
  def.title = "GPT";
  def.description =
      "a decoder-only transformer (nanoGPT's layout): token and position embeddings, n_layer pre-norm blocks of "
      "causal self-attention and a GELU MLP, a final layer norm, the head tied to the token embedding; trains on "
      "windows of block_size tokens";
  def.keys = {{"n_layer", "4", "1..96", "transformer blocks"},
              {"n_head", "4", "1..256", "attention heads (n_embd must divide by it)"},
              {"n_embd", "128", "1..16384", "the residual stream's width"},
              {"block_size", "64", "1..65536", "the context: the window of tokens each sample holds"},
              {"dropout", "0", "0..0.9",
               "dropout after the embeddings, on the attention probabilities and after "
               "each residual branch"}};
  def.default_input = ModelInput{{64}, 65};  // nanoGPT's shakespeare_char vocabulary size
  def.context = [](const ModelOptions& options) {
    return model_option_int(gpt_model(), options, "block_size", 1, 65536);
  };
  def.check = [](const ModelInput& input, const ModelOptions& options) {
    const GPTConfig c = gpt_config_of(input, options);
    check_gpt_config(c);
    check_gpt_input(input, c);
  };
  def.make = [](const InitOptions& init, const ModelInput& input, const ModelOptions& options) {
    return std::make_shared<GPT>(gpt_config_of(input, options), init);
  };
  // The vocabulary from the token embedding's rows, the context from the position embedding's.
  def.input_of = [](const NamedTensors& tensors, const ModelOptions&) -> std::optional<ModelInput> {
    const Tensor *wte = nullptr, *wpe = nullptr;
    for (const auto& [name, t] : tensors) {
      if (name == "transformer.wte.weight" && t.dim() == 2) wte = &t;
      if (name == "transformer.wpe.weight" && t.dim() == 2) wpe = &t;
    }
    if (wte == nullptr || wpe == nullptr) return std::nullopt;
    return ModelInput{{wpe->size(0)}, wte->size(0)};
  };
  def.torch_twin = "gpt";
  return def;
}

}  // namespace trainlab
