// The weight gradient of a convolution over few input channels (a network's first layer: RGB, RGBA,
// grey), stride 1: dW[o][c][kh][kw] = sum over images and output pixels of dy[o] times the input
// under tap (kh, kw, c), and the bias's gradient, sum of dy. oneDNN's kernels block the input
// channels by 8 or 16 and pair nothing at 3 (SmallCNN's conv1 at batch 128: ~5 ms for 0.23 GFLOP,
// 43 GFLOP/s, against its 32-channel conv2 at ~120): here each image's input is copied once, padded
// and channels-last, into a small buffer, and a table loop (SimdKernels::conv_taps_f32) runs every
// tap as one broadcast times the pixel's dy vector, dy read from cache a few times per image.
//
// The bits do not depend on the ISA or the thread count: each image's sums run over its pixels in
// order (one fused multiply-add per term, from +0), and the images' sums are added in batch order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/backend.h"
#include "backends/cpu/simd.h"

namespace trainlab::cpu::conv_few {

// The widest input this path takes (channels, taps per output): beyond it oneDNN's kernels do well.
constexpr std::int64_t kMaxChannels = 4, kMaxTaps = 63;

// Whether backward_weights() computes this convolution: f32 or bf16, stride 1, 1..4 input channels,
// output channels a multiple of 8, a padding smaller than the kernel, and a table with vector loops.
inline bool applies(DType dtype, const Conv2dShape& s) {
  return (dtype == DType::f32 || dtype == DType::bf16) && simd().isa >= CpuIsa::avx2 && s.stride_h == 1 &&
         s.stride_w == 1 && s.in_channels >= 1 && s.in_channels <= kMaxChannels &&
         s.in_channels * s.kernel_h * s.kernel_w <= kMaxTaps && s.out_channels % 8 == 0 && s.out_channels > 0 &&
         s.pad_h >= 0 && s.pad_w >= 0 && s.pad_h < s.kernel_h && s.pad_w < s.kernel_w && s.out_h() > 0 && s.out_w() > 0;
}

// The plain loop of SimdKernels::conv_taps_f32 (its x86-64 entry, and the oracle of the vector
// ones): acc[t * oc + o] = sum over pixels (r, c) in row order of src[r * row_stride + c *
// col_stride + tap[t]] * dy[(r * cols + c) * oc + o], from +0, one std::fma per term.
void taps_scalar(const float* src, std::int64_t row_stride, std::int64_t col_stride, const std::int64_t* tap,
                 std::int64_t taps, const float* dy, std::int64_t rows, std::int64_t cols, std::int64_t oc, float* acc);

// The bytes of workspace backward_weights() needs on `threads` threads (a backend lends them from its
// allocator: a steady-state step makes no system allocation).
std::size_t workspace_bytes(DType dtype, const Conv2dShape& s, int threads);

// Backend::conv2d_backward_weights for a shape applies() takes, in `dtype` (f32 or bf16): x [N, C,
// H, W] (NCHW, or NHWC when channels_last), dy [N, O, OH, OW] likewise, dweight [O, C, KH, KW],
// dbias [O] or null; on at most `threads` OpenMP threads, in workspace_bytes() of `workspace`.
void backward_weights(DType dtype, const Conv2dShape& s, const void* x, const void* dy, void* dweight, void* dbias,
                      int threads, void* workspace);

// Whether `pool` is 2x2 windows of stride 2, no padding, over the whole of the convolution's output.
bool pools_2x2(const Conv2dShape& s, const Pool2dShape& pool);

// The same after a 2x2 max-pool of stride 2 with its ReLU (Backend::conv2d_relu_max_pool2d_backward_weights):
// dy is the pool's [N, C, OH / 2, OW / 2] (NCHW, or NHWC when pool.channels_last), places its
// forward's (max_pool_2x2.h's, [N, OH / 2, OW / 2, C] order); each image's convolution dy is made
// from them in the workspace, never in memory whole.
std::size_t pooled_workspace_bytes(DType dtype, const Conv2dShape& s, const Pool2dShape& pool, int threads);
void backward_weights_pooled(DType dtype, const Conv2dShape& s, const Pool2dShape& pool, const void* x, const void* dy,
                             const std::uint8_t* places, void* dweight, void* dbias, int threads, void* workspace);

}  // namespace trainlab::cpu::conv_few
