#include "engine/train/task.h"

#include "engine/data/disk_dataset.h"
#include "engine/data/synthetic_images.h"

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

}  // namespace

TrainTask model_task(const TrainConfig& config) {
  TrainTask task;
  task.model_name = find_model(config.model.name).title;
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
