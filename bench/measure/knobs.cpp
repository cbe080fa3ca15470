#include "bench/measure/knobs.h"

#include "backends/error.h"

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

}  // namespace trainlab::bench
