// A configuration as text: config keys to values in their own words (a ladder's base and rungs, a
// cost study's base and configurations, a ledger row's record of what ran). Parsed through the
// config table (engine/train/config.h), so errors name where the text came from, the key and the value.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>

#include "engine/train/config.h"

namespace trainlab::bench {

using KnobMap = std::map<std::string, std::string>;  // config key -> value, as text
// A KnobMap parsed through the config table (errors name `origin`, the key and the value), and a
// config as text (for ledger rows).
TrainConfig config_from(const KnobMap& knobs, const std::string& origin);
KnobMap knobs_of(const TrainConfig& config);
// A YAML map of config keys to values (errors name `where`).
KnobMap yaml_map(const YAML::Node& node, const std::string& where);

}  // namespace trainlab::bench
