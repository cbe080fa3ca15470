// What is trained on what: a model and its data, as the trainer takes them. The trainlab command's
// task is a registered model (--model; SmallCNN by default) on SyntheticImages or a data set on disk
// (model_task); a study driver brings its own (any Module built from the engine's layers, any
// Dataset) without touching the engine.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/data/dataset.h"
#include "engine/nn/module.h"
#include "engine/train/config.h"

namespace trainlab {

// Builds the model's parameters from the trainer's generator, in its parameter dtype, on its
// backend (the trainer seeds and chooses; the factory decides the architecture).
using ModelFactory = std::function<std::shared_ptr<Module>(const InitOptions& init)>;

struct TrainTask {
  std::string model_name;  // for logs and checkpoints: the registered model's title ("SmallCNN")
  ModelFactory make_model;
  std::shared_ptr<const Dataset> train_data;
  std::shared_ptr<const Dataset> held_out_data;  // null: no held-out evaluation
};

// config.model (fused when config.fuse) on SyntheticImages: config.train_samples training samples
// at config.decode_cost, config.eval_samples held out, both from config.seed. With config.data.dir,
// on that data set instead (at most train_samples and eval_samples of its splits), the model built
// for its sample shape and class count. A model that cannot take the data's shape, or an unknown
// model key, is refused here, before any work, naming both.
TrainTask model_task(const TrainConfig& config);

}  // namespace trainlab
