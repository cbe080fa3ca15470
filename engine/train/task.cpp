#include "engine/train/task.h"

#include "engine/data/disk_dataset.h"
#include "engine/data/synthetic_images.h"
#include "engine/data/token_dataset.h"
#include "engine/data/token_windows.h"

namespace trainlab {

namespace {

ModelFactory registered_factory(const TrainConfig& config, const ModelInput& input) {
  const ModelDef& def = find_model(config.model.name);
  const ModelOptions options = config.model.options;
  const bool fused = config.execution.fuse;
  return [&def, options, input, fused](const InitOptions& init) {
    std::shared_ptr<Module> model = build_model(def, init, input, options);
    model->set_fused(fused);
    return model;
  };
}

// Refuses, before any work, a model that cannot take the data's shape (named by `data`).
void check_model_input(const TrainConfig& config, const ModelInput& input, const std::string& data) {
  const ModelDef& def = find_model(config.model.name);
  check_model_keys(def, config.model.options);
  try {
    def.check(input, config.model.options);
  } catch (const Error& e) {
    throw Error(data + ": model '" + def.name + "' for " + input.str() + ": " + e.what());
  }
}

// A token model (ModelDef::context) on SyntheticTokens, or on a token data set on disk (make-dataset
// --from text:), cut into windows of the model's context.
TrainTask token_task(const TrainConfig& config, const ModelDef& def) {
  check_model_keys(def, config.model.options);
  const std::int64_t context = def.context(config.model.options);
  TL_CHECK(config.data.decode_cost == 0,
           "decode_cost " + std::to_string(config.data.decode_cost) +
               " is SyntheticImages' stand-in for decoding an image; model '" + def.name +
               "' trains on windows of token ids, which are not decoded: drop decode_cost");
  TrainTask task;
  task.model_name = def.title;
  if (config.data.dir.empty()) {
    const ModelInput input{{context}, def.default_input.classes};
    check_model_input(config, input, "SyntheticTokens");
    task.make_model = registered_factory(config, input);
    task.train_data = synthetic_tokens(config.seed, Split::train, config.data.train_samples, context, input.classes);
    task.held_out_data =
        synthetic_tokens(config.seed, Split::held_out, config.data.eval_samples, context, input.classes);
    return task;
  }
  TL_CHECK(is_token_dataset(config.data.dir),
           "model '" + def.name + "' trains on token windows; data set " + config.data.dir +
               " is not a token data set (write one with trainlab make-dataset --from text:FILE|DIR)");
  TL_CHECK(config.data.augment == Augment::none, "--augment " + std::string(augment_name(config.data.augment)) +
                                                     " is for images; model '" + def.name + "' takes token windows");
  const TokenDatasetInfo info = read_token_dataset_info(config.data.dir);
  auto train = open_token_dataset(config.data.dir, Split::train, context, config.seed, config.data.train_samples);
  const ModelInput input{train->sample_shape(), info.vocab()};
  check_model_input(config, input, train->describe());
  task.make_model = registered_factory(config, input);
  task.train_data = train;
  if (info.split_tokens.count("held_out") == 1)
    task.held_out_data =
        open_token_dataset(config.data.dir, Split::held_out, context, config.seed, config.data.eval_samples);
  return task;
}

}  // namespace

TrainTask model_task(const TrainConfig& config) {
  const ModelDef& def = find_model(config.model.name);
  if (def.context) return token_task(config, def);
  TrainTask task;
  task.model_name = def.title;
  if (config.data.dir.empty()) {
    const ModelInput input{{SyntheticImages::kChannels, SyntheticImages::kHeight, SyntheticImages::kWidth},
                           SyntheticImages::kClasses};
    check_model_input(config, input, "SyntheticImages");
    task.make_model = registered_factory(config, input);
    task.train_data = std::make_shared<SyntheticImages>(config.seed, Split::train, config.data.train_samples,
                                                        config.data.decode_cost);
    task.held_out_data = std::make_shared<SyntheticImages>(config.seed, Split::held_out, config.data.eval_samples, 0);
    return task;
  }
  // A data set on disk, at its own sample size (a SyntheticImages data set stored larger is
  // box-filtered back to its 32x32), and the model built for its shape and classes.
  DiskReadOptions options;
  options.augment = config.data.augment;
  options.seed = config.seed;
  options.limit = config.data.train_samples;
  TL_CHECK(!is_token_dataset(config.data.dir), "data set " + config.data.dir + " holds token windows; model '" +
                                                   def.name + "' takes images (a token model: --model gpt)");
  auto train = open_image_dataset(config.data.dir, Split::train, options);
  const ModelInput input{train->sample_shape(), train->num_classes()};
  check_model_input(config, input, train->describe());
  task.make_model = registered_factory(config, input);
  std::vector<std::string> files = train->split_files();
  if (has_split(config.data.dir, Split::held_out)) {
    DiskReadOptions held_out = options;
    held_out.augment = Augment::none;
    held_out.limit = config.data.eval_samples;
    auto eval = open_image_dataset(config.data.dir, Split::held_out, held_out);
    files.insert(files.end(), eval->split_files().begin(), eval->split_files().end());
    task.held_out_data = eval;
  }
  task.train_data = train;
  // Cold cache: the first epoch's reads come from storage, as on a machine that has not read the
  // data set since it was written.
  if (config.data.cold_cache) drop_page_cache(files);
  return task;
}

}  // namespace trainlab
