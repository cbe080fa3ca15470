#include "backends/capability.h"

#include <exception>
#include <vector>

#include "backends/backend.h"
#include "backends/registry.h"

namespace trainlab {

const char* backend_op_name(BackendOp op) {
  switch (op) {
    case BackendOp::elementwise:
      return "elementwise";
    case BackendOp::relu:
      return "relu";
    case BackendOp::bias_add:
      return "bias_add";
    case BackendOp::linear:
      return "linear";
    case BackendOp::conv2d:
      return "conv2d";
    case BackendOp::max_pool2d:
      return "max_pool2d";
    case BackendOp::cross_entropy:
      return "cross_entropy";
    case BackendOp::unscale:
      return "unscale";
    case BackendOp::optimizer:
      return "optimizer";
    case BackendOp::batch_norm:
      return "batch_norm";
    case BackendOp::avg_pool:
      return "avg_pool";
    case BackendOp::dropout:
      return "dropout";
    case BackendOp::layer_norm:
      return "layer_norm";
    case BackendOp::gelu:
      return "gelu";
    case BackendOp::softmax:
      return "softmax";
    case BackendOp::embedding:
      return "embedding";
    case BackendOp::matmul:
      return "matmul";
    case BackendOp::attention:
      return "attention";
  }
  return "invalid";
}

const char* support_name(Support support) {
  switch (support) {
    case Support::native:
      return "native";
    case Support::emulated:
      return "emulated";
    case Support::unsupported:
      return "unsupported";
  }
  return "invalid";
}

OpSupport Backend::supports_op(BackendOp, DType dtype, bool) const {
  if (supports(dtype)) return OpSupport::native();
  return OpSupport::unsupported("backend '" + name() + "' has no " + dtype_name(dtype) + " kernels");
}

std::string FusedPattern::str() const {
  static const char* const anchors[] = {"conv2d", "linear", "max_pool2d", "batch_norm"};
  std::string out = anchors[static_cast<int>(anchor)];
  if (bias) out += "+bias";
  if (folded_norm) out += "+batch_norm";
  if (residual) out += "+add";
  if (activation == Activation::relu) out += "+relu";
  if (max_pool) out += "+max_pool2x2";
  return out + (training ? " (training)" : " (inference)");
}

OpSupport Backend::supports_fused(const FusedPattern& pattern, DType dtype, bool channels_last,
                                  const FusedShapes&) const {
  const bool layer = pattern.anchor == FusedAnchor::conv2d || pattern.anchor == FusedAnchor::linear;
  if (layer && !pattern.max_pool && !pattern.folded_norm && !pattern.residual) {
    const OpSupport op = supports_op(pattern.anchor == FusedAnchor::conv2d ? BackendOp::conv2d : BackendOp::linear,
                                     dtype, channels_last);
    if (!op.runs()) return op;
    return op.level == Support::native ? OpSupport::native("the bias and ReLU in the layer's own call") : op;
  }
  if (pattern.anchor == FusedAnchor::batch_norm && !pattern.bias && !pattern.max_pool) {
    const OpSupport op = supports_op(BackendOp::batch_norm, dtype, channels_last);
    if (!op.runs()) return op;
    return op.level == Support::native ? OpSupport::native("the residual add and ReLU in batch norm's own passes") : op;
  }
  return OpSupport::unsupported("backend '" + name() + "' has no fused " + pattern.str() + ": the ops run composed");
}

void Backend::conv2d_pool_forward(DType dtype, const Conv2dShape&, const Pool2dShape&, const void*, const void*,
                                  const void*, void*, std::uint8_t* places) {
  const FusedPattern pattern = FusedPattern::conv_block(places != nullptr);
  throw Unsupported(name() + ": conv2d_pool_forward: " + supports_fused(pattern, dtype, false).how);
}

void Backend::conv2d_norm_forward(DType dtype, const Conv2dShape& s, const void*, const void*, const BatchNormFold&,
                                  const BatchNormEpilogue& e, void*) {
  const FusedPattern pattern =
      FusedPattern::conv_norm(e.residual != nullptr, e.relu ? Activation::relu : Activation::none);
  throw Unsupported(name() + ": conv2d_norm_forward: " + supports_fused(pattern, dtype, s.channels_last).how);
}

void Backend::conv2d_pool_backward_weights(DType dtype, const Conv2dShape&, const Pool2dShape&, const void*,
                                           const void*, const std::uint8_t*, void*, void*) {
  throw Unsupported(
      name() + ": conv2d_pool_backward_weights: " + supports_fused(FusedPattern::conv_block(true), dtype, false).how);
}

std::string unsupported_message(const Backend& backend, BackendOp op, DType dtype, bool channels_last,
                                const OpSupport& support) {
  const char* layout = channels_last ? "channels_last" : "NCHW";
  std::string where = "backend '" + backend.name() + "'";
  if (!backend.isa().empty()) where += " (ISA " + backend.isa() + ")";
  std::string out =
      std::string(backend_op_name(op)) + " in " + dtype_name(dtype) + " (" + layout + ") does not run on " + where;
  if (!support.how.empty()) out += ": " + support.how;
  // What would work: this backend in another dtype or layout, then the other backends.
  std::vector<std::string> options;
  std::string dtypes;
  for (DType other : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    if (other == dtype) continue;
    const OpSupport s = backend.supports_op(op, other, channels_last);
    if (s.runs())
      dtypes += (dtypes.empty() ? "" : ", ") + std::string(dtype_name(other)) + " (" + support_name(s.level) + ")";
  }
  if (!dtypes.empty()) options.push_back("dtype " + dtypes + " on " + backend.name());
  const OpSupport other_layout = backend.supports_op(op, dtype, !channels_last);
  if (other_layout.runs())
    options.push_back(std::string(channels_last ? "NCHW" : "channels_last") + " on " + backend.name());
  for (const BackendInfo& info : registered_backends()) {
    if (info.name == backend.name()) continue;
    try {
      const OpSupport s = get_backend(info.name).supports_op(op, dtype, channels_last);
      if (s.runs()) options.push_back("--backend " + info.name + " (" + support_name(s.level) + ")");
    } catch (const std::exception&) {
      // A backend that cannot start here (no GPU) is no option.
    }
  }
  if (!options.empty()) {
    out += "; what would work: ";
    for (std::size_t i = 0; i < options.size(); ++i) out += (i ? "; " : "") + options[i];
  }
  return out;
}

void require_op(const Backend& backend, BackendOp op, DType dtype, bool channels_last) {
  const OpSupport support = backend.supports_op(op, dtype, channels_last);
  if (!support.runs()) throw Unsupported(unsupported_message(backend, op, dtype, channels_last, support));
}

}  // namespace trainlab
