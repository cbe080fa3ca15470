// Helpers shared by the test files.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "engine/core/autograd.h"
#include "engine/core/ops.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/data/synthetic_images.h"
#include "models/smallcnn/smallcnn.h"

namespace trainlab::test {

// The message of the Error `f` throws; "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A fresh directory under the system's temp directory, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / ("trainlab-test-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& child) const { return (path / child).string(); }
};

inline Backend& ref() { return get_backend("reference"); }

// Every registered CPU backend, the reference among them.
inline std::vector<std::string> cpu_backends() {
  std::vector<std::string> names;
  for (const auto& info : registered_backends()) {
    if (info.device_type == DeviceType::cpu) names.push_back(info.name);
  }
  return names;
}

inline Tensor random_tensor(const Shape& shape, Generator& gen, DType dtype = DType::f64, double lo = -1.0,
                            double hi = 1.0) {
  return Tensor::uniform(shape, lo, hi, gen, dtype, ref());
}

inline std::vector<double> values(const Tensor& t) {
  NoGradGuard no_grad;
  return t.detach().to(DType::f64).to_vector<double>();
}

// The bytes of two tensors are identical (bit-for-bit equality, NaN-safe).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<unsigned char> x(a.nbytes()), y(b.nbytes());
  a.copy_to_host(x.data());
  b.copy_to_host(y.data());
  return x == y;
}

// sqrt(sum (a - b)^2 / sum b^2) over two tensors of one shape (any floating dtype): 0 when equal.
inline double relative_l2_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  REQUIRE(x.size() == y.size());
  double diff = 0, norm = 0;
  for (std::size_t j = 0; j < x.size(); ++j) {
    diff += (x[j] - y[j]) * (x[j] - y[j]);
    norm += y[j] * y[j];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Throws-with-message matcher: the Error's text contains every fragment.
#define REQUIRE_THROWS_CONTAINING(expr, ...)                                          \
  do {                                                                                \
    bool threw_ = false;                                                              \
    try {                                                                             \
      (void)(expr);                                                                   \
    } catch (const ::trainlab::Error& e_) {                                           \
      threw_ = true;                                                                  \
      const std::string what_ = e_.what();                                            \
      for (const char* fragment_ : std::initializer_list<const char*>{__VA_ARGS__}) { \
        INFO("error message: " << what_);                                             \
        CHECK(what_.find(fragment_) != std::string::npos);                            \
      }                                                                               \
    }                                                                                 \
    if (!threw_) FAIL("expected trainlab::Error from " #expr);                        \
  } while (0)

}  // namespace trainlab::test
