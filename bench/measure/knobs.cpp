#include "bench/measure/knobs.h"

#include "backends/error.h"
#include "backends/registry.h"
#include "engine/core/rng.h"

namespace trainlab::bench {

KnobMap yaml_map(const YAML::Node& node, const std::string& where) {
  KnobMap out;
  if (!node || node.IsNull()) return out;
  TL_CHECK(node.IsMap(), where + " must be a map of config keys to values");
  for (const auto& item : node) {
    TL_CHECK(item.first.IsScalar() && item.second.IsScalar(),
             where + ": each entry must be key: value (got a list or map)");
    out[item.first.Scalar()] = item.second.Scalar();
  }
  return out;
}

KnobMap knobs_of(const TrainConfig& config) {
  KnobMap out;
  for (const auto& field : config_fields()) out[field.key] = field.get(config);
  return out;
}

TrainConfig config_from(const KnobMap& knobs, const std::string& origin) {
  TrainConfig config;
  for (const auto& [key, value] : knobs) apply_config_value(config, key, value, origin);
  return config;
}

void use_model(KnobMap& knobs, const ModelConfig& model) {
  knobs["model"] = model.name;
  knobs["model_options"] = model_options_text(model.options);
  // A token model's windows are cut from memory, never decoded: SyntheticImages' stand-in goes.
  if (find_model(model.name).context) knobs.erase("decode_cost");
}

std::string model_label(const std::string& name, const std::string& options_text) {
  std::string title = name;
  for (const ModelDef* model : registered_models()) {
    if (model->name == name || model->title == name) title = model->title;
  }
  return options_text.empty() ? title : title + " (" + options_text + ")";
}

std::string model_label(const ModelConfig& model) { return model_label(model.name, model_options_text(model.options)); }

std::shared_ptr<Module> probe_model(const ModelConfig& model) {
  const ModelDef& def = find_model(model.name);
  Generator generator(0);
  const InitOptions init{&generator, DType::f32, &get_backend("reference")};
  return build_model(def, init, default_input_for(def, model.options), model.options);
}

std::string ddp_peer_mismatch(const ModelConfig& model) {
  const std::string twin = find_model(model.name).torch_twin;
  if ((twin == "smallcnn" && model.options.empty()) || twin == "resnet") return "";
  return "the PyTorch DDP peer trains SmallCNN (as shipped) and ResNet only, and this run's model is " +
         model_label(model);
}

std::string ddp_peer_model_args(const ModelConfig& model) {
  // The keys' values are checked numbers and words (the model's own check), so quoting is enough.
  const std::string options = model_options_text(model.options);
  return " --model " + find_model(model.name).torch_twin +
         (options.empty() ? "" : " --model-options '" + options + "'");
}

}  // namespace trainlab::bench
