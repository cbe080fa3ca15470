// The one error type at trainlab's API boundary. Every layer throws it (the dtype and backend
// layers sit lowest, so it lives here); the CLI turns it into a one-line message and exit code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace trainlab {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error(message) when `condition` is false. The message is built only on failure.
#define TL_CHECK(condition, message)                    \
  do {                                                  \
    if (!(condition)) throw ::trainlab::Error(message); \
  } while (0)

}  // namespace trainlab
