// What is trained on what: a model and its data, as the trainer takes them. The trainlab command's
// task is SmallCNN on SyntheticImages (smallcnn_task); a study driver brings its own (any Module
// built from the engine's layers, any Dataset) without touching the engine.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/config.h"
#include "engine/dataset.h"
#include "engine/nn.h"

namespace trainlab {

// Builds the model's parameters from the trainer's generator, in its parameter dtype, on its
// backend (the trainer seeds and chooses; the factory decides the architecture).
using ModelFactory = std::function<std::shared_ptr<Module>(const InitOptions& init)>;

struct TrainTask {
  std::string model_name;  // for logs: "SmallCNN"
  ModelFactory make_model;
  std::shared_ptr<const Dataset> train_data;
  std::shared_ptr<const Dataset> held_out_data;  // null: no held-out evaluation
};

// SmallCNN (fused when config.fuse) on SyntheticImages: config.train_samples training samples at
// config.decode_cost, config.eval_samples held out, both from config.seed. With config.data.dir, on
// that data set instead (at most train_samples and eval_samples of its splits), SmallCNN built for
// its sample shape and class count.
TrainTask smallcnn_task(const TrainConfig& config);

}  // namespace trainlab
