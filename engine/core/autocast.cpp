#include "engine/core/autocast.h"

#include <optional>
#include <string>

#include "backends/error.h"
#include "engine/core/autograd.h"
#include "engine/core/observer.h"
#include "engine/core/tensor.h"

namespace trainlab {

namespace {
thread_local DType current = DType::f32;
thread_local const WorkingCopies* current_copies = nullptr;
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, const WorkingCopies* copies)
    : previous_(current), previous_copies_(current_copies) {
  TL_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
           std::string("autocast dtype must be bf16, f16 or f32 (off), got ") + dtype_name(dtype));
  current = dtype;
  current_copies = copies;
}

AutocastGuard::~AutocastGuard() {
  current = previous_;
  current_copies = previous_copies_;
}

DType autocast_dtype() { return current; }
bool autocast_enabled() { return current != DType::f32; }

Tensor autocast_low(const Tensor& t) {
  if (!autocast_enabled() || !t.defined() || t.dtype() != DType::f32) return t;
  if (current_copies != nullptr && t.requires_grad()) {
    if (const Tensor* copy = current_copies->working_copy(t, current)) {
      // The cast, already done by the optimiser: the same values, and the same backward as to().
      return record(copy->detach(), "cast", {t}, [](const Tensor& grad, const std::vector<bool>&) {
        return std::vector<Tensor>{grad.to(DType::f32)};
      });
    }
  }
  // A parameter cast on the fly (no working copy ready) is a working copy for as long as it lives.
  Tensor low = t.to(current);
  if (t.requires_grad() && t.is_leaf()) observe::role(low, StorageRole::working_copy);
  return low;
}

const WorkingCopies* autocast_working_copies() { return current_copies; }

Tensor autocast_f32(const Tensor& t) {
  return autocast_enabled() && t.defined() && (t.dtype() == DType::bf16 || t.dtype() == DType::f16) ? t.to(DType::f32)
                                                                                                    : t;
}

}  // namespace trainlab
