// Text from the file system into trainlab's JSON files: a Linux name is bytes, not necessarily
// UTF-8 (an old archive's latin-1 `caf\xe9`), and JSON holds only UTF-8.
#pragma once

#include <cstddef>
#include <string>

namespace trainlab {

// The byte offset of the first byte that does not begin or continue a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points past U+10FFFF are not well formed), or npos.
std::size_t invalid_utf8_offset(const std::string& text);

// `text` with each byte of an ill-formed sequence written as the four characters \xHH (lower-case
// hex), the rest unchanged: valid UTF-8 for any input, and distinct inputs stay distinct unless
// the text already holds such an escape (as Python's surrogateescape, shown the way it prints).
std::string escape_invalid_utf8(const std::string& text);

}  // namespace trainlab
