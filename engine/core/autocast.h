// Mixed precision the way PyTorch's autocast does it. Inside an AutocastGuard(bf16) (or f16):
//  - the matrix ops (conv2d, linear and their fused forms) cast f32 inputs, weights and biases to
//    the low-precision dtype and compute in it (backends accumulate in f32);
//  - ops that follow (relu, max_pool2d, bias_add, elementwise) run in the dtype they are given,
//    casting an f32 operand to match a low-precision one;
//  - cross_entropy runs in f32.
// The casts are differentiable, so gradients arrive at f32 master weights in f32, and the
// optimiser updates and keeps its state in f32. No loss scaler is involved (bf16 has f32's range).
//
// Working copies: given a WorkingCopies source (an optimiser keeping them), a parameter's cast is
// not computed: autocast takes the low-precision copy that the optimiser's step wrote in the same
// pass as the update (fused into one kernel on the cuda backend), as long as it is current. The
// values are the same bits as the cast, and the gradient still flows to the f32 master.
#pragma once

#include "backends/dtype.h"

namespace trainlab {

class Tensor;

// A source of current low-precision copies of parameters (see Optimizer::keep_working_copies).
class WorkingCopies {
 public:
  virtual ~WorkingCopies() = default;
  // The `dtype` copy of `param`, or null when there is none or it is not current.
  virtual const Tensor* working_copy(const Tensor& param, DType dtype) const = 0;
};

class AutocastGuard {
 public:
  // f32 switches autocast off inside the guard; `copies` (may be null) supplies working copies.
  explicit AutocastGuard(DType dtype, const WorkingCopies* copies = nullptr);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType previous_;
  const WorkingCopies* previous_copies_;
};

// The low-precision dtype in force on this thread, or f32 when autocast is off.
DType autocast_dtype();
// The working copies in force on this thread (null when none): with autocast_dtype(), what an
// activation recomputation restores to run the forward again as it ran.
const WorkingCopies* autocast_working_copies();
bool autocast_enabled();
// t cast to the autocast dtype when autocast is on and t is f32; otherwise t itself.
Tensor autocast_low(const Tensor& t);
// t cast to f32 when autocast is on and t is bf16/f16; otherwise t itself.
Tensor autocast_f32(const Tensor& t);

}  // namespace trainlab
