// Fusion as a capability: a run of ops a backend may compute in one call, described as data, and
// asked about per dtype and layout as supports_op asks about one op (Backend::supports_fused). The
// engine's ops and modules ask before they choose the fused form, for any model: a backend that
// takes a new pattern says so here and in one entry point, and every model whose layers form that
// run gets it (engine/nn/module.h's Sequential matches the patterns over its layers; a model with
// a forward of its own asks in it, as SmallCNN does).
//
// The patterns, each an anchor op followed by what its epilogue computes in the same call:
//   conv2d [+ bias] [+ relu]          conv2d_forward's bias and relu arguments
//   linear [+ bias] [+ relu]          linear_forward's bias and relu arguments
//   max_pool2d + relu                 max_pool2d_forward with Pool2dShape::relu
//   conv2d + bias + relu + max_pool   conv2d_pool_forward (2x2 windows, stride 2): inference, and
//                                     training where its input needs no gradient (a first layer)
//   batch_norm [+ add] [+ relu]       batch_norm_forward_*'s epilogue (a residual added, then a
//                                     ReLU: a residual block's tail), its backward in one pass too
//   conv2d + batch_norm [+ add]       conv2d_norm_forward: inference, batch norm's running
//          [+ relu]                   statistics folded into the convolution (its weights scaled,
//                                     its shift the bias), the residual and ReLU as post-ops
#pragma once

#include <cstdint>
#include <string>

namespace trainlab {

struct Conv2dShape;
struct Pool2dShape;

enum class FusedAnchor : std::uint8_t { conv2d, linear, max_pool2d, batch_norm };
enum class Activation : std::uint8_t { none, relu };

struct FusedPattern {
  FusedAnchor anchor = FusedAnchor::conv2d;
  bool bias = false;
  Activation activation = Activation::none;
  bool max_pool = false;     // then a 2x2 max-pool of stride 2 (conv2d only)
  bool training = true;      // its backward too; false: inference (nothing saved, no backward)
  bool residual = false;     // a residual added before the activation (batch_norm, and conv2d with norm)
  bool folded_norm = false;  // batch norm (running statistics) folded into the convolution (conv2d, inference)

  // conv2d + bias + relu + 2x2 max-pool: the convolution block of a VGG-style network.
  static FusedPattern conv_block(bool training) {
    return {FusedAnchor::conv2d, true, Activation::relu, true, training};
  }
  static FusedPattern pool_relu() { return {FusedAnchor::max_pool2d, false, Activation::relu, false, true}; }
  static FusedPattern layer(FusedAnchor anchor, bool bias, Activation activation) {
    return {anchor, bias, activation, false, true};
  }
  // batch norm, then a residual added (when `residual`), then the activation: a residual block's tail.
  static FusedPattern norm(bool residual, Activation activation, bool training = true) {
    return {FusedAnchor::batch_norm, false, activation, false, training, residual, false};
  }
  // Inference's convolution with batch norm folded in, then the residual and the activation.
  static FusedPattern conv_norm(bool residual, Activation activation) {
    return {FusedAnchor::conv2d, false, activation, false, false, residual, true};
  }
  // "conv2d+bias+relu+max_pool2x2 (inference)"
  std::string str() const;
  bool operator==(const FusedPattern&) const = default;
};

// The shapes a backend's answer may depend on (null where the pattern has no such op or the caller
// asks in general): a fused kernel may take only some shapes (the onednn backend's first-layer
// block: few input channels).
struct FusedShapes {
  const Conv2dShape* conv = nullptr;
  const Pool2dShape* pool = nullptr;
};

// Every pattern backends/ knows, for `trainlab backends --ops` and the harness.
inline constexpr FusedPattern kFusedPatterns[] = {
    {FusedAnchor::conv2d, true, Activation::relu, false, true},
    {FusedAnchor::linear, true, Activation::relu, false, true},
    {FusedAnchor::max_pool2d, false, Activation::relu, false, true},
    {FusedAnchor::conv2d, true, Activation::relu, true, false},
    {FusedAnchor::conv2d, true, Activation::relu, true, true},
    {FusedAnchor::batch_norm, false, Activation::relu, false, true, false},
    {FusedAnchor::batch_norm, false, Activation::relu, false, true, true},
    {FusedAnchor::conv2d, false, Activation::relu, false, false, false, true},
    {FusedAnchor::conv2d, false, Activation::relu, false, false, true, true},
};

}  // namespace trainlab
