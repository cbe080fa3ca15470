// The reference backend: plain loops for every layer, in every floating dtype and both layouts.
// It is slow on purpose only in the sense of being obvious; loop orders still let -O3 vectorise,
// and OpenMP splits work so that every output element is computed in the same order whatever the
// thread count (results are bit-identical at 1 or N threads). Every other backend is tested
// against it.
//
// Every layer kernel is one NCHW loop nest in a compute type C: f32 for f32, bf16 and f16 data,
// f64 for f64. Staging (cpu_kernels.h) widens bf16/f16 inputs to f32 and reorders channels-last
// inputs to NCHW in scratch buffers, then narrows and reorders the outputs back, so the oracle
// covers every dtype and layout with the same loops and accumulates in f32 for the half types, as
// the fast backends do. The non-layer kernels and max-pool come from CpuBackend; memory is not
// cached, so AddressSanitizer sees every buffer's life.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/reference/gemm.h"
#include "backends/reference/reference_layers.h"
#include "backends/reference/reference_transformer.h"
#include "backends/registry.h"

namespace trainlab::reference {
namespace {

using namespace trainlab::cpu;
using reference::stat_t;

// ---------------------------------------------------------------------------------------------
// NCHW kernels in the compute type

// im2col for one image: col[k = (ic, kh, kw)][p = (oh, ow)], zero where the window hits padding.
template <typename T>
void im2col(const Conv2dShape& s, const T* x, T* col) {
  const std::int64_t oh_n = s.out_h(), ow_n = s.out_w();
  for (std::int64_t ic = 0; ic < s.in_channels; ++ic) {
    for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
      for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
        T* row = col + ((ic * s.kernel_h + kh) * s.kernel_w + kw) * oh_n * ow_n;
        for (std::int64_t oh = 0; oh < oh_n; ++oh) {
          const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
          T* out = row + oh * ow_n;
          if (ih < 0 || ih >= s.in_h) {
            std::fill(out, out + ow_n, T(0));
            continue;
          }
          const T* in = x + (ic * s.in_h + ih) * s.in_w;
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
            out[ow] = (iw >= 0 && iw < s.in_w) ? in[iw] : T(0);
          }
        }
      }
    }
  }
}

// The adjoint of im2col: accumulates col back into the image (dx must be zeroed first).
template <typename T>
void col2im(const Conv2dShape& s, const T* col, T* dx) {
  const std::int64_t oh_n = s.out_h(), ow_n = s.out_w();
  for (std::int64_t ic = 0; ic < s.in_channels; ++ic) {
    for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
      for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
        const T* row = col + ((ic * s.kernel_h + kh) * s.kernel_w + kw) * oh_n * ow_n;
        for (std::int64_t oh = 0; oh < oh_n; ++oh) {
          const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
          if (ih < 0 || ih >= s.in_h) continue;
          T* out = dx + (ic * s.in_h + ih) * s.in_w;
          const T* in = row + oh * ow_n;
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
            if (iw >= 0 && iw < s.in_w) out[iw] += in[ow];
          }
        }
      }
    }
  }
}

template <typename T>
void relu_in_place(T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] <= T(0) ? T(0) : y[i];  // NaN passes, as in torch.relu
}

// dbias[c] = sum over outer and inner of dy[outer, c, inner], in a fixed order.
template <typename T>
void channel_sums(const T* dy, T* dbias, std::int64_t outer, std::int64_t channels, std::int64_t inner, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < channels; ++c) {
    T total = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      const T* row = dy + (o * channels + c) * inner;
      for (std::int64_t i = 0; i < inner; ++i) total += row[i];
    }
    dbias[c] = total;
  }
}

class ReferenceBackend final : public cpu::CpuBackend {
 public:
  ReferenceBackend() : CpuBackend("reference", /*caching=*/false) {}

 protected:
  OpSupport matrix_op_support(BackendOp, DType dtype, bool) const override {
    if (dtype == DType::f32 || dtype == DType::f64) return OpSupport::native("plain loops");
    return OpSupport::emulated("widened to f32 around the f32 loops");
  }

 public:
  // ---- linear ----
  void linear_forward(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                      std::int64_t batch, std::int64_t in_features, std::int64_t out_features) override {
    dispatch_floating(dtype, op_name("linear_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      Stage<S, C> st;
      const C* px = st.input(x, batch * in_features);
      const C* pw = st.input(weight, out_features * in_features);
      const C* pb = bias ? st.input(bias, out_features) : nullptr;
      C* py = st.output(y, batch * out_features);
      // Output features outermost: each weight row is read once and reused across the batch.
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t o = 0; o < out_features; ++o) {
        for (std::int64_t b = 0; b < batch; ++b) {
          C v = dot(px + b * in_features, pw + o * in_features, in_features);
          if (pb) v += pb[o];
          if (relu) v = v <= C(0) ? C(0) : v;  // NaN passes
          py[b * out_features + o] = v;
        }
      }
      st.finish();
    });
  }
  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in_features, std::int64_t out_features) override {
    dispatch_floating(dtype, op_name("linear_backward_data").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      Stage<S, C> st;
      const C* pdy = st.input(dy, batch * out_features);
      const C* pw = st.input(weight, out_features * in_features);
      C* pdx = st.output(dx, batch * in_features);
      // dx[batch, in] = dy[batch, out] * weight[out, in]
      const std::int64_t blocks = (batch + 7) / 8;
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        gemm_nn_rows(blk * 8, std::min(batch, blk * 8 + 8), in_features, out_features, pdy, pw, pdx);
      }
      st.finish();
    });
  }
  void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                               std::int64_t batch, std::int64_t in_features, std::int64_t out_features) override {
    dispatch_floating(dtype, op_name("linear_backward_weights").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      Stage<S, C> st;
      const C* pdy = st.input(dy, batch * out_features);
      const C* px = st.input(x, batch * in_features);
      C* pdw = st.output(dweight, out_features * in_features);
      // dweight[out, in] = dy[batch, out]^T * x[batch, in]
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t o = 0; o < out_features; ++o) {
        gemm_tn_rows(o, o + 1, out_features, in_features, batch, pdy, px, pdw);
      }
      if (dbias) channel_sums(pdy, st.output(dbias, out_features), batch, out_features, 1, threads_);
      st.finish();
    });
  }

  // ---- conv2d: im2col and the three products ----
  void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight, const void* bias, bool relu,
                      void* y) override {
    dispatch_floating(dtype, op_name("conv2d_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_plane = s.in_channels * s.in_h * s.in_w;
      Stage<S, C> st;
      const C* px = st.input(x, Dims4{s.batch, s.in_channels, s.in_h, s.in_w}, s.channels_last);
      const C* pw = st.input(weight, s.out_channels * k);
      const C* pb = bias ? st.input(bias, s.out_channels) : nullptr;
      C* py = st.output(y, Dims4{s.batch, s.out_channels, s.out_h(), s.out_w()}, s.channels_last);
#pragma omp parallel num_threads(threads_)
      {
        std::vector<C> col(static_cast<std::size_t>(k * p));
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < s.batch; ++n) {
          im2col(s, px + n * x_plane, col.data());
          C* yn = py + n * s.out_channels * p;
          gemm_nn_rows(0, s.out_channels, p, k, pw, col.data(), yn);
          for (std::int64_t c = 0; c < s.out_channels; ++c) {
            if (pb) {
              for (std::int64_t q = 0; q < p; ++q) yn[c * p + q] += pb[c];
            }
            if (relu) relu_in_place(yn + c * p, p);
          }
        }
      }
      st.finish();
    });
  }
  void conv2d_backward_data(DType dtype, const Conv2dShape& s, const void* dy, const void* weight, void* dx) override {
    dispatch_floating(dtype, op_name("conv2d_backward_data").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_plane = s.in_channels * s.in_h * s.in_w;
      Stage<S, C> st;
      const C* pdy = st.input(dy, Dims4{s.batch, s.out_channels, s.out_h(), s.out_w()}, s.channels_last);
      const C* pw = st.input(weight, s.out_channels * k);
      C* pdx = st.output(dx, Dims4{s.batch, s.in_channels, s.in_h, s.in_w}, s.channels_last);
#pragma omp parallel num_threads(threads_)
      {
        std::vector<C> dcol(static_cast<std::size_t>(k * p));
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < s.batch; ++n) {
          // dcol[k, p] = weight[C_out, k]^T * dy_n[C_out, p]
          gemm_tn_rows(0, k, k, p, s.out_channels, pw, pdy + n * s.out_channels * p, dcol.data());
          C* dx_n = pdx + n * x_plane;
          std::fill(dx_n, dx_n + x_plane, C(0));
          col2im(s, dcol.data(), dx_n);
        }
      }
      st.finish();
    });
  }
  void conv2d_backward_weights(DType dtype, const Conv2dShape& s, const void* dy, const void* x, void* dweight,
                               void* dbias) override {
    dispatch_floating(dtype, op_name("conv2d_backward_weights").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_plane = s.in_channels * s.in_h * s.in_w;
      Stage<S, C> st;
      const C* pdy = st.input(dy, Dims4{s.batch, s.out_channels, s.out_h(), s.out_w()}, s.channels_last);
      const C* px = st.input(x, Dims4{s.batch, s.in_channels, s.in_h, s.in_w}, s.channels_last);
      C* pdw = st.output(dweight, s.out_channels * k);
      std::vector<C> cols(static_cast<std::size_t>(s.batch * k * p));
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t n = 0; n < s.batch; ++n) im2col(s, px + n * x_plane, cols.data() + n * k * p);
        // dweight[c, k] = sum_n dy_n[c, :] . col_n[k, :], summed over n in order.
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t c = 0; c < s.out_channels; ++c) {
        C* row = pdw + c * k;
        std::fill(row, row + k, C(0));
        for (std::int64_t n = 0; n < s.batch; ++n) {
          const C* dy_row = pdy + (n * s.out_channels + c) * p;
          const C* col = cols.data() + n * k * p;
          for (std::int64_t kk = 0; kk < k; ++kk) row[kk] += dot(dy_row, col + kk * p, p);
        }
      }
      if (dbias) channel_sums(pdy, st.output(dbias, s.out_channels), s.batch, s.out_channels, p, threads_);
      st.finish();
    });
  }

  // ---- batch norm, global average pooling, dropout: reference_layers.h's plain loops ----
  void batch_norm_forward_training(DType dtype, const BatchNormShape& s, const void* x, const void* gamma,
                                   const void* beta, const BatchNormEpilogue& e, void* y, void* save_mean,
                                   void* save_invstd, void* running_mean, void* running_var, double momentum) override {
    dispatch_floating(dtype, op_name("batch_norm_forward_training").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using P = stat_t<S>;
      reference::batch_norm_forward_training(s, as<S>(x), as<P>(gamma), as<P>(beta), e, as<S>(y), as<P>(save_mean),
                                             as<P>(save_invstd), as<P>(running_mean), as<P>(running_var), momentum,
                                             threads_);
    });
  }
  void batch_norm_forward_inference(DType dtype, const BatchNormShape& s, const void* x, const void* gamma,
                                    const void* beta, const void* running_mean, const void* running_var,
                                    const BatchNormEpilogue& e, void* y, void* save_mean, void* save_invstd) override {
    dispatch_floating(dtype, op_name("batch_norm_forward_inference").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using P = stat_t<S>;
      reference::batch_norm_forward_inference(s, as<S>(x), as<P>(gamma), as<P>(beta), as<P>(running_mean),
                                              as<P>(running_var), e, as<S>(y), as<P>(save_mean), as<P>(save_invstd),
                                              threads_);
    });
  }
  void batch_norm_backward(DType dtype, const BatchNormShape& s, const BatchNormSaved& saved, const void* dy, void* dx,
                           void* dgamma, void* dbeta, void* dresidual) override {
    dispatch_floating(dtype, op_name("batch_norm_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using P = stat_t<S>;
      reference::batch_norm_backward<S>(s, saved, as<S>(dy), as<S>(dx), as<P>(dgamma), as<P>(dbeta), as<S>(dresidual),
                                        threads_);
    });
  }
  void global_avg_pool2d_forward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                 bool channels_last, const void* x, void* y) override {
    dispatch_floating(dtype, op_name("global_avg_pool2d_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::global_avg_pool2d_forward(batch, channels, spatial, channels_last, as<S>(x), as<S>(y));
    });
  }
  void global_avg_pool2d_backward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                  bool channels_last, const void* dy, void* dx) override {
    dispatch_floating(dtype, op_name("global_avg_pool2d_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::global_avg_pool2d_backward(batch, channels, spatial, channels_last, as<S>(dy), as<S>(dx));
    });
  }
  void dropout_forward(DType dtype, const void* x, void* y, std::uint8_t* mask, std::int64_t n,
                       const DropoutDraw& draw) override {
    dispatch_floating(dtype, op_name("dropout_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::dropout_forward(as<S>(x), as<S>(y), mask, n, draw);
    });
  }
  void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n,
                        double scale) override {
    dispatch_floating(dtype, op_name("dropout_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::dropout_backward(as<S>(dy), mask, as<S>(dx), n, scale);
    });
  }

  // ---- a transformer's layers: reference_transformer.h's plain loops ----
  void layer_norm_forward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* beta,
                          void* y, void* mean, void* rstd) override {
    dispatch_floating(dtype, op_name("layer_norm_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using P = stat_t<S>;
      reference::layer_norm_forward(s, as<S>(x), as<P>(gamma), as<P>(beta), as<S>(y), as<P>(mean), as<P>(rstd),
                                    threads_);
    });
  }
  void layer_norm_backward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* mean,
                           const void* rstd, const void* dy, void* dx, void* dgamma, void* dbeta) override {
    dispatch_floating(dtype, op_name("layer_norm_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      using P = stat_t<S>;
      reference::layer_norm_backward(s, as<S>(x), as<P>(gamma), as<P>(mean), as<P>(rstd), as<S>(dy), as<S>(dx),
                                     as<P>(dgamma), as<P>(dbeta), threads_);
    });
  }
  void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n) override {
    dispatch_floating(dtype, op_name("gelu_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::gelu_forward(as<S>(x), as<S>(y), n);
    });
  }
  void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n) override {
    dispatch_floating(dtype, op_name("gelu_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::gelu_backward(as<S>(x), as<S>(dy), as<S>(dx), n);
    });
  }
  void softmax_forward(DType dtype, const SoftmaxShape& s, const void* x, void* y) override {
    dispatch_floating(dtype, op_name("softmax_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::softmax_forward(s, as<S>(x), as<S>(y), threads_);
    });
  }
  void softmax_backward(DType dtype, const SoftmaxShape& s, const void* y, const void* dy, void* dx) override {
    dispatch_floating(dtype, op_name("softmax_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::softmax_backward(s, as<S>(y), as<S>(dy), as<S>(dx), threads_);
    });
  }
  void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight,
                         std::int64_t vocab, std::int64_t width, void* y) override {
    check_embedding_indices(indices, n, vocab);
    dispatch_floating(dtype, op_name("embedding_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < width; ++c) as<S>(y)[i * width + c] = as<S>(weight)[indices[i] * width + c];
    });
  }
  void embedding_backward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* dy, std::int64_t vocab,
                          std::int64_t width, void* dweight) override {
    check_embedding_indices(indices, n, vocab);
    dispatch_floating(dtype, op_name("embedding_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::embedding_backward(indices, n, as<S>(dy), vocab, width, as<S>(dweight));
    });
  }
  void matmul(DType dtype, const MatmulShape& s, const void* a, const void* b, void* y) override {
    dispatch_floating(dtype, op_name("matmul").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::matmul(s, as<S>(a), as<S>(b), as<S>(y), threads_);
    });
  }
  // The oracle for the fused form: every score row in double, its output and gradients from it
  // (the backward recomputes the rows from q and k: it reads neither y nor lse).
  void attention_forward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v, void* y,
                         void* lse) override {
    dispatch_floating(dtype, op_name("attention_forward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::attention_forward(s, as<S>(q), as<S>(k), as<S>(v), as<S>(y), as<stat_t<S>>(lse));
    });
  }
  void attention_backward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                          const void*, const void*, const void* dy, void* dq, void* dk, void* dv) override {
    dispatch_floating(dtype, op_name("attention_backward").c_str(), [&](auto tag) {
      using S = decltype(tag);
      reference::attention_backward(s, as<S>(q), as<S>(k), as<S>(v), as<S>(dy), as<S>(dq), as<S>(dk), as<S>(dv));
    });
  }
};

const BackendRegistration registration{
    BackendInfo{"reference",
                "plain loops in f32/f64 (bf16/f16 computed in f32), NCHW and channels-last; the oracle every "
                "other backend is tested against",
                DeviceType::cpu, 0},
    [] { return std::make_unique<ReferenceBackend>(); }};

}  // namespace
}  // namespace trainlab::reference
