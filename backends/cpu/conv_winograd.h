// A 3x3 convolution of stride 1 and padding 1, channels-last f32, by Winograd's minimal filtering
// F(4x4, 3x3) (Lavin and Gray 2016, "Fast Algorithms for Convolutional Neural Networks"): each 4x4
// block of outputs from the 6x6 inputs under it as Y = A^T [(G g G^T) * (B^T d B)] A, so that the
// channel sums become 36 independent matrix products (tiles x in) . (in x out) with 36 / 16 = 2.25
// multiplications per output instead of 9. oneDNN 2.6 has Winograd kernels for AVX-512 only; on
// AVX2 its direct kernels run SmallCNN's conv2 (32 -> 64 channels, 16x16) near the FMA units' peak,
// so the 4x fewer multiplications are the way to a faster step there (issue 50's AVX2 target).
//
// The backward pass for the input is the same convolution of dy with the kernel turned 180 degrees
// and its in/out channels swapped (transform_weights(..., for_backward_data = true)); the one for
// the weights is the same products summed over the tiles: dU = sum (A dy A^T) * (B^T x B), then
// dW = G^T dU G (backward_weights), again 36 / 144 of the direct multiplications.
//
// Tiles are processed in chunks small enough that a chunk's transformed inputs and products stay in
// this core's L2; each chunk on one thread, so the bits do not depend on the thread count (every
// output's sums run over the input channels in order, one fused multiply-add per term). The
// transforms add rounding that the direct sum has not: outputs agree with it to about 1e-6 of the
// inputs' magnitude times the channel count, not bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/backend.h"

namespace trainlab::cpu::winograd {

inline constexpr int kTile = 4;                      // outputs per tile side
inline constexpr int kPatch = kTile + 2;             // inputs under a tile, per side
inline constexpr int kComponents = kPatch * kPatch;  // the 36 products per tile

// Whether convolve() computes this convolution: f32, channels-last, a 3x3 kernel of stride 1 and
// padding 1, input and output channels a multiple of 8, the AVX2 loops available.
bool applies(DType dtype, const Conv2dShape& s);

// Which algorithm runs a pass of a convolution applies() takes, from TRAINLAB_CONV_ALGO (read
// once): "direct" (the backend's own: oneDNN's direct kernels), "winograd" (every pass), or "auto"
// (the default), measured (docs/RESULTS.md, "Winograd on AVX2"; SmallCNN's conv2 at batch 128):
//   backward-data and backward-weights: winograd on AVX2, where oneDNN 2.6 has no Winograd kernel
//     (8.0 -> 4.7 ms and 10.8 -> 5.0 ms); direct on AVX-512, where oneDNN's direct kernels are as
//     fast or faster (SmallCNN's conv2: backward-data 3.4 ms against this 4.4, backward-weights
//     5.7 against 4.9; ResNet-20's 16-channel layers: the step 16% slower with this one).
//   forward: direct. Faster on AVX2 (6.2 -> 3.7 ms), but its rounding reaches every gradient
//     through the batch norms that follow: ResNet-20's f32 gradients then differ from PyTorch f64's
//     by up to 3e-4 (relative), past PyTorch f32's own (tests/engine/check_torch_grads.py); with the
//     backward passes alone they stay within it.
//   inference (a forward no gradient goes through: the conv block of a forward-only pass, whose
//     pool keeps no places): winograd on AVX2, where no gradient carries its rounding (outputs
//     within about 1e-6 of the direct sum's, relative to the inputs' magnitude times the channels);
//     direct on AVX-512, where oneDNN's direct kernels are faster than this one.
// Throws Error naming the variable, its value and the allowed values when the value is none of them.
enum class Pass { forward, backward_data, backward_weights, inference };
bool chosen(DType dtype, const Conv2dShape& s, Pass pass);
// The policy in force, for the backend's list of implementations.
std::string policy();

// The floats of a transformed kernel: kComponents x in x out.
std::size_t weights_floats(std::int64_t in_channels, std::int64_t out_channels);

// u[36][in][out] from weight [out_channels][in_channels][3][3] (the forward's in x out), or, for the
// backward pass for the input, u[36][out_channels][in_channels] from the same weight turned 180
// degrees (that pass's input is dy: out_channels of them).
void transform_weights(const float* weight, std::int64_t out_channels, std::int64_t in_channels, bool for_backward_data,
                       float* u);

// The bytes of workspace convolve() needs on `threads` threads (a backend lends them from its
// allocator).
std::size_t workspace_bytes(std::int64_t in_channels, std::int64_t out_channels, int threads);

// y [batch, h, w, out] = the convolution of x [batch, h, w, in] (both channels-last) with the
// transformed kernel u (transform_weights), plus bias [out] unless null, then ReLU when asked
// (torch.relu's rule: a NaN passes); on at most `threads` OpenMP threads. Returns whether every
// output before the ReLU is finite: where one is not (a NaN or an infinity in x, u or the bias, or
// an overflow in the transforms), the transforms have spread it over its tile, and a caller that
// wants NaN exactly where the direct sum has it recomputes the call with the direct convolution.
bool convolve(const float* x, std::int64_t batch, std::int64_t h, std::int64_t w, std::int64_t in_channels,
              const float* u, std::int64_t out_channels, const float* bias, bool relu, float* y, int threads,
              void* workspace);

// The backward pass for the weights (Backend::conv2d_backward_weights): dweight [out][in][3][3] =
// G^T [sum over tiles of (A dy A^T) * (B^T x B)] G, and dbias [out] (the sum of dy) unless null;
// x [batch, h, w, in], dy [batch, h, w, out], channels-last. The tiles' sums run in fixed groups of
// chunks added in order, so the bits do not depend on the thread count.
std::size_t backward_weights_workspace_bytes(std::int64_t in_channels, std::int64_t out_channels, int threads);
void backward_weights(const float* x, const float* dy, std::int64_t batch, std::int64_t h, std::int64_t w,
                      std::int64_t in_channels, std::int64_t out_channels, float* dweight, float* dbias, int threads,
                      void* workspace);

}  // namespace trainlab::cpu::winograd
