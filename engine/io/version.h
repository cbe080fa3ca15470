#pragma once

#include <string>

namespace trainlab {

std::string version();           // "0.1.0"
std::string git_describe();      // the engine's git describe at configure time
std::string compiler_version();  // "GNU 12.2.0"

}  // namespace trainlab
