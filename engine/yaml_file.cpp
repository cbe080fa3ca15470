#include "engine/yaml_file.h"

#include <set>

#include "backends/error.h"
#include "engine/fileio.h"

namespace trainlab {

namespace {
constexpr std::uint64_t kMaxYamlBytes = 1 << 20;
constexpr int kMaxFlowDepth = 64;

// Duplicate keys anywhere in the tree: yaml-cpp keeps both pairs and lookups find the first, so
// "the last one wins" silently in one reader and "the first" in another. Refused instead.
void check_unique_keys(const YAML::Node& node, const std::string& source, int depth) {
  TL_CHECK(depth <= kMaxFlowDepth, source + ": nested more than " + std::to_string(kMaxFlowDepth) + " levels deep");
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (const auto& item : node) {
      if (item.first.IsScalar()) {
        TL_CHECK(seen.insert(item.first.Scalar()).second,
                 source + " line " + std::to_string(item.first.Mark().line + 1) + ": key " +
                     quote_value(item.first.Scalar()) + " appears twice (each key may be given once)");
      }
      check_unique_keys(item.second, source, depth + 1);
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) check_unique_keys(item, source, depth + 1);
  }
}

// Flow collections ([...], {...}) outside quotes and comments, counted before yaml-cpp recurses
// into them.
void check_flow_depth(const std::string& text, const std::string& source) {
  int depth = 0, line = 1;
  char quote = 0;
  bool comment = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      comment = false;
      continue;
    }
    if (comment) continue;
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#') {
      comment = i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t';
    } else if (c == '[' || c == '{') {
      TL_CHECK(++depth <= kMaxFlowDepth, source + " line " + std::to_string(line) + ": nested more than " +
                                             std::to_string(kMaxFlowDepth) + " levels deep");
    } else if (c == ']' || c == '}') {
      depth = depth > 0 ? depth - 1 : 0;
    }
  }
}
}  // namespace

YAML::Node load_yaml_text(const std::string& text, const std::string& source) {
  TL_CHECK(text.size() <= kMaxYamlBytes, source + ": " + human_size(text.size()) + ", more than the " +
                                             human_size(kMaxYamlBytes) + " a YAML file here may hold");
  check_flow_depth(text, source);
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    throw Error(source + " is not valid YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  if (documents.size() > 1) {
    const int line = documents[1].Mark().line;
    throw Error(source + (line >= 0 ? " line " + std::to_string(line + 1) : std::string()) +
                ": a second YAML document (after '---'); a file here holds one document");
  }
  if (documents.empty()) return YAML::Node();
  check_unique_keys(documents[0], source, 0);
  return documents[0];
}

YAML::Node load_yaml_file(const std::string& path, const std::string& what) {
  std::vector<unsigned char> bytes;
  try {
    bytes = read_file(path, kMaxYamlBytes);
  } catch (const Error& e) {
    const std::string why = e.what();
    if (why.find("No such file") != std::string::npos) throw Error(what + " '" + path + "' does not exist");
    throw Error(what + " " + why);
  }
  return load_yaml_text(std::string(bytes.begin(), bytes.end()), what + " '" + path + "'");
}

}  // namespace trainlab
