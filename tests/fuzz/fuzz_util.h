// What the fuzz targets share. A target calls a parser on the input and catches trainlab::Error
// only: bad input must become one Error (the tools turn it into one line and exit 2). Anything
// else (std::bad_alloc, a JSON library exception, std::out_of_range, a signal) escapes, and the
// fuzzer reports it as the crash it is.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "backends/error.h"

namespace trainlab::fuzz {

// A scratch directory of this process's own, made once, removed at exit.
inline const std::filesystem::path& scratch() {
  static const struct Scratch {
    std::filesystem::path path;
    Scratch() {
      path = std::filesystem::temp_directory_path() / ("trainlab-fuzz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

template <typename Fn>
void expect_error_or_success(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
    // refused, as bad input should be
  }
}

}  // namespace trainlab::fuzz
