#include "engine/io/yaml_file.h"

#include <set>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "backends/error.h"
#include "engine/io/fileio.h"

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
// Records where each document starts; ignores everything else.
struct DocumentStarts final : YAML::EventHandler {
  int documents = 0, second_line = -1;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second_line = mark.line;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};
}  // namespace

YAML::Node load_yaml_text(const std::string& text, const std::string& source) {
  TL_CHECK(text.size() <= kMaxYamlBytes, source + ": " + human_size(text.size()) + ", more than the " +
                                             human_size(kMaxYamlBytes) + " a YAML file here may hold");
  check_flow_depth(text, source);
  // The first document (yaml-cpp's LoadAll loops forever on some malformed input, so documents are
  // not collected with it): then whether a second one follows, found by walking the events.
  YAML::Node root;
  try {
    root = YAML::Load(text);
    std::stringstream stream(text);
    YAML::Parser parser(stream);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts)) {
      throw Error(source +
                  (starts.second_line >= 0 ? " line " + std::to_string(starts.second_line + 1) : std::string()) +
                  ": a second YAML document (after '---'); a file here holds one document");
    }
  } catch (const YAML::Exception& e) {
    throw Error(source + " is not valid YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  if (root.IsNull()) return root;
  check_unique_keys(root, source, 0);
  return root;
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
