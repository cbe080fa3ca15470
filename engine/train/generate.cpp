#include "engine/train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "engine/core/autograd.h"
#include "engine/core/rng.h"
#include "engine/io/text.h"
#include "engine/nn/model_registry.h"
#include "engine/train/checkpoint.h"
#include "engine/train/resume.h"

namespace trainlab {

namespace {

// The next token from the last row of `logits` ([T, V] in f64 on the host): temperature, top k, a
// softmax and one uniform draw.
std::int32_t sample_next(const double* row, std::int64_t vocabulary, const GenerateOptions& o, Generator& gen) {
  std::vector<double> p(row, row + vocabulary);
  for (double& v : p) v /= o.temperature;
  if (o.top_k > 0 && o.top_k < vocabulary) {
    std::vector<double> sorted = p;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<std::size_t>(o.top_k - 1)];
    for (double& v : p)
      if (v < kth) v = -INFINITY;
  }
  const double top = *std::max_element(p.begin(), p.end());
  double total = 0;
  for (double& v : p) total += (v = std::exp(v - top));
  double u = gen.uniform() * total;
  for (std::int64_t i = 0; i < vocabulary; ++i) {
    u -= p[static_cast<std::size_t>(i)];
    if (u < 0) return static_cast<std::int32_t>(i);
  }
  // Rounding left u at or above 0: the last token with any mass.
  for (std::int64_t i = vocabulary - 1; i >= 0; --i)
    if (p[static_cast<std::size_t>(i)] > 0) return static_cast<std::int32_t>(i);
  return 0;
}

}  // namespace

std::vector<std::int32_t> generate_tokens(Module& model, const std::vector<std::int32_t>& prompt,
                                          std::int64_t vocabulary, const GenerateOptions& o) {
  TL_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  TL_CHECK(o.tokens >= 0 && o.tokens <= 1000000,
           "generate: --tokens " + std::to_string(o.tokens) + " is outside 0..1000000");
  TL_CHECK(std::isfinite(o.temperature) && o.temperature > 0 && o.temperature <= 100,
           "generate: --temperature " + std::to_string(o.temperature) + " is outside (0, 100]");
  TL_CHECK(o.top_k >= 0, "generate: --top-k " + std::to_string(o.top_k) + " must be >= 0 (0: every token)");
  TL_CHECK(o.context >= 1, "generate: the model's context " + std::to_string(o.context) + " must be >= 1");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    TL_CHECK(prompt[i] >= 0 && prompt[i] < vocabulary, "generate: prompt token " + std::to_string(prompt[i]) + " at " +
                                                           std::to_string(i) + " is outside [0, " +
                                                           std::to_string(vocabulary) + ")");
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  Backend& backend = model.parameters().front().backend();
  Generator gen(o.seed);
  std::vector<std::int32_t> out = prompt;
  for (std::int64_t n = 0; n < o.tokens; ++n) {
    const auto length = std::min<std::int64_t>(static_cast<std::int64_t>(out.size()), o.context);
    std::vector<std::int64_t> window(out.end() - length, out.end());
    const Tensor logits = model.forward(Tensor::from_vector(window, {1, length}, backend));
    TL_CHECK(logits.dim() == 2 && logits.size(0) == length && logits.size(1) == vocabulary,
             "generate: the model's output " + shape_str(logits.shape()) + " is not [" + std::to_string(length) + ", " +
                 std::to_string(vocabulary) + "]");
    const std::vector<double> last = logits.narrow(0, length - 1, 1).to(DType::f64).to_vector<double>();
    out.push_back(sample_next(last.data(), vocabulary, o, gen));
  }
  model.train(was_training);
  return out;
}

TextVocabularyRecord record_vocabulary(const TextCorpus& codec) {
  TextVocabularyRecord r;
  r.kind = text_vocabulary_name(codec.vocabulary);
  for (std::uint32_t s : codec.symbols) {
    if (!r.symbols.empty()) r.symbols += ',';
    r.symbols += std::to_string(s);
  }
  return r;
}

TextCorpus vocabulary_from_record(const TextVocabularyRecord& record) {
  TextCorpus codec;
  codec.vocabulary = parse_text_vocabulary(record.kind);
  std::size_t begin = 0;
  const std::uint32_t limit = codec.vocabulary == TextVocabulary::bytes ? 0xFF : 0x10FFFF;
  while (begin < record.symbols.size()) {
    const std::size_t end = std::min(record.symbols.find(',', begin), record.symbols.size());
    const std::string item = record.symbols.substr(begin, end - begin);
    TL_CHECK(!item.empty() && item.size() <= 7 && item.find_first_not_of("0123456789") == std::string::npos,
             "vocabulary record: symbol '" + item + "' is not a decimal number");
    const auto symbol = static_cast<std::uint32_t>(std::stoul(item));
    TL_CHECK(symbol <= limit && (codec.symbols.empty() || codec.symbols.back() < symbol),
             "vocabulary record: symbol " + item + " is out of range or out of order");
    codec.symbols.push_back(symbol);
    begin = end + 1;
  }
  TL_CHECK(!codec.symbols.empty(), "vocabulary record: no symbols");
  return codec;
}

namespace {

std::vector<std::int32_t> parse_prompt_ids(const std::string& prompt, const std::string& owner) {
  std::vector<std::int32_t> ids;
  std::size_t begin = 0;
  while (begin <= prompt.size()) {
    const std::size_t end = std::min(prompt.find(',', begin), prompt.size());
    const std::string item = prompt.substr(begin, end - begin);
    TL_CHECK(!item.empty() && item.size() <= 9 && item.find_first_not_of("0123456789") == std::string::npos,
             owner +
                 " keeps no text vocabulary (its model was trained on SyntheticTokens): give the prompt as "
                 "token ids separated by commas, e.g. --prompt 1,2,3 (got " +
                 quote_value(prompt) + ")");
    ids.push_back(static_cast<std::int32_t>(std::stol(item)));
    begin = end + 1;
  }
  return ids;
}

}  // namespace

CheckpointSample sample_checkpoint(const std::string& dir, const std::string& prompt, const GenerateOptions& options,
                                   Backend& backend) {
  const std::string owner = "checkpoint '" + dir + "'";
  const Checkpoint checkpoint = load_checkpoint(dir, backend);
  const TrainConfig config = checkpoint_config(checkpoint, owner);
  const auto& strings = checkpoint.trainer.strings;
  const ModelDef& def = find_model(strings.count("model") ? strings.at("model") : config.model.name);
  TL_CHECK(def.context != nullptr, owner + " holds model '" + def.name +
                                       "', which takes images: generate samples from a token model (--model gpt)");
  const ModelInput input = (def.input_of ? def.input_of(checkpoint.model, config.model.options) : std::nullopt)
                               .value_or(default_input_for(def, config.model.options));
  Generator unused(0);  // the weights are loaded, not drawn
  std::shared_ptr<Module> model =
      build_model(def, InitOptions{&unused, DType::f32, &backend}, input, config.model.options);
  model->load_state_dict(checkpoint.model);
  model->set_fused(config.execution.fuse);
  CheckpointSample sample;
  sample.model =
      def.title + (config.model.options.empty() ? "" : " (" + model_options_text(config.model.options) + ")");
  sample.vocabulary = input.classes;
  sample.context = def.context(config.model.options);
  sample.step = checkpoint.trainer.integers.count("step") ? checkpoint.trainer.integers.at("step") : 0;
  std::optional<TextCorpus> codec;
  if (strings.count("vocabulary.kind") && strings.count("vocabulary.symbols")) {
    try {
      codec = vocabulary_from_record({strings.at("vocabulary.kind"), strings.at("vocabulary.symbols")});
    } catch (const Error& e) {
      throw Error(owner + ": " + e.what());
    }
    TL_CHECK(static_cast<std::int64_t>(codec->symbols.size()) == sample.vocabulary,
             owner + ": its vocabulary has " + std::to_string(codec->symbols.size()) + " symbols, its model " +
                 std::to_string(sample.vocabulary) + " tokens");
  }
  std::vector<std::int32_t> prompt_ids;
  try {
    prompt_ids = codec ? codec->encode(prompt) : parse_prompt_ids(prompt, owner);
  } catch (const Error& e) {
    throw Error(codec ? owner + ": the prompt's " + std::string(e.what()).substr(6) : e.what());  // "text: ..."
  }
  GenerateOptions o = options;
  o.context = sample.context;
  sample.ids = generate_tokens(*model, prompt_ids, sample.vocabulary, o);
  sample.prompt_tokens = prompt_ids.size();
  sample.has_text = codec.has_value();
  for (std::int32_t id : sample.ids)
    sample.text += codec ? codec->text_of(id) : (sample.text.empty() ? "" : " ") + std::to_string(id);
  return sample;
}

}  // namespace trainlab
