#include "engine/task.h"

#include "engine/disk_dataset.h"
#include "engine/smallcnn.h"
#include "engine/synthetic_images.h"

namespace trainlab {

TrainTask smallcnn_task(const TrainConfig& config) {
  TrainTask task;
  task.model_name = "SmallCNN";
  const bool fused = config.execution.fuse;
  task.make_model = [fused](const InitOptions& init) {
    auto model = std::make_shared<SmallCNN>(init);
    model->set_fused(fused);
    return model;
  };
  if (config.data.dir.empty()) {
    task.train_data = std::make_shared<SyntheticImages>(config.seed, Split::train, config.data.train_samples,
                                                        config.data.decode_cost);
    task.held_out_data = std::make_shared<SyntheticImages>(config.seed, Split::held_out, config.data.eval_samples, 0);
    return task;
  }
  // A data set on disk, decoded to SmallCNN's 3x32x32 (box-filtered down from a larger stored size).
  DiskReadOptions options;
  options.output_size = static_cast<int>(SyntheticImages::kHeight);
  options.augment = config.data.augment;
  options.seed = config.seed;
  options.limit = config.data.train_samples;
  auto train = open_image_dataset(config.data.dir, Split::train, options);
  TL_CHECK(train->sample_shape() == Shape({3, 32, 32}),
           "SmallCNN takes 3x32x32 images; " + train->describe() + " has " + shape_str(train->sample_shape()));
  TL_CHECK(train->num_classes() <= SyntheticImages::kClasses,
           "SmallCNN has 10 classes; " + train->describe() + " has " + std::to_string(train->num_classes()));
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
