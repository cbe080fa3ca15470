#include "engine/autocast.h"

#include <string>

#include "backends/error.h"
#include "engine/tensor.h"

namespace trainlab {

namespace {
thread_local DType current = DType::f32;
}

AutocastGuard::AutocastGuard(DType dtype) : previous_(current) {
  TL_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
           std::string("autocast dtype must be bf16, f16 or f32 (off), got ") + dtype_name(dtype));
  current = dtype;
}

AutocastGuard::~AutocastGuard() { current = previous_; }

DType autocast_dtype() { return current; }
bool autocast_enabled() { return current != DType::f32; }

Tensor autocast_low(const Tensor& t) {
  return autocast_enabled() && t.defined() && t.dtype() == DType::f32 ? t.to(current) : t;
}

Tensor autocast_f32(const Tensor& t) {
  return autocast_enabled() && t.defined() && (t.dtype() == DType::bf16 || t.dtype() == DType::f16) ? t.to(DType::f32)
                                                                                                    : t;
}

}  // namespace trainlab
