// Reading a YAML file strictly, for the config and the ladder specs: one document, no duplicate
// keys, bounded in size and nesting, and a regular file (not /dev/null, not a FIFO). Errors name
// the file, the line and what is wrong. Needs yaml-cpp (a private dependency of libtrainlab: this
// header is for the engine's and the bench layer's own parsers).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace trainlab {

// The document in `path`; a file holding no document gives a null node.
YAML::Node load_yaml_file(const std::string& path, const std::string& what);
// The same, from text (`source` names it in errors).
YAML::Node load_yaml_text(const std::string& text, const std::string& source);

}  // namespace trainlab
