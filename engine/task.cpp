#include "engine/task.h"

#include "engine/disk_dataset.h"
#include "engine/smallcnn.h"
#include "engine/synthetic_images.h"

namespace trainlab {

namespace {

ModelFactory smallcnn_factory(bool fused, const SmallCNNShape& shape) {
  return [fused, shape](const InitOptions& init) {
    auto model = std::make_shared<SmallCNN>(init, shape);
    model->set_fused(fused);
    return model;
  };
}

}  // namespace

TrainTask smallcnn_task(const TrainConfig& config) {
  TrainTask task;
  task.model_name = "SmallCNN";
  const bool fused = config.execution.fuse;
  if (config.data.dir.empty()) {
    task.make_model = smallcnn_factory(fused, SmallCNNShape{});
    task.train_data = std::make_shared<SyntheticImages>(config.seed, Split::train, config.data.train_samples,
                                                        config.data.decode_cost);
    task.held_out_data = std::make_shared<SyntheticImages>(config.seed, Split::held_out, config.data.eval_samples, 0);
    return task;
  }
  // A data set on disk, at its own sample size (a SyntheticImages data set stored larger is
  // box-filtered back to its 32x32), and SmallCNN built for its shape and classes.
  DiskReadOptions options;
  options.augment = config.data.augment;
  options.seed = config.seed;
  options.limit = config.data.train_samples;
  auto train = open_image_dataset(config.data.dir, Split::train, options);
  const Shape sample = train->sample_shape();
  SmallCNNShape shape{sample[0], sample[1], sample[2], train->num_classes()};
  try {
    shape.check();
  } catch (const Error& e) {
    throw Error(train->describe() + ": " + e.what());
  }
  task.make_model = smallcnn_factory(fused, shape);
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
