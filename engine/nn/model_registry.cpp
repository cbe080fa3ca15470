#include "engine/nn/model_registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "backends/registry.h"

namespace trainlab {

namespace {

// Function-local statics: registrations run during static initialisation of other files.
std::vector<ModelDef>& entries() {
  static std::vector<ModelDef> models;
  return models;
}
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

const ModelKey* find_key(const ModelDef& model, const std::string& key) {
  for (const ModelKey& k : model.keys)
    if (k.name == key) return &k;
  return nullptr;
}

std::string keys_text(const ModelDef& model) {
  std::string text;
  for (const ModelKey& k : model.keys) text += (text.empty() ? "" : ", ") + k.name;
  return text.empty() ? "none" : text;
}

// The value given for `key`, or its default.
std::string option_value(const ModelDef& model, const ModelOptions& options, const std::string& key) {
  const ModelKey* k = find_key(model, key);
  TL_CHECK(k != nullptr, model.name + ": no model key '" + key + "' (its keys: " + keys_text(model) + ")");
  const auto it = options.find(key);
  return it == options.end() ? k->default_value : it->second;
}

// 0.9 as "0.9", not "0.900000".
std::string number_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

}  // namespace

std::string ModelInput::str() const {
  std::string text;
  // Appended piece by piece: `"x" + std::to_string(d)` trips GCC 12's -Wrestrict (a false positive).
  for (std::int64_t d : sample) text.append(text.empty() ? "" : "x").append(std::to_string(d));
  return text.append(", ").append(std::to_string(classes)).append(" classes");
}

ModelRegistration::ModelRegistration(std::vector<ModelDef> models) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (ModelDef& model : models) {
    for (const ModelDef& other : entries())
      TL_CHECK(other.name != model.name, "model '" + model.name + "' is registered twice");
    entries().push_back(std::move(model));
  }
}

std::vector<const ModelDef*> registered_models() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<const ModelDef*> out;
  for (const ModelDef& model : entries()) out.push_back(&model);
  return out;
}

std::string registered_model_names() {
  std::string text;
  for (const ModelDef* model : registered_models()) text += (text.empty() ? "" : " | ") + model->name;
  return text;
}

const ModelDef& find_model(const std::string& name) {
  for (const ModelDef* model : registered_models()) {
    if (model->name == name || model->title == name) return *model;
  }
  throw Error("unknown model " + quote_value(name) + " (registered: " + registered_model_names() + ")");
}

ModelOptions parse_model_options(const std::string& text) {
  ModelOptions options;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(begin, end - begin);
    const std::size_t eq = entry.find('=');
    TL_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < entry.size(),
             "model options: " + quote_value(entry) + " is not key=value (allowed: key=value,key=value)");
    const std::string key = entry.substr(0, eq);
    TL_CHECK(options.count(key) == 0, "model options: key '" + key + "' given twice");
    options[key] = entry.substr(eq + 1);
    begin = end + 1;
  }
  return options;
}

std::string model_options_text(const ModelOptions& options) {
  std::string text;
  for (const auto& [key, value] : options) text += (text.empty() ? "" : ",") + key + "=" + value;
  return text;
}

void check_model_keys(const ModelDef& model, const ModelOptions& options) {
  for (const auto& [key, value] : options) {
    TL_CHECK(find_key(model, key) != nullptr,
             "model '" + model.name + "' has no key '" + key + "' (its keys: " + keys_text(model) + ")");
  }
}

std::int64_t model_option_int(const ModelDef& model, const ModelOptions& options, const std::string& key,
                              std::int64_t lo, std::int64_t hi) {
  const std::string text = option_value(model, options, key);
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  TL_CHECK(ec == std::errc() && ptr == end && !text.empty() && value >= lo && value <= hi,
           "invalid value " + quote_value(text) + " for model key " + key + " (allowed: " + std::to_string(lo) + ".." +
               std::to_string(hi) + ")");
  return value;
}

double model_option_number(const ModelDef& model, const ModelOptions& options, const std::string& key, double lo,
                           double hi) {
  const std::string text = option_value(model, options, key);
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  TL_CHECK(ec == std::errc() && ptr == end && !text.empty() && std::isfinite(value) && value >= lo && value <= hi,
           "invalid value " + quote_value(text) + " for model key " + key + " (allowed: a number in " +
               number_text(lo) + ".." + number_text(hi) + ")");
  return value;
}

std::string model_option_choice(const ModelDef& model, const ModelOptions& options, const std::string& key,
                                const std::vector<std::string>& choices) {
  const std::string text = option_value(model, options, key);
  if (std::find(choices.begin(), choices.end(), text) != choices.end()) return text;
  std::string allowed;
  for (const std::string& c : choices) allowed += (allowed.empty() ? "" : " | ") + c;
  throw Error("invalid value " + quote_value(text) + " for model key " + key + " (allowed: " + allowed + ")");
}

std::shared_ptr<Module> build_model(const ModelDef& model, const InitOptions& init, const ModelInput& input,
                                    const ModelOptions& options) {
  check_model_keys(model, options);
  try {
    model.check(input, options);
  } catch (const Error& e) {
    throw Error("model '" + model.name + "' for input " + input.str() + ": " + e.what());
  }
  return model.make(init, input, options);
}

ModelInput default_input_for(const ModelDef& model, const ModelOptions& options) {
  ModelInput input = model.default_input;
  if (model.context) input.sample = {model.context(options)};
  return input;
}

std::int64_t model_parameter_count(const ModelDef& model, const ModelOptions& options) {
  Generator generator(0);
  InitOptions init{&generator, DType::f32, &get_backend("reference")};
  return build_model(model, init, default_input_for(model, options), options)->num_parameters();
}

}  // namespace trainlab
