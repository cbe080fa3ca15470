// The sanitizer build checks the reference backend's innermost loops a row at a time, not an
// element at a time (backends/reference/gemm.h): this program reads one element past a heap row
// through axpy_row (argument "axpy") or dot ("dot"), and AddressSanitizer must report it.
#include <cstdio>
#include <cstring>
#include <memory>

#include "backends/reference/gemm.h"

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "axpy") != 0 && std::strcmp(argv[1], "dot") != 0)) {
    std::fprintf(stderr, "usage: reference_row_check axpy|dot\n");
    return 2;
  }
  constexpr std::int64_t n = 37;
  auto x = std::make_unique<float[]>(n);
  auto y = std::make_unique<float[]>(n + 1);
  for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = 1.f;
  // One element more than x holds: the row's last read is past its end.
  if (std::strcmp(argv[1], "axpy") == 0) {
    trainlab::reference::axpy_row(2.f, x.get(), y.get(), n + 1);
  } else {
    std::printf("%f\n", static_cast<double>(trainlab::reference::dot(y.get(), x.get(), n + 1)));
  }
  std::printf("no report: the row past the end was not caught\n");
  return 0;
}
