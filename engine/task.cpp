#include "engine/task.h"

#include "engine/smallcnn.h"
#include "engine/synthetic_images.h"

namespace trainlab {

TrainTask smallcnn_task(const TrainConfig& config) {
  TrainTask task;
  task.model_name = "SmallCNN";
  const bool fused = config.fuse;
  task.make_model = [fused](const InitOptions& init) {
    auto model = std::make_shared<SmallCNN>(init);
    model->set_fused(fused);
    return model;
  };
  task.train_data =
      std::make_shared<SyntheticImages>(config.seed, Split::train, config.train_samples, config.decode_cost);
  task.held_out_data = std::make_shared<SyntheticImages>(config.seed, Split::held_out, config.eval_samples, 0);
  return task;
}

}  // namespace trainlab
