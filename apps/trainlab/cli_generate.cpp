#include "apps/trainlab/cli_generate.h"

#include <cstdio>
#include <limits>

#include "apps/cli_parse.h"
#include "backends/registry.h"
#include "engine/io/text.h"
#include "engine/train/config.h"

namespace trainlab {

GenerateCommand add_generate(CLI::App& app) {
  GenerateCommand c;
  c.command = app.add_subcommand("generate",
                                 "continue a prompt with a token model's checkpoint (--model gpt trained on "
                                 "text): the context cropped to its block size, temperature, top-k, seeded");
  c.command->add_option("--checkpoint", c.checkpoint, "the checkpoint directory (trainlab train --save)")
      ->required()
      ->check(NonEmptyPath());
  c.command->add_option("--prompt", c.prompt,
                        "the text to continue, in the checkpoint's vocabulary (default: a newline); for a model "
                        "trained on SyntheticTokens, token ids separated by commas");
  c.command->add_option("--tokens", c.options.tokens, "tokens to sample [0..1000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{0}, std::int64_t{1000000}));
  c.command->add_option("--temperature", c.options.temperature, "divides the logits (0..100]")
      ->capture_default_str()
      ->check(FiniteRange(1e-6, 100.0));
  c.command->add_option("--top-k", c.options.top_k, "sample among the k most likely tokens only (0: all)")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{0}, std::int64_t{16777216}));
  c.command->add_option("--seed", c.options.seed, "the sampler's seed (the same seed and weights: the same text)")
      ->capture_default_str()
      ->check(StrictUnsigned(std::numeric_limits<std::uint64_t>::max()));
  c.command->add_option("--backend", c.backend, "backend (default: the best CPU backend)");
  return c;
}

int run_generate(const GenerateCommand& c) {
  check_backend_name(c.backend);
  Backend& backend = get_backend(c.backend.empty() ? default_backend_name() : c.backend);
  const CheckpointSample s = sample_checkpoint(c.checkpoint, c.prompt, c.options, backend);
  std::fprintf(stderr,
               "generate: %s at step %lld, vocabulary %lld, context %lld; %zu prompt tokens, %lld sampled (seed %llu, "
               "temperature %g, top-k %lld)\n",
               s.model.c_str(), static_cast<long long>(s.step), static_cast<long long>(s.vocabulary),
               static_cast<long long>(s.context), s.prompt_tokens, static_cast<long long>(c.options.tokens),
               static_cast<unsigned long long>(c.options.seed), c.options.temperature,
               static_cast<long long>(c.options.top_k));
  std::printf("%s\n", escape_invalid_utf8(s.text).c_str());
  return 0;
}

}  // namespace trainlab
