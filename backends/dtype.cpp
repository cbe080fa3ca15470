#include "backends/dtype.h"

#include "backends/error.h"

namespace trainlab {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i64:
      return 8;
  }
  throw Error("dtype_size: invalid dtype value " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i64:
      return "i64";
  }
  return "invalid";
}

DType parse_dtype(const std::string& name) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64}) {
    if (name == dtype_name(dtype)) return dtype;
  }
  throw Error("unknown dtype '" + name + "' (allowed: f32, f64, bf16, f16, i64)");
}

bool is_floating(DType dtype) { return dtype != DType::i64; }

}  // namespace trainlab
