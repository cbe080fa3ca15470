// The reference backend: plain loops for every op, in f32 and f64. It is slow on purpose only
// in the sense of being obvious; loop orders still let -O3 vectorise, and OpenMP splits work so
// that every output element is computed in the same order whatever the thread count (so
// results are bit-identical at 1 or N threads). Every other backend is tested against it.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/error.h"
#include "backends/reference/gemm.h"
#include "backends/registry.h"

namespace trainlab::reference {
namespace {

[[noreturn]] void unsupported(const char* op, DType dtype) {
  throw Error(std::string("reference backend: ") + op + " does not support dtype " + dtype_name(dtype) +
              " (supported: f32, f64)");
}

// Calls fn(T{}) with T = float or double.
template <typename Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f64:
      fn(double{});
      return;
    default:
      unsupported(op, dtype);
  }
}

// Calls fn(T{}) for every storage type.
template <typename Fn>
void dispatch_storage(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f64:
      fn(double{});
      return;
    case DType::bf16:
      fn(bf16{});
      return;
    case DType::f16:
      fn(f16{});
      return;
    case DType::i64:
      fn(std::int64_t{});
      return;
  }
  throw Error("reference backend: invalid dtype");
}

template <typename T>
double to_double(T value) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
    return static_cast<double>(static_cast<float>(value));
  } else {
    return static_cast<double>(value);
  }
}

// f64 -> bf16/f16 goes through f32 (two roundings); f32 -> bf16/f16 rounds once, to nearest even.
template <typename T>
T from_double(double value) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
    return T(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    TL_CHECK(value >= -0x1p63 && value < 0x1p63,
             "reference backend: cannot convert " + std::to_string(value) + " to i64");
    return static_cast<T>(value);
  } else {
    return static_cast<T>(value);
  }
}

template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
T* as(void* p) {
  return static_cast<T*>(p);
}

class SteadyTimer final : public Timer {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  void stop() override { stop_ = std::chrono::steady_clock::now(); }
  double elapsed_s() override { return std::chrono::duration<double>(stop_ - start_).count(); }
  const char* kind() const override { return "steady_clock"; }

 private:
  std::chrono::steady_clock::time_point start_{}, stop_{};
};

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

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend() : threads_(std::max(1, omp_get_max_threads())) {}

  std::string name() const override { return "reference"; }
  DeviceType device_type() const override { return DeviceType::cpu; }
  bool supports(DType dtype) const override { return dtype == DType::f32 || dtype == DType::f64; }
  void set_num_threads(int threads) override {
    TL_CHECK(threads >= 1, "threads must be >= 1, got " + std::to_string(threads));
    threads_ = threads;
  }
  int num_threads() const override { return threads_; }

  // ---- memory ----
  void* allocate(std::size_t bytes) override {
    const std::size_t rounded = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
    void* ptr = std::aligned_alloc(64, rounded);
    if (!ptr) throw Error("reference backend: out of memory allocating " + std::to_string(bytes) + " bytes");
    allocations_.fetch_add(1, std::memory_order_relaxed);
    const auto in_use = bytes_in_use_.fetch_add(static_cast<std::int64_t>(bytes)) + static_cast<std::int64_t>(bytes);
    auto peak = peak_bytes_.load();
    while (in_use > peak && !peak_bytes_.compare_exchange_weak(peak, in_use)) {
    }
    return ptr;
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (!ptr) return;
    std::free(ptr);
    bytes_in_use_.fetch_sub(static_cast<std::int64_t>(bytes));
  }
  AllocatorStats allocator_stats() const override {
    return {allocations_.load(), bytes_in_use_.load(), peak_bytes_.load()};
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}
  std::unique_ptr<Timer> make_timer() override { return std::make_unique<SteadyTimer>(); }

  // ---- elementwise ----
  void fill(DType dtype, void* y, std::int64_t n, double value) override {
    dispatch_storage(dtype, [&](auto tag) {
      using T = decltype(tag);
      std::fill(as<T>(y), as<T>(y) + n, from_double<T>(value));
    });
  }

  void copy_strided(DType dtype, const void* src, const Layout& src_layout, void* dst,
                    const Layout& dst_layout) override {
    TL_CHECK(src_layout.shape == dst_layout.shape, "copy_strided: source and destination shapes differ");
    const std::size_t elem = dtype_size(dtype);
    const auto& shape = src_layout.shape;
    const std::size_t rank = shape.size();
    std::int64_t numel = 1;
    for (auto d : shape) numel *= d;
    if (numel == 0) return;
    const auto* s = static_cast<const unsigned char*>(src);
    auto* d = static_cast<unsigned char*>(dst);
    if (rank == 0) {
      std::memcpy(d + dst_layout.offset * elem, s + src_layout.offset * elem, elem);
      return;
    }
    // Walk every index but the last with a counter; the last dimension is a tight loop.
    std::vector<std::int64_t> index(rank, 0);
    const std::int64_t inner = shape[rank - 1];
    const std::int64_t s_inner = src_layout.strides[rank - 1], d_inner = dst_layout.strides[rank - 1];
    for (std::int64_t done = 0; done < numel; done += inner) {
      std::int64_t s_off = src_layout.offset, d_off = dst_layout.offset;
      for (std::size_t k = 0; k + 1 < rank; ++k) {
        s_off += index[k] * src_layout.strides[k];
        d_off += index[k] * dst_layout.strides[k];
      }
      for (std::int64_t j = 0; j < inner; ++j) {
        std::memcpy(d + (d_off + j * d_inner) * elem, s + (s_off + j * s_inner) * elem, elem);
      }
      for (std::size_t k = rank - 1; k-- > 0;) {
        if (++index[k] < shape[k]) break;
        index[k] = 0;
      }
    }
  }

  void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n) override {
    dispatch_storage(src_dtype, [&](auto src_tag) {
      using S = decltype(src_tag);
      dispatch_storage(dst_dtype, [&](auto dst_tag) {
        using D = decltype(dst_tag);
        const S* in = as<S>(src);
        D* out = as<D>(dst);
        if constexpr (std::is_same_v<S, float> && (std::is_same_v<D, bf16> || std::is_same_v<D, f16>)) {
          for (std::int64_t i = 0; i < n; ++i) out[i] = D(in[i]);  // one rounding
        } else {
          for (std::int64_t i = 0; i < n; ++i) out[i] = from_double<D>(to_double(in[i]));
        }
      });
    });
  }

  void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, std::int64_t n) override {
    dispatch_float(dtype, "binary", [&](auto tag) {
      using T = decltype(tag);
      const T* pa = as<T>(a);
      const T* pb = as<T>(b);
      T* py = as<T>(y);
      switch (op) {
        case BinaryOp::add:
          for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
          break;
        case BinaryOp::sub:
          for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] - pb[i];
          break;
        case BinaryOp::mul:
          for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] * pb[i];
          break;
        case BinaryOp::div:
          for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] / pb[i];
          break;
      }
    });
  }

  void affine(DType dtype, const void* x, void* y, std::int64_t n, double scale, double shift) override {
    dispatch_float(dtype, "affine", [&](auto tag) {
      using T = decltype(tag);
      const T* px = as<T>(x);
      T* py = as<T>(y);
      const T a = static_cast<T>(scale), b = static_cast<T>(shift);
      for (std::int64_t i = 0; i < n; ++i) py[i] = a * px[i] + b;
    });
  }

  void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y) override {
    dispatch_float(dtype, "axpy", [&](auto tag) {
      using T = decltype(tag);
      axpy_row(static_cast<T>(alpha), as<T>(x), as<T>(y), n);
    });
  }

  void sum(DType dtype, const void* x, std::int64_t n, void* out) override {
    dispatch_float(dtype, "sum", [&](auto tag) {
      using T = decltype(tag);
      constexpr int lanes = 16;
      const T* px = as<T>(x);
      T partial[lanes] = {};
      std::int64_t i = 0;
      for (; i + lanes <= n; i += lanes) {
        for (int l = 0; l < lanes; ++l) partial[l] += px[i + l];
      }
      T total = 0;
      for (int l = 0; l < lanes; ++l) total += partial[l];
      for (; i < n; ++i) total += px[i];
      *as<T>(out) = total;
    });
  }

  // ---- relu ----
  void relu_forward(DType dtype, const void* x, void* y, std::int64_t n) override {
    dispatch_float(dtype, "relu_forward", [&](auto tag) {
      using T = decltype(tag);
      const T* px = as<T>(x);
      T* py = as<T>(y);
      for (std::int64_t i = 0; i < n; ++i) py[i] = px[i] > T(0) ? px[i] : T(0);
    });
  }
  void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n) override {
    dispatch_float(dtype, "relu_backward", [&](auto tag) {
      using T = decltype(tag);
      const T* py = as<T>(y);
      const T* pdy = as<T>(dy);
      T* pdx = as<T>(dx);
      for (std::int64_t i = 0; i < n; ++i) pdx[i] = py[i] > T(0) ? pdy[i] : T(0);
    });
  }

  // ---- bias add ----
  void bias_add_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer,
                        std::int64_t channels, std::int64_t inner) override {
    dispatch_float(dtype, "bias_add_forward", [&](auto tag) {
      using T = decltype(tag);
      const T* px = as<T>(x);
      const T* pb = as<T>(bias);
      T* py = as<T>(y);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t c = 0; c < channels; ++c) {
          const std::int64_t base = (o * channels + c) * inner;
          for (std::int64_t i = 0; i < inner; ++i) py[base + i] = px[base + i] + pb[c];
        }
      }
    });
  }
  void bias_add_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                         std::int64_t inner) override {
    dispatch_float(dtype, "bias_add_backward", [&](auto tag) {
      using T = decltype(tag);
      const T* pdy = as<T>(dy);
      T* pdb = as<T>(dbias);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t c = 0; c < channels; ++c) {
        T total = 0;
        for (std::int64_t o = 0; o < outer; ++o) {
          const T* row = pdy + (o * channels + c) * inner;
          for (std::int64_t i = 0; i < inner; ++i) total += row[i];
        }
        pdb[c] = total;
      }
    });
  }

  // ---- linear ----
  void linear_forward(DType dtype, const void* x, const void* weight, void* y, std::int64_t batch,
                      std::int64_t in_features, std::int64_t out_features) override {
    dispatch_float(dtype, "linear_forward", [&](auto tag) {
      using T = decltype(tag);
      const T* px = as<T>(x);
      const T* pw = as<T>(weight);
      T* py = as<T>(y);
      // Output features outermost: each weight row is read once and reused across the batch.
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t o = 0; o < out_features; ++o) {
        for (std::int64_t b = 0; b < batch; ++b) {
          py[b * out_features + o] = dot(px + b * in_features, pw + o * in_features, in_features);
        }
      }
    });
  }
  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in_features, std::int64_t out_features) override {
    dispatch_float(dtype, "linear_backward_data", [&](auto tag) {
      using T = decltype(tag);
      // dx[batch, in] = dy[batch, out] * weight[out, in]
      const std::int64_t blocks = (batch + 7) / 8;
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        gemm_nn_rows(blk * 8, std::min(batch, blk * 8 + 8), in_features, out_features, as<T>(dy), as<T>(weight),
                     as<T>(dx));
      }
    });
  }
  void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, std::int64_t batch,
                               std::int64_t in_features, std::int64_t out_features) override {
    dispatch_float(dtype, "linear_backward_weights", [&](auto tag) {
      using T = decltype(tag);
      // dweight[out, in] = dy[batch, out]^T * x[batch, in]
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t o = 0; o < out_features; ++o) {
        gemm_tn_rows(o, o + 1, out_features, in_features, batch, as<T>(dy), as<T>(x), as<T>(dweight));
      }
    });
  }

  // ---- conv2d: im2col and the three products ----
  void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight, void* y) override {
    dispatch_float(dtype, "conv2d_forward", [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_plane = s.in_channels * s.in_h * s.in_w;
#pragma omp parallel num_threads(threads_)
      {
        std::vector<T> col(static_cast<std::size_t>(k * p));
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < s.batch; ++n) {
          im2col(s, as<T>(x) + n * x_plane, col.data());
          gemm_nn_rows(0, s.out_channels, p, k, as<T>(weight), col.data(), as<T>(y) + n * s.out_channels * p);
        }
      }
    });
  }
  void conv2d_backward_data(DType dtype, const Conv2dShape& s, const void* dy, const void* weight, void* dx) override {
    dispatch_float(dtype, "conv2d_backward_data", [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_plane = s.in_channels * s.in_h * s.in_w;
#pragma omp parallel num_threads(threads_)
      {
        std::vector<T> dcol(static_cast<std::size_t>(k * p));
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < s.batch; ++n) {
          // dcol[k, p] = weight[C_out, k]^T * dy_n[C_out, p]
          gemm_tn_rows(0, k, k, p, s.out_channels, as<T>(weight), as<T>(dy) + n * s.out_channels * p, dcol.data());
          T* dx_n = as<T>(dx) + n * x_plane;
          std::fill(dx_n, dx_n + x_plane, T(0));
          col2im(s, dcol.data(), dx_n);
        }
      }
    });
  }
  void conv2d_backward_weights(DType dtype, const Conv2dShape& s, const void* dy, const void* x,
                               void* dweight) override {
    dispatch_float(dtype, "conv2d_backward_weights", [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t k = s.in_channels * s.kernel_h * s.kernel_w, p = s.out_h() * s.out_w();
      const std::int64_t x_plane = s.in_channels * s.in_h * s.in_w;
      std::vector<T> cols(static_cast<std::size_t>(s.batch * k * p));
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t n = 0; n < s.batch; ++n) im2col(s, as<T>(x) + n * x_plane, cols.data() + n * k * p);
      // dweight[c, k] = sum_n dy_n[c, :] . col_n[k, :], summed over n in order.
      const T* pdy = as<T>(dy);
      T* pdw = as<T>(dweight);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t c = 0; c < s.out_channels; ++c) {
        T* row = pdw + c * k;
        std::fill(row, row + k, T(0));
        for (std::int64_t n = 0; n < s.batch; ++n) {
          const T* dy_row = pdy + (n * s.out_channels + c) * p;
          const T* col = cols.data() + n * k * p;
          for (std::int64_t kk = 0; kk < k; ++kk) row[kk] += dot(dy_row, col + kk * p, p);
        }
      }
    });
  }

  // ---- max-pool ----
  void max_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y, std::int64_t* indices) override {
    dispatch_float(dtype, "max_pool2d_forward", [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t oh_n = s.out_h(), ow_n = s.out_w(), planes = s.batch * s.channels;
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t plane = 0; plane < planes; ++plane) {
        const T* in = as<T>(x) + plane * s.in_h * s.in_w;
        T* out = as<T>(y) + plane * oh_n * ow_n;
        std::int64_t* idx = indices + plane * oh_n * ow_n;
        for (std::int64_t oh = 0; oh < oh_n; ++oh) {
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            T best = -std::numeric_limits<T>::infinity();
            std::int64_t best_index = -1;
            for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
              const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
              if (ih < 0 || ih >= s.in_h) continue;
              for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
                if (iw < 0 || iw >= s.in_w) continue;
                const T value = in[ih * s.in_w + iw];
                // The first maximum wins; a NaN wins over any number (it propagates, as in PyTorch).
                if (best_index < 0 || value > best || (std::isnan(value) && !std::isnan(best))) {
                  best = value;
                  best_index = ih * s.in_w + iw;
                }
              }
            }
            out[oh * ow_n + ow] = best;
            idx[oh * ow_n + ow] = best_index;
          }
        }
      }
    });
  }
  void max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* dy, const std::int64_t* indices,
                           void* dx) override {
    dispatch_float(dtype, "max_pool2d_backward", [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t out_plane = s.out_h() * s.out_w(), in_plane = s.in_h * s.in_w;
      const std::int64_t planes = s.batch * s.channels;
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t plane = 0; plane < planes; ++plane) {
        T* out = as<T>(dx) + plane * in_plane;
        std::fill(out, out + in_plane, T(0));
        const T* grad = as<T>(dy) + plane * out_plane;
        const std::int64_t* idx = indices + plane * out_plane;
        for (std::int64_t i = 0; i < out_plane; ++i) {
          if (idx[i] >= 0) out[idx[i]] += grad[i];
        }
      }
    });
  }

  // ---- softmax cross-entropy ----
  void softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                     std::int64_t classes, void* probs, void* loss) override {
    dispatch_float(dtype, "softmax_cross_entropy_forward", [&](auto tag) {
      using T = decltype(tag);
      const T* z = as<T>(logits);
      T* p = as<T>(probs);
      double total = 0;
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t label = labels[b];
        if (label < 0 || label >= classes) {
          throw Error("cross_entropy: label " + std::to_string(label) + " at batch index " + std::to_string(b) +
                      " is outside [0, " + std::to_string(classes) + ")");
        }
        const T* row = z + b * classes;
        T* prow = p + b * classes;
        // log softmax = (z - max) - log(sum exp(z - max)): never adds the max back, so large
        // logits lose no precision.
        const T max = *std::max_element(row, row + classes);
        T denom = 0;
        for (std::int64_t c = 0; c < classes; ++c) denom += std::exp(row[c] - max);
        const T log_denom = std::log(denom);
        for (std::int64_t c = 0; c < classes; ++c) prow[c] = std::exp((row[c] - max) - log_denom);
        total += static_cast<double>(log_denom - (row[label] - max));
      }
      *as<T>(loss) = static_cast<T>(total / static_cast<double>(batch));
    });
  }
  void softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, const void* dloss, void* dlogits) override {
    dispatch_float(dtype, "softmax_cross_entropy_backward", [&](auto tag) {
      using T = decltype(tag);
      const T scale = *as<T>(dloss) / static_cast<T>(batch);
      const T* p = as<T>(probs);
      T* g = as<T>(dlogits);
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t c = 0; c < classes; ++c) {
          g[b * classes + c] = (p[b * classes + c] - (c == labels[b] ? T(1) : T(0))) * scale;
        }
      }
    });
  }

  // ---- optimisers ----
  void sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer,
                const SgdStep& st) override {
    dispatch_float(dtype, "sgd_step", [&](auto tag) {
      using T = decltype(tag);
      T* w = as<T>(param);
      const T* g = as<T>(grad);
      T* buf = as<T>(momentum_buffer);
      const T lr = static_cast<T>(st.lr), mom = static_cast<T>(st.momentum), wd = static_cast<T>(st.weight_decay);
      const T damp = static_cast<T>(1.0 - st.dampening);
      for (std::int64_t i = 0; i < n; ++i) {
        T d = g[i];
        if (st.weight_decay != 0) d += wd * w[i];
        if (st.momentum != 0) {
          buf[i] = st.first_step ? d : mom * buf[i] + damp * d;
          d = st.nesterov ? d + mom * buf[i] : buf[i];
        }
        w[i] -= lr * d;
      }
    });
  }
  void adamw_step(DType dtype, std::int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  const AdamWStep& st) override {
    dispatch_float(dtype, "adamw_step", [&](auto tag) {
      using T = decltype(tag);
      T* w = as<T>(param);
      const T* g = as<T>(grad);
      T* m = as<T>(exp_avg);
      T* v = as<T>(exp_avg_sq);
      const double bias1 = 1.0 - std::pow(st.beta1, static_cast<double>(st.step));
      const double bias2 = 1.0 - std::pow(st.beta2, static_cast<double>(st.step));
      const T decay = static_cast<T>(1.0 - st.lr * st.weight_decay);
      const T b1 = static_cast<T>(st.beta1), b2 = static_cast<T>(st.beta2);
      const T step_size = static_cast<T>(st.lr / bias1);
      const T bias2_sqrt = static_cast<T>(std::sqrt(bias2));
      const T eps = static_cast<T>(st.eps);
      for (std::int64_t i = 0; i < n; ++i) {
        w[i] *= decay;
        m[i] = b1 * m[i] + (T(1) - b1) * g[i];
        v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
        const T denom = std::sqrt(v[i]) / bias2_sqrt + eps;
        w[i] -= step_size * m[i] / denom;
      }
    });
  }

 private:
  int threads_;
  std::atomic<std::int64_t> allocations_{0}, bytes_in_use_{0}, peak_bytes_{0};
};

const BackendRegistration registration{
    BackendInfo{"reference", "plain loops, f32/f64; the oracle every other backend is tested against", DeviceType::cpu,
                0},
    [] { return std::make_unique<ReferenceBackend>(); }};

}  // namespace
}  // namespace trainlab::reference
