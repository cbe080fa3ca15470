// Inside the bench layer: a YAML map of config keys to values, as text (a ladder's base and rungs,
// a cost study's base and configurations). Errors name `where`.
#pragma once

#include <yaml-cpp/yaml.h>
#include <string>

#include "bench/ladder.h"

namespace trainlab::bench {
KnobMap yaml_map(const YAML::Node& node, const std::string& where);
}  // namespace trainlab::bench
