#include "engine/data/token_windows.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "engine/core/rng.h"

namespace trainlab {

TokenWindows::TokenWindows(std::shared_ptr<const std::vector<std::int32_t>> tokens, std::int64_t vocab,
                           std::int64_t context, std::string name, bool shift, std::uint64_t seed, std::int64_t limit)
    : tokens_(std::move(tokens)), vocab_(vocab), context_(context), name_(std::move(name)), shift_(shift), seed_(seed) {
  TL_CHECK(tokens_ != nullptr, "TokenWindows: no token stream");
  TL_CHECK(vocab_ >= 2, name_ + ": a vocabulary of " + std::to_string(vocab_) + " tokens (at least 2 are needed)");
  TL_CHECK(context_ >= 1, name_ + ": context " + std::to_string(context_) + " must be >= 1");
  TL_CHECK(limit >= 0, name_ + ": limit " + std::to_string(limit) + " must be >= 0");
  const auto n = static_cast<std::int64_t>(tokens_->size());
  // With the shift, the last window of an epoch at offset context - 1 must still have its targets.
  const std::int64_t needed = shift_ ? 2 * context_ : context_ + 1;
  TL_CHECK(n >= needed, name_ + " holds " + std::to_string(n) + " tokens: too few for one window of context " +
                            std::to_string(context_) + " (" + std::to_string(needed) +
                            " needed; choose a block_size of at most " + std::to_string(shift_ ? n / 2 : n - 1) + ")");
  windows_ = shift_ ? (n - context_) / context_ : (n - 1) / context_;
  if (limit > 0) windows_ = std::min(windows_, limit);
  for (std::size_t i = 0; i < tokens_->size(); ++i) {
    const std::int32_t t = (*tokens_)[i];
    TL_CHECK(t >= 0 && t < vocab_, name_ + ": token " + std::to_string(t) + " at " + std::to_string(i) +
                                       " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  }
}

std::string TokenWindows::describe() const {
  return name_ + " (" + std::to_string(windows_) + " windows of " + std::to_string(context_) + " tokens, vocabulary " +
         std::to_string(vocab_) + ")";
}

std::int64_t TokenWindows::window_start(std::int64_t index, std::int64_t epoch) const {
  TL_CHECK(index >= 0 && index < windows_,
           name_ + ": window " + std::to_string(index) + " is outside [0, " + std::to_string(windows_) + ")");
  const std::int64_t offset = shift_ ? static_cast<std::int64_t>(mix_seed(seed_, static_cast<std::uint64_t>(epoch)) %
                                                                 static_cast<std::uint64_t>(context_))
                                     : 0;
  return offset + index * context_;
}

void TokenWindows::get_tokens(std::int64_t index, std::int64_t epoch, std::int64_t* tokens,
                              std::int64_t* targets) const {
  const std::int32_t* from = tokens_->data() + window_start(index, epoch);
  for (std::int64_t t = 0; t < context_; ++t) {
    tokens[t] = from[t];
    targets[t] = from[t + 1];
  }
}

std::int64_t TokenWindows::get(std::int64_t, float*, double*) const {
  throw Error(describe() + " holds token windows: a model takes them through get_tokens, not as values");
}

namespace {

constexpr std::array<double, 4> kSuccessorOdds = {0.55, 0.25, 0.15, 0.05};

}  // namespace

double synthetic_tokens_entropy() {
  double h = 0;
  for (double p : kSuccessorOdds) h -= p * std::log(p);
  return h;
}

std::shared_ptr<TokenWindows> synthetic_tokens(std::uint64_t seed, Split split, std::int64_t windows,
                                               std::int64_t context, std::int64_t vocab) {
  TL_CHECK(vocab >= 4 && vocab <= (std::int64_t{1} << 24),
           "SyntheticTokens: vocabulary " + std::to_string(vocab) + " is outside 4..16777216");
  TL_CHECK(windows >= 1 && context >= 1 && windows * context <= (std::int64_t{1} << 31),
           "SyntheticTokens: " + std::to_string(windows) + " windows of " + std::to_string(context) +
               " tokens (each >= 1, at most 2^31 tokens in all)");
  // Each token's 4 distinct successors, from the seed alone: both splits follow the same chain.
  Generator table_gen(mix_seed(seed, 0x746f6b656e73ull));  // "tokens"
  std::vector<std::int32_t> successors(static_cast<std::size_t>(vocab * 4));
  for (std::int64_t v = 0; v < vocab; ++v) {
    std::int32_t* s = successors.data() + v * 4;
    for (int k = 0; k < 4; ++k) {
      std::int32_t next = 0;
      do {
        next = static_cast<std::int32_t>(table_gen.below(static_cast<std::uint64_t>(vocab)));
      } while (std::find(s, s + k, next) != s + k);
      s[k] = next;
    }
  }
  const bool train = split == Split::train;
  // With the shift, windows + 1 windows' worth, so that every epoch's offset leaves `windows` windows.
  const std::int64_t n = (windows + (train ? 1 : 0)) * context + 1;
  auto stream = std::make_shared<std::vector<std::int32_t>>(static_cast<std::size_t>(n));
  Generator gen(mix_seed(seed, train ? 1 : 2));
  std::int32_t current = static_cast<std::int32_t>(gen.below(static_cast<std::uint64_t>(vocab)));
  for (std::int64_t i = 0; i < n; ++i) {
    (*stream)[static_cast<std::size_t>(i)] = current;
    double u = gen.uniform();
    int k = 0;
    while (k < 3 && u >= kSuccessorOdds[static_cast<std::size_t>(k)])
      u -= kSuccessorOdds[static_cast<std::size_t>(k++)];
    current = successors[static_cast<std::size_t>(current * 4 + k)];
  }
  return std::make_shared<TokenWindows>(std::move(stream), vocab, context,
                                        std::string("SyntheticTokens(") + split_name(split) + ")", train,
                                        mix_seed(seed, 3), windows);
}

}  // namespace trainlab
