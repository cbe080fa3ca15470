#include "engine/io/fields.h"

namespace trainlab::fields::detail {

std::string preview(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

}  // namespace trainlab::fields::detail
