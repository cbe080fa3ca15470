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

// A value from the user, for an error message: in single quotes, on one line (newlines, tabs and
// other control bytes escaped), at most `max_chars` characters of it (then "...").
inline std::string quote_value(const std::string& value, std::size_t max_chars = 80) {
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  std::size_t shown = 0;
  for (const char c : value) {
    if (shown++ == max_chars) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Throws Error(message) when `condition` is false. The message is built only on failure.
#define TL_CHECK(condition, message)                    \
  do {                                                  \
    if (!(condition)) throw ::trainlab::Error(message); \
  } while (0)

}  // namespace trainlab
