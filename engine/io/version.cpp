#include "engine/io/version.h"

#include "git_describe.h"  // generated at build time (engine/CMakeLists.txt)

namespace trainlab {

std::string version() { return TRAINLAB_VERSION; }
std::string git_describe() { return TRAINLAB_GIT_DESCRIBE; }
std::string compiler_version() { return TRAINLAB_COMPILER; }

}  // namespace trainlab
