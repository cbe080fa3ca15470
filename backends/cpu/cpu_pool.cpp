// The CPU backends' max-pool: 2x2 windows of stride 2 by the vector loops of max_pool_2x2.h, any other
// window by the plain loop (CpuBackend, backends/cpu/cpu_backend.h).
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/max_pool_2x2.h"
#include "backends/cpu/simd.h"

namespace trainlab::cpu {

namespace {
// 2x2 windows, stride 2, no padding (SmallCNN's pools): windows do not overlap, so the workspace is
// one byte per output (the winner's place in its window, 0..3) and the backward writes, never adds.
bool is_two_by_two(const Pool2dShape& s) {
  return s.kernel_h == 2 && s.kernel_w == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0;
}
}  // namespace

std::size_t CpuBackend::max_pool2d_workspace_bytes(DType, const Pool2dShape& s) {
  const auto outputs = static_cast<std::size_t>(s.batch * s.channels * s.out_h() * s.out_w());
  return outputs * (is_two_by_two(s) ? sizeof(std::uint8_t) : sizeof(std::int64_t));
}

void CpuBackend::max_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y, void* workspace) {
  dispatch_floating(dtype, op_name("max_pool2d_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* in = as<S>(x);
    S* out = as<S>(y);
    auto* idx = as<std::int64_t>(workspace);
    const std::int64_t oh_n = s.out_h(), ow_n = s.out_w(), ch = s.channels;
    // One output: the first maximum of its window wins; a NaN wins over any number (it propagates,
    // as in PyTorch). `at(ih, iw)` reads the window's element in this layout.
    auto pool_one = [&](std::int64_t oh, std::int64_t ow, auto at, S* result, std::int64_t* argmax) {
      C best = -std::numeric_limits<C>::infinity();
      std::int64_t best_index = -1;
      for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
        const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
        if (ih < 0 || ih >= s.in_h) continue;
        for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
          const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
          if (iw < 0 || iw >= s.in_w) continue;
          const C value = load<C>(at(ih, iw));
          if (best_index < 0 || value > best || (std::isnan(value) && !std::isnan(best))) {
            best = value;
            best_index = ih * s.in_w + iw;
          }
        }
      }
      const bool dead = s.relu && best <= C(0);  // the fused ReLU: +0 and no gradient (-1 is no winner)
      *result = store<S>(dead ? C(0) : best);
      *argmax = dead ? -1 : best_index;
    };
    if (is_two_by_two(s)) {  // max_pool_2x2.h
      auto* place = as<std::uint8_t>(workspace);
      const std::int64_t in_w = s.in_w;
      if (s.channels_last && s.relu) {  // a row of windows at a time, the ReLU in the same pass
#pragma omp parallel for num_threads(threads_) schedule(static)
        for (std::int64_t row = 0; row < s.batch * oh_n; ++row) {
          const std::int64_t n = row / oh_n, oh = row % oh_n;
          const S* top = in + (n * s.in_h + 2 * oh) * in_w * ch;
          pool2x2::pool_relu_row(top, top + in_w * ch, ch, ow_n, out + row * ow_n * ch, ch, place + row * ow_n * ch);
        }
        return;
      }
      if (s.channels_last) {
#pragma omp parallel for num_threads(threads_) schedule(static)
        for (std::int64_t cell = 0; cell < s.batch * oh_n * ow_n; ++cell) {
          const std::int64_t n = cell / (oh_n * ow_n), oh = (cell / ow_n) % oh_n, ow = cell % ow_n;
          const S* a = in + (n * s.in_h * in_w + 2 * oh * in_w + 2 * ow) * ch;
          pool2x2::forward_run(a, a + ch, a + in_w * ch, a + in_w * ch + ch, out + cell * ch, place + cell * ch, ch);
        }
        return;
      }
      // NCHW: a window's candidates are interleaved along its two rows; split a plane's rows into
      // its four candidate planes first (a whole plane, so that the vector loops have work), then
      // pick as for channels_last.
      const std::int64_t out_plane = oh_n * ow_n;
#pragma omp parallel num_threads(threads_)
      {
        pool2x2::CandidatePlanes<S> planes(out_plane);
#pragma omp for schedule(static)
        for (std::int64_t plane = 0; plane < s.batch * ch; ++plane) {
          pool2x2::forward_plane(in + plane * s.in_h * in_w, in_w, oh_n, ow_n, planes, out + plane * out_plane,
                                 place + plane * out_plane);
          if (s.relu) pool2x2::relu_after(out + plane * out_plane, place + plane * out_plane, out_plane);
        }
      }
      return;
    }
    if (!s.channels_last) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t plane = 0; plane < s.batch * ch; ++plane) {
        const S* src = in + plane * s.in_h * s.in_w;
        for (std::int64_t oh = 0; oh < oh_n; ++oh)
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            const std::int64_t o = (plane * oh_n + oh) * ow_n + ow;
            pool_one(
                oh, ow, [&](std::int64_t ih, std::int64_t iw) { return src[ih * s.in_w + iw]; }, out + o, idx + o);
          }
      }
      return;
    }
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t row = 0; row < s.batch * oh_n; ++row) {
      const std::int64_t n = row / oh_n, oh = row % oh_n;
      const S* src = in + n * s.in_h * s.in_w * ch;
      for (std::int64_t ow = 0; ow < ow_n; ++ow)
        for (std::int64_t c = 0; c < ch; ++c) {
          const std::int64_t o = ((n * oh_n + oh) * ow_n + ow) * ch + c;
          pool_one(
              oh, ow, [&](std::int64_t ih, std::int64_t iw) { return src[(ih * s.in_w + iw) * ch + c]; }, out + o,
              idx + o);
        }
    }
  });
}

void CpuBackend::max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* dy, const void* workspace,
                                     void* dx) {
  dispatch_floating(dtype, op_name("max_pool2d_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* g = as<S>(dy);
    S* out = as<S>(dx);
    const std::int64_t out_plane = s.out_h() * s.out_w(), in_plane = s.in_h * s.in_w, ch = s.channels;
    if (is_two_by_two(s)) {  // max_pool_2x2.h; a last odd row or column is in no window: 0
      const auto* place = as<std::uint8_t>(workspace);
      const std::int64_t oh_n = s.out_h(), ow_n = s.out_w(), in_w = s.in_w;
      if (s.in_h % 2 != 0 || s.in_w % 2 != 0) std::fill(out, out + s.batch * in_plane * ch, store<S>(C(0)));
      if (s.channels_last) {
#pragma omp parallel for num_threads(threads_) schedule(static)
        for (std::int64_t cell = 0; cell < s.batch * oh_n * ow_n; ++cell) {
          const std::int64_t n = cell / (oh_n * ow_n), oh = (cell / ow_n) % oh_n, ow = cell % ow_n;
          S* a = out + (n * in_plane + 2 * oh * in_w + 2 * ow) * ch;
          pool2x2::backward_run(g + cell * ch, place + cell * ch, a, a + ch, a + in_w * ch, a + in_w * ch + ch, ch);
        }
        return;
      }
#pragma omp parallel num_threads(threads_)
      {
        pool2x2::CandidatePlanes<S> planes(out_plane);
#pragma omp for schedule(static)
        for (std::int64_t plane = 0; plane < s.batch * ch; ++plane) {
          pool2x2::backward_plane(g + plane * out_plane, place + plane * out_plane, in_w, oh_n, ow_n, planes,
                                  out + plane * in_plane);
        }
      }
      return;
    }
    const auto* idx = as<std::int64_t>(workspace);
    // Per image: windows may overlap, so each image's gradient is accumulated in f32/f64 by one
    // thread, in output order, then stored.
#pragma omp parallel num_threads(threads_)
    {
      std::vector<C> acc(static_cast<std::size_t>(in_plane * ch));
#pragma omp for schedule(static)
      for (std::int64_t n = 0; n < s.batch; ++n) {
        std::fill(acc.begin(), acc.end(), C(0));
        const std::int64_t base_out = n * out_plane * ch;
        for (std::int64_t i = 0; i < out_plane * ch; ++i) {
          const std::int64_t o = base_out + i;
          if (idx[o] < 0) continue;
          // NCHW: i = c * out_plane + q; channels_last: i = q * ch + c.
          const std::int64_t c = s.channels_last ? i % ch : i / out_plane;
          const std::int64_t target = s.channels_last ? idx[o] * ch + c : c * in_plane + idx[o];
          acc[static_cast<std::size_t>(target)] += load<C>(g[o]);
        }
        S* dst = out + n * in_plane * ch;
        for (std::int64_t i = 0; i < in_plane * ch; ++i) dst[i] = store<S>(acc[static_cast<std::size_t>(i)]);
      }
    }
  });
}

}  // namespace trainlab::cpu
