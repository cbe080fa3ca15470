#include "engine/core/state_dict.h"

namespace trainlab {

namespace {
template <typename Map>
const typename Map::mapped_type& lookup(const Map& map, const std::string& key, const std::string& owner,
                                        const char* kind) {
  auto it = map.find(key);
  TL_CHECK(it != map.end(), owner + ": missing " + kind + " '" + key + "'");
  return it->second;
}
}  // namespace

std::int64_t StateDict::integer(const std::string& key, const std::string& owner) const {
  return lookup(integers, key, owner, "integer");
}
double StateDict::number(const std::string& key, const std::string& owner) const {
  return lookup(numbers, key, owner, "number");
}
const std::string& StateDict::string(const std::string& key, const std::string& owner) const {
  return lookup(strings, key, owner, "string");
}

}  // namespace trainlab
