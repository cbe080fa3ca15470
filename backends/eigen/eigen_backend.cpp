// The eigen backend: a second, independent fast path. Convolution is im2col plus an Eigen GEMM
// (NCHW: W[C_out, K] * col[K, P]; channels_last: col[P, K] * W^T[K, C_out], with the NHWC im2col
// reading channels contiguously, so channels_last needs no reorder); linear layers are Eigen
// matrix products. Images are split across OpenMP threads; inside a parallel region Eigen's own
// GEMM stays single-threaded, outside it (linear layers) Eigen parallelises with setNbThreads.
// f32 natively; bf16 and f16 inputs are widened to f32 and results rounded back (f32
// accumulation): emulated, in supports_op()'s terms.
// Max-pool, ReLU and the rest come from CpuBackend.
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/registry.h"

namespace trainlab::eigen {
namespace {

using namespace trainlab::cpu;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// NCHW im2col for one image: col[k = (ic, kh, kw)][p = (oh, ow)].
void im2col_nchw(const Conv2dShape& s, const float* x, float* col) {
  const std::int64_t oh_n = s.out_h(), ow_n = s.out_w();
  for (std::int64_t ic = 0; ic < s.in_channels; ++ic)
    for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
        float* row = col + ((ic * s.kernel_h + kh) * s.kernel_w + kw) * oh_n * ow_n;
        for (std::int64_t oh = 0; oh < oh_n; ++oh) {
          const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
          float* out = row + oh * ow_n;
          if (ih < 0 || ih >= s.in_h) {
            std::fill(out, out + ow_n, 0.f);
            continue;
          }
          const float* in = x + (ic * s.in_h + ih) * s.in_w;
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
            out[ow] = (iw >= 0 && iw < s.in_w) ? in[iw] : 0.f;
          }
        }
      }
}

void col2im_nchw(const Conv2dShape& s, const float* col, float* dx) {
  const std::int64_t oh_n = s.out_h(), ow_n = s.out_w();
  std::fill(dx, dx + s.in_channels * s.in_h * s.in_w, 0.f);
  for (std::int64_t ic = 0; ic < s.in_channels; ++ic)
    for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
        const float* row = col + ((ic * s.kernel_h + kh) * s.kernel_w + kw) * oh_n * ow_n;
        for (std::int64_t oh = 0; oh < oh_n; ++oh) {
          const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
          if (ih < 0 || ih >= s.in_h) continue;
          float* out = dx + (ic * s.in_h + ih) * s.in_w;
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
            if (iw >= 0 && iw < s.in_w) out[iw] += row[oh * ow_n + ow];
          }
        }
      }
}

// NHWC im2col for one image: col[p = (oh, ow)][k = (kh, kw, ic)]; each window row copies C
// contiguous channels.
void im2col_nhwc(const Conv2dShape& s, const float* x, float* col) {
  const std::int64_t oh_n = s.out_h(), ow_n = s.out_w(), c = s.in_channels;
  const std::int64_t k = s.kernel_h * s.kernel_w * c;
  for (std::int64_t oh = 0; oh < oh_n; ++oh)
    for (std::int64_t ow = 0; ow < ow_n; ++ow) {
      float* out = col + (oh * ow_n + ow) * k;
      for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
        const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
        for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
          const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
          float* dst = out + (kh * s.kernel_w + kw) * c;
          if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) {
            std::fill(dst, dst + c, 0.f);
          } else {
            std::copy_n(x + (ih * s.in_w + iw) * c, c, dst);
          }
        }
      }
    }
}

void col2im_nhwc(const Conv2dShape& s, const float* col, float* dx) {
  const std::int64_t oh_n = s.out_h(), ow_n = s.out_w(), c = s.in_channels;
  const std::int64_t k = s.kernel_h * s.kernel_w * c;
  std::fill(dx, dx + s.in_h * s.in_w * c, 0.f);
  for (std::int64_t oh = 0; oh < oh_n; ++oh)
    for (std::int64_t ow = 0; ow < ow_n; ++ow) {
      const float* in = col + (oh * ow_n + ow) * k;
      for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
        const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
        if (ih < 0 || ih >= s.in_h) continue;
        for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
          const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
          if (iw < 0 || iw >= s.in_w) continue;
          float* dst = dx + (ih * s.in_w + iw) * c;
          const float* src = in + (kh * s.kernel_w + kw) * c;
          for (std::int64_t i = 0; i < c; ++i) dst[i] += src[i];
        }
      }
    }
}

// Weights [C_out, C_in, kH, kW] as [C_out, (kH, kW, C_in)] for the NHWC column order, and back.
void weights_to_hwi(const Conv2dShape& s, const float* w, float* out) {
  for (std::int64_t o = 0; o < s.out_channels; ++o)
    for (std::int64_t i = 0; i < s.in_channels; ++i)
      for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
        for (std::int64_t kw = 0; kw < s.kernel_w; ++kw)
          out[((o * s.kernel_h + kh) * s.kernel_w + kw) * s.in_channels + i] =
              w[((o * s.in_channels + i) * s.kernel_h + kh) * s.kernel_w + kw];
}

void weights_from_hwi(const Conv2dShape& s, const float* in, float* w) {
  for (std::int64_t o = 0; o < s.out_channels; ++o)
    for (std::int64_t i = 0; i < s.in_channels; ++i)
      for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
        for (std::int64_t kw = 0; kw < s.kernel_w; ++kw)
          w[((o * s.in_channels + i) * s.kernel_h + kh) * s.kernel_w + kw] =
              in[((o * s.kernel_h + kh) * s.kernel_w + kw) * s.in_channels + i];
}

class EigenBackend final : public CpuBackend {
 public:
  EigenBackend() : CpuBackend("eigen", /*caching=*/true) { Eigen::setNbThreads(threads_); }

  bool supports(DType dtype) const override {
    return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  }

  void set_num_threads(int threads) override {
    CpuBackend::set_num_threads(threads);
    Eigen::setNbThreads(threads);
  }

  std::string describe() const override {
    return "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
           std::to_string(EIGEN_MINOR_VERSION) + " (" + Eigen::SimdInstructionSetsInUse() + "), " +
           std::to_string(Eigen::nbThreads()) + " threads";
  }

  // ---- linear ----
  void linear_forward(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                      std::int64_t batch, std::int64_t in, std::int64_t out) override {
    with_f32(dtype, "linear_forward", [&](auto& st) {
      const ConstMap X(st.input(x, batch * in), batch, in), W(st.input(weight, out * in), out, in);
      Map Y(st.output(y, batch * out), batch, out);
      Y.noalias() = X * W.transpose();
      if (bias) {
        const Eigen::Map<const Eigen::RowVectorXf> b(st.input(bias, out), out);
        Y.rowwise() += b;
      }
      if (relu) Y = Y.unaryExpr([](float v) { return v <= 0.f ? 0.f : v; });  // NaN passes, as in torch.relu
    });
  }

  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in, std::int64_t out) override {
    with_f32(dtype, "linear_backward_data", [&](auto& st) {
      const ConstMap dY(st.input(dy, batch * out), batch, out), W(st.input(weight, out * in), out, in);
      Map dX(st.output(dx, batch * in), batch, in);
      dX.noalias() = dY * W;
    });
  }

  void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                               std::int64_t batch, std::int64_t in, std::int64_t out) override {
    with_f32(dtype, "linear_backward_weights", [&](auto& st) {
      const ConstMap dY(st.input(dy, batch * out), batch, out), X(st.input(x, batch * in), batch, in);
      Map dW(st.output(dweight, out * in), out, in);
      dW.noalias() = dY.transpose() * X;
      if (dbias) {
        Eigen::Map<Eigen::RowVectorXf> db(st.output(dbias, out), out);
        db = dY.colwise().sum();
      }
    });
  }

  // ---- conv2d ----
  void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight, const void* bias, bool relu,
                      void* y) override {
    with_f32(dtype, "conv2d_forward", [&](auto& st) {
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_image = s.in_channels * s.in_h * s.in_w, y_image = s.out_channels * p;
      const float* px = st.input(x, s.batch * x_image);
      Scratch scratch(*this);
      const float* pw = weights_for(s, st.input(weight, s.out_channels * k), scratch);
      const float* pb = bias ? st.input(bias, s.out_channels) : nullptr;
      float* py = st.output(y, s.batch * y_image);
      float* cols = scratch.get<float>(threads_ * k * p);  // one im2col buffer per thread
#pragma omp parallel num_threads(threads_)
      {
        float* col = cols + omp_get_thread_num() * k * p;
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < s.batch; ++n) {
          if (s.channels_last) {
            im2col_nhwc(s, px + n * x_image, col);
            Map Y(py + n * y_image, p, s.out_channels);  // [P, C_out]
            Y.noalias() = ConstMap(col, p, k) * ConstMap(pw, s.out_channels, k).transpose();
            if (pb) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(pb, s.out_channels);
            if (relu) Y = Y.unaryExpr([](float v) { return v <= 0.f ? 0.f : v; });  // NaN passes, as in torch.relu
          } else {
            im2col_nchw(s, px + n * x_image, col);
            Map Y(py + n * y_image, s.out_channels, p);  // [C_out, P]
            Y.noalias() = ConstMap(pw, s.out_channels, k) * ConstMap(col, k, p);
            if (pb) Y.colwise() += Eigen::Map<const Eigen::VectorXf>(pb, s.out_channels);
            if (relu) Y = Y.unaryExpr([](float v) { return v <= 0.f ? 0.f : v; });  // NaN passes, as in torch.relu
          }
        }
      }
    });
  }

  void conv2d_backward_data(DType dtype, const Conv2dShape& s, const void* dy, const void* weight, void* dx) override {
    with_f32(dtype, "conv2d_backward_data", [&](auto& st) {
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_image = s.in_channels * s.in_h * s.in_w, y_image = s.out_channels * p;
      const float* pdy = st.input(dy, s.batch * y_image);
      Scratch scratch(*this);
      const float* pw = weights_for(s, st.input(weight, s.out_channels * k), scratch);
      float* pdx = st.output(dx, s.batch * x_image);
      float* dcols = scratch.get<float>(threads_ * k * p);  // one column buffer per thread
#pragma omp parallel num_threads(threads_)
      {
        float* dcol = dcols + omp_get_thread_num() * k * p;
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < s.batch; ++n) {
          if (s.channels_last) {
            Map(dcol, p, k).noalias() =
                ConstMap(pdy + n * y_image, p, s.out_channels) * ConstMap(pw, s.out_channels, k);  // [P, K]
            col2im_nhwc(s, dcol, pdx + n * x_image);
          } else {
            Map(dcol, k, p).noalias() =
                ConstMap(pw, s.out_channels, k).transpose() * ConstMap(pdy + n * y_image, s.out_channels, p);  // [K, P]
            col2im_nchw(s, dcol, pdx + n * x_image);
          }
        }
      }
    });
  }

  void conv2d_backward_weights(DType dtype, const Conv2dShape& s, const void* dy, const void* x, void* dweight,
                               void* dbias) override {
    with_f32(dtype, "conv2d_backward_weights", [&](auto& st) {
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_image = s.in_channels * s.in_h * s.in_w, y_image = s.out_channels * p;
      const float* pdy = st.input(dy, s.batch * y_image);
      const float* px = st.input(x, s.batch * x_image);
      float* pdw = st.output(dweight, s.out_channels * k);
      // Each thread sums its images into its own [C_out, K] (and bias) partials; the partials are
      // then added in thread order.
      const int threads = static_cast<int>(std::min<std::int64_t>(threads_, s.batch));
      Scratch scratch(*this);
      float* cols = scratch.get<float>(threads * k * p);
      float* partial_w = scratch.get<float>(threads * s.out_channels * k);
      float* partial_b = scratch.get<float>(threads * s.out_channels);
      std::fill(partial_w, partial_w + threads * s.out_channels * k, 0.f);
      std::fill(partial_b, partial_b + threads * s.out_channels, 0.f);
#pragma omp parallel num_threads(threads)
      {
        const std::int64_t t = omp_get_thread_num();
        float* col = cols + t * k * p;
        Map dW(partial_w + t * s.out_channels * k, s.out_channels, k);
        Eigen::Map<Eigen::RowVectorXf> db(partial_b + t * s.out_channels, s.out_channels);
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < s.batch; ++n) {
          if (s.channels_last) {
            im2col_nhwc(s, px + n * x_image, col);
            const ConstMap dY(pdy + n * y_image, p, s.out_channels);  // [P, C_out]
            dW.noalias() += dY.transpose() * ConstMap(col, p, k);
            if (dbias) db += dY.colwise().sum();
          } else {
            im2col_nchw(s, px + n * x_image, col);
            const ConstMap dY(pdy + n * y_image, s.out_channels, p);  // [C_out, P]
            dW.noalias() += dY * ConstMap(col, k, p).transpose();
            if (dbias) db += dY.rowwise().sum().transpose();
          }
        }
      }
      float* total = partial_w;  // thread 0's partial becomes the total
      for (int t = 1; t < threads; ++t) {
        Map(total, s.out_channels, k) += ConstMap(partial_w + t * s.out_channels * k, s.out_channels, k);
        Eigen::Map<Eigen::RowVectorXf>(partial_b, s.out_channels) +=
            Eigen::Map<const Eigen::RowVectorXf>(partial_b + t * s.out_channels, s.out_channels);
      }
      if (s.channels_last) {
        weights_from_hwi(s, total, pdw);
      } else {
        std::copy_n(total, s.out_channels * k, pdw);
      }
      if (dbias) std::copy_n(partial_b, s.out_channels, st.output(dbias, s.out_channels));
    });
  }

 private:
  // Runs fn(stage) with f32 views of f32 or bf16 data.
  template <typename Fn>
  void with_f32(DType dtype, const char* op, Fn&& fn) {
    if (dtype == DType::f32) {
      Stage<float, float> st;
      fn(st);
      st.finish();
    } else if (dtype == DType::bf16) {
      Stage<bf16, float> st;
      fn(st);
      st.finish();
    } else if (dtype == DType::f16) {
      Stage<f16, float> st;
      fn(st);
      st.finish();
    } else {
      unsupported(op_name(op).c_str(), dtype, "f32, bf16, f16");
    }
  }

 protected:
  OpSupport matrix_op_support(BackendOp, DType dtype, bool) const override {
    if (dtype == DType::f32) return OpSupport::native("im2col + Eigen f32 GEMM");
    return OpSupport::emulated("widened to f32 around Eigen's f32 GEMM");
  }

 private:
  // The weights in the column order of this layout: as given for NCHW, [C_out, (kH, kW, C_in)]
  // (in scratch) for channels_last.
  const float* weights_for(const Conv2dShape& s, const float* w, Scratch& scratch) {
    if (!s.channels_last) return w;
    float* hwi = scratch.get<float>(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w);
    weights_to_hwi(s, w, hwi);
    return hwi;
  }
};

const BackendRegistration registration{
    BackendInfo{"eigen",
                "im2col + Eigen GEMM convolution and Eigen matrix products, f32 (bf16 and f16 widened), NCHW and "
                "channels-last",
                DeviceType::cpu, 10},
    [] { return std::make_unique<EigenBackend>(); }};

}  // namespace
}  // namespace trainlab::eigen
