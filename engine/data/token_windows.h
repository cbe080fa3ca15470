// Token windows: what a language model trains on (SampleKind::tokens, engine/data/dataset.h). A
// split's token stream is cut into windows of `context` tokens; a window's targets are the same
// tokens shifted by one (the next token at every position), so a window reads context + 1 tokens,
// as nanoGPT's get_batch does. A training split shifts every epoch's windows by an offset drawn from
// (seed, epoch) in [0, context): each epoch sees other windows, and any worker draws the same ones;
// a held-out split keeps offset 0.
//
// SyntheticTokens (synthetic_tokens) is what token models train on without a data set on disk, as
// SyntheticImages is for image models; a text corpus on disk is engine/data/token_dataset.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/data/synthetic_images.h"
#include "engine/data/text_corpus.h"

namespace trainlab {

class TokenWindows final : public Dataset {
 public:
  // `tokens`: the split's stream, ids in [0, vocab) (checked). `name` names it in messages ("data
  // set DIR, train split"). `limit`: at most this many windows (0: all). Throws Error naming the
  // split, its length and the context when the stream makes no window (it needs 2 context tokens
  // with the shift, context + 1 without).
  TokenWindows(std::shared_ptr<const std::vector<std::int32_t>> tokens, std::int64_t vocab, std::int64_t context,
               std::string name, bool shift, std::uint64_t seed, std::int64_t limit = 0);
  std::int64_t size() const override { return windows_; }
  Shape sample_shape() const override { return {context_}; }
  std::int64_t num_classes() const override { return vocab_; }
  std::string describe() const override;
  SampleKind sample_kind() const override { return SampleKind::tokens; }
  void get_tokens(std::int64_t index, std::int64_t epoch, std::int64_t* tokens, std::int64_t* targets) const override;
  // Not a values data set: Error.
  std::int64_t get(std::int64_t index, float* out, double* work = nullptr) const override;

  // The first token window `index` reads in `epoch` (its offset plus index x context).
  std::int64_t window_start(std::int64_t index, std::int64_t epoch) const;
  std::int64_t stream_tokens() const { return static_cast<std::int64_t>(tokens_->size()); }
  std::int64_t context() const { return context_; }
  // The text vocabulary the ids decode with (a data set written from text: its symbols, no tokens);
  // null for streams that are not text (SyntheticTokens).
  void set_text(std::shared_ptr<const TextCorpus> codec) { text_ = std::move(codec); }
  const TextCorpus* text() const { return text_.get(); }

 private:
  std::shared_ptr<const std::vector<std::int32_t>> tokens_;
  std::int64_t vocab_, context_, windows_;
  std::string name_;
  bool shift_;
  std::uint64_t seed_;
  std::shared_ptr<const TextCorpus> text_;
};

// The token models' synthetic data: a stream from an order-1 Markov chain over `vocab` tokens, each
// token followed by one of 4 successors (drawn from the seed) with probabilities 0.55, 0.25, 0.15
// and 0.05: learnable (its entropy, about 1.1 nats, is the loss a perfect model reaches) and the
// same bytes for the same (seed, split). `windows` windows of `context` tokens.
std::shared_ptr<TokenWindows> synthetic_tokens(std::uint64_t seed, Split split, std::int64_t windows,
                                               std::int64_t context, std::int64_t vocab);
// The chain's entropy per token in nats (what the loss of a perfect model approaches).
double synthetic_tokens_entropy();

}  // namespace trainlab
