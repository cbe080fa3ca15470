// Sampling from a token model (a ModelDef with a context: its forward takes ids [B, T] and gives the
// next token's logits at every position, [B * T, vocabulary]), as nanoGPT's generate does: the
// context cropped to the model's last `context` tokens, the last position's logits divided by the
// temperature, cut to the top k, and a token drawn from their softmax with a seeded generator (the
// same text for the same seed and weights). Used by `trainlab generate` and at the end of a
// training run on text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/text_corpus.h"
#include "engine/nn/module.h"

namespace trainlab {

struct GenerateOptions {
  std::int64_t tokens = 200;  // new tokens after the prompt
  double temperature = 1.0;   // > 0; below 1 sharper, above 1 flatter
  std::int64_t top_k = 0;     // sample among the k most likely only (0: all)
  std::uint64_t seed = 0;
  std::int64_t context = 0;  // the model's block size: the window it sees
};

// The prompt followed by options.tokens sampled ids. The model is put in eval mode and back in the
// mode it was in; nothing is recorded for autograd. Throws Error for an empty prompt, an id outside
// the vocabulary or options out of range, naming them.
std::vector<std::int32_t> generate_tokens(Module& model, const std::vector<std::int32_t>& prompt,
                                          std::int64_t vocabulary, const GenerateOptions& options);

// The vocabulary a token data set's text was written with, kept with a checkpoint so that `trainlab
// generate` encodes prompts and decodes samples without the data set: "chars" or "bytes", and the
// symbols (code points or bytes) as decimal numbers separated by commas.
struct TextVocabularyRecord {
  std::string kind, symbols;
};
TextVocabularyRecord record_vocabulary(const TextCorpus& codec);
// Throws Error naming what is malformed.
TextCorpus vocabulary_from_record(const TextVocabularyRecord& record);

// `trainlab generate`: the token model a checkpoint holds, rebuilt from its config and weights on
// `backend`, continuing `prompt`: text in the vocabulary the checkpoint keeps, or where it keeps
// none (trained on SyntheticTokens) token ids separated by commas. Throws Error for a checkpoint
// of an image model, a prompt with a character outside the vocabulary (named, with its position),
// or what load_checkpoint refuses.
struct CheckpointSample {
  std::string model;  // "GPT (n_layer=4, ...)", from the checkpoint
  std::int64_t vocabulary = 0, context = 0, step = 0;
  std::vector<std::int32_t> ids;  // the prompt's, then the sampled ones
  std::size_t prompt_tokens = 0;
  std::string text;  // the whole sequence decoded, or its ids separated by spaces
  bool has_text = false;
};
CheckpointSample sample_checkpoint(const std::string& dir, const std::string& prompt, const GenerateOptions& options,
                                   Backend& backend);

}  // namespace trainlab
