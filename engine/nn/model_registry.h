// Models by name, as backends and communicators are found: `trainlab train --model NAME`, every tool
// and study that takes `--model`, and `trainlab models`. A model lives in its own folder under
// models/ and is one line of models/registry.cpp; nothing in engine/ names one.
//
// A model says what it is (name, one line), the keys it takes (`--model-options depth=3,width=16`),
// the input it is built for (a data set's sample shape and class count, checked before any work),
// how to build it, how to read that input back from a checkpoint's tensors, and the name of its
// PyTorch twin among the peers (bench/peers/). Its forward's memory chain, its ops and its
// analytic FLOPs are the Module's own (engine/nn/module.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/state_dict.h"
#include "engine/nn/module.h"

namespace trainlab {

// What a model is built for: one sample's shape ([C, H, W] for images, [T] for a window of token
// ids) and the class count (a token model's: its vocabulary).
struct ModelInput {
  Shape sample;
  std::int64_t classes = 0;
  std::string str() const;  // "3x32x32, 10 classes"
  bool operator==(const ModelInput&) const = default;
};

// A model's own configuration keys and their values as given (`depth=3,width=16`); each model
// parses its values with model_option_int and friends, which name the key and what is allowed.
using ModelOptions = std::map<std::string, std::string>;

struct ModelKey {
  std::string name;           // "depth"
  std::string default_value;  // "3"
  std::string allowed;        // "1..18"
  std::string help;
};

struct ModelDef {
  std::string name;   // --model's value: "smallcnn"
  std::string title;  // in logs and checkpoints: "SmallCNN"
  std::string description;
  std::vector<ModelKey> keys;
  ModelInput default_input;  // SyntheticImages': 3x32x32, 10 classes; a token model's: [T], its vocabulary
  // A token model (it takes windows of token ids, SampleKind::tokens): the window length its data
  // are cut into for these options (its block_size). Null: an image model (values).
  std::function<std::int64_t(const ModelOptions& options)> context;
  // Throws Error naming the value and what is allowed when the model cannot be built for `input`
  // with `options` (an input too small, a key's value out of range).
  std::function<void(const ModelInput& input, const ModelOptions& options)> check;
  // Builds its parameters from the generator, in init's dtype, on init's backend (after check).
  std::function<std::shared_ptr<Module>(const InitOptions& init, const ModelInput& input, const ModelOptions& options)>
      make;
  // The input a checkpoint's tensors were built for (its first layer's channels, its head's classes),
  // or nothing where they do not say (the default input is then tried, and loading names what differs).
  std::function<std::optional<ModelInput>(const NamedTensors& tensors, const ModelOptions& options)> input_of;
  std::string
      torch_twin;  // the peers' name for the same model (bench/peers/: torch_smallcnn.py is smallcnn), "" if none
};

// Registers a model at load time (one static object per model list: models/registry.cpp).
struct ModelRegistration {
  explicit ModelRegistration(std::vector<ModelDef> models);
};

// Every registered model, in registration order.
std::vector<const ModelDef*> registered_models();
// The model named `name` (its name or, for checkpoints written before the registry, its title);
// throws Error naming it and listing the registered ones.
const ModelDef& find_model(const std::string& name);
std::string registered_model_names();  // "smallcnn | mlp"

// Parses "key=value,key=value" (empty: none). Throws Error naming the bad entry.
ModelOptions parse_model_options(const std::string& text);
std::string model_options_text(const ModelOptions& options);  // the inverse, keys sorted
// Throws Error unless every key of `options` is one of `model`'s, listing them.
void check_model_keys(const ModelDef& model, const ModelOptions& options);
// A key's integer value within [lo, hi], or its default; Error names the key, the value and the range.
std::int64_t model_option_int(const ModelDef& model, const ModelOptions& options, const std::string& key,
                              std::int64_t lo, std::int64_t hi);
// A key's number (decimal) within [lo, hi], or its default; Error names the key, the value and the range.
double model_option_number(const ModelDef& model, const ModelOptions& options, const std::string& key, double lo,
                           double hi);
// A key's value among `choices`, or its default.
std::string model_option_choice(const ModelDef& model, const ModelOptions& options, const std::string& key,
                                const std::vector<std::string>& choices);

// check, then make: the model for `input`, errors prefixed by the model's name.
std::shared_ptr<Module> build_model(const ModelDef& model, const InitOptions& init, const ModelInput& input,
                                    const ModelOptions& options);
// The model's default input for these options: default_input, a token model's window at its
// context (block_size=128 makes it [128]).
ModelInput default_input_for(const ModelDef& model, const ModelOptions& options);
// Parameters of the model built for its default input (on the reference backend; for listings).
std::int64_t model_parameter_count(const ModelDef& model, const ModelOptions& options = {});

}  // namespace trainlab
