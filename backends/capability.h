// What a backend can run, asked per op, dtype and layout before any work (ggml's supports_op): the
// planner (engine/train/step.cpp) asks for every op a model uses before the first step, the engine's ops
// ask again before each kernel call, and the cross-backend harness asks which cases to check.
//
//   native     the backend's kernel reads and writes the dtype itself (a oneDNN bf16 primitive, a
//              loop written for the storage type);
//   emulated   the same semantics as autocast's native path (inputs rounded to bf16/f16, f32
//              accumulation, the output rounded once), by widening to f32 around the f32 kernel:
//              correct, and slower by the extra passes over memory (seed 000's "bf16 is emulated
//              and slower than fp32" on CPUs without native bf16);
//   unsupported  not at all: the error says why and what would work.
#pragma once

#include <cstdint>
#include <string>

#include "backends/dtype.h"
#include "backends/error.h"

namespace trainlab {

class Backend;

// The backend's kernel families (Backend's methods, grouped as a model uses them).
enum class BackendOp : std::uint8_t {
  elementwise,    // fill, copy_strided, cast, binary, affine, axpy, sum
  relu,           // relu_forward / relu_backward
  bias_add,       // bias_add_forward / bias_add_backward
  linear,         // linear_forward / backward_data / backward_weights (bias and ReLU fused or not)
  conv2d,         // conv2d_forward / backward_data / backward_weights (bias and ReLU fused or not)
  max_pool2d,     // max_pool2d_forward / backward
  cross_entropy,  // softmax_cross_entropy_forward / backward
  unscale,        // unscale_and_check_finite (the f16 loss scaler)
  optimizer,      // sgd_step(_all) / adamw_step(_all)
  batch_norm,     // batch_norm_forward_training / _inference / backward (with the residual add and ReLU)
  avg_pool,       // global_avg_pool2d_forward / backward
  dropout,        // dropout_forward / backward
  layer_norm,     // layer_norm_forward / backward
  gelu,           // gelu_forward / backward
  softmax,        // softmax_forward / backward (the causal mask and the scale with it)
  embedding,      // embedding_forward / backward
  matmul,         // matmul (a batch of matrix products, either operand transposed)
  attention,      // attention_forward / backward (fused: the scores never in memory whole)
};
inline constexpr BackendOp kAllBackendOps[] = {
    BackendOp::elementwise, BackendOp::relu,       BackendOp::bias_add,      BackendOp::linear,
    BackendOp::conv2d,      BackendOp::max_pool2d, BackendOp::cross_entropy, BackendOp::unscale,
    BackendOp::optimizer,   BackendOp::batch_norm, BackendOp::avg_pool,      BackendOp::dropout,
    BackendOp::layer_norm,  BackendOp::gelu,       BackendOp::softmax,       BackendOp::embedding,
    BackendOp::matmul,      BackendOp::attention,
};
const char* backend_op_name(BackendOp op);  // "conv2d", ...

enum class Support : std::uint8_t { native, emulated, unsupported };
const char* support_name(Support support);  // "native", "emulated", "unsupported"

struct OpSupport {
  Support level = Support::native;
  // How (native: which kernels; emulated: around what and why not native) or, when unsupported,
  // why not. Short: it goes into headers, ledger rows and error messages.
  std::string how;
  bool runs() const { return level != Support::unsupported; }
  static OpSupport native(std::string how = "") { return {Support::native, std::move(how)}; }
  static OpSupport emulated(std::string how) { return {Support::emulated, std::move(how)}; }
  static OpSupport unsupported(std::string why) { return {Support::unsupported, std::move(why)}; }
};

// A capability question answered no: raised before any work (by the planner or by an op before its
// kernel), so a tool can tell "cannot run here" from "failed" (the ladder records it as skipped).
class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& message) : Error(message) {}
};

// The one-line error for an unsupported combination: the op, the dtype, the layout, the backend and
// its ISA, why, and what would work (other dtypes on this backend, other registered backends).
std::string unsupported_message(const Backend& backend, BackendOp op, DType dtype, bool channels_last,
                                const OpSupport& support);

// Throws Unsupported (with unsupported_message) unless `backend` runs the combination.
void require_op(const Backend& backend, BackendOp op, DType dtype, bool channels_last);

}  // namespace trainlab
