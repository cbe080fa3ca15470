// The reference backend: plain loops for every op. It is slow on purpose only in the sense of
// being obvious; loop orders still let -O3 vectorise, and OpenMP splits work so that every output
// element is computed in the same order whatever the thread count (results are bit-identical at 1
// or N threads). Every other backend is tested against it.
//
// Every layer kernel is one NCHW loop nest in a compute type C: f32 for f32, bf16 and f16 data,
// f64 for f64. Staging (below) widens bf16/f16 inputs to f32 and reorders channels-last inputs to
// NCHW in scratch buffers, then narrows and reorders the outputs back, so the oracle covers every
// dtype and layout with the same loops, and accumulates in f32 for the half types as the fast
// backends do.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/backend.h"
#include "backends/error.h"
#include "backends/reference/gemm.h"
#include "backends/registry.h"

namespace trainlab::reference {
namespace {

// ---------------------------------------------------------------------------------------------
// types

template <typename S>
constexpr bool is_half = std::is_same_v<S, bf16> || std::is_same_v<S, f16>;

// The type arithmetic on storage type S happens in.
template <typename S>
using compute_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

template <typename C, typename S>
inline C load(S value) {
  if constexpr (is_half<S>) {
    return static_cast<C>(static_cast<float>(value));
  } else {
    return static_cast<C>(value);
  }
}

template <typename S, typename C>
inline S store(C value) {
  if constexpr (is_half<S>) {
    return S(static_cast<float>(value));
  } else {
    return static_cast<S>(value);
  }
}

[[noreturn]] void unsupported(const char* op, DType dtype, const char* supported) {
  throw Error(std::string("reference backend: ") + op + " does not support dtype " + dtype_name(dtype) +
              " (supported: " + supported + ")");
}

// fn(S{}) for the floating storage types.
template <typename Fn>
void dispatch_floating(DType dtype, const char* op, Fn&& fn) {
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
    default:
      unsupported(op, dtype, "f32, f64, bf16, f16");
  }
}

// fn(T{}) for f32 and f64 only (optimiser state is never half precision).
template <typename Fn>
void dispatch_full(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f64:
      fn(double{});
      return;
    default:
      unsupported(op, dtype, "f32, f64");
  }
}

// fn(T{}) for every storage type.
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
  if constexpr (is_half<T>) {
    return static_cast<double>(static_cast<float>(value));
  } else {
    return static_cast<double>(value);
  }
}

// f64 -> bf16/f16 goes through f32 (two roundings); f32 -> bf16/f16 rounds once, to nearest even.
template <typename T>
T from_double(double value) {
  if constexpr (is_half<T>) {
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

// ---------------------------------------------------------------------------------------------
// staging: storage type S and layout -> NCHW compute type C, and back

// [N, C, H, W] dims of a 4-D activation.
struct Dims4 {
  std::int64_t n, c, h, w;
  std::int64_t numel() const { return n * c * h * w; }
};

template <typename S, typename C>
class Stage {
 public:
  // A read-only input of n elements; 4-D activations given as NHWC come back as NCHW.
  const C* input(const void* src, std::int64_t n) {
    if constexpr (std::is_same_v<S, C>) return as<C>(src);
    auto& buf = buffers_.emplace_back(static_cast<std::size_t>(n));
    const S* s = as<S>(src);
    for (std::int64_t i = 0; i < n; ++i) buf[static_cast<std::size_t>(i)] = load<C>(s[i]);
    return buf.data();
  }
  const C* input(const void* src, const Dims4& d, bool channels_last) {
    if (!channels_last) return input(src, d.numel());
    auto& buf = buffers_.emplace_back(static_cast<std::size_t>(d.numel()));
    const S* s = as<S>(src);
    for (std::int64_t n = 0; n < d.n; ++n)
      for (std::int64_t c = 0; c < d.c; ++c)
        for (std::int64_t p = 0; p < d.h * d.w; ++p)
          buf[static_cast<std::size_t>((n * d.c + c) * d.h * d.w + p)] = load<C>(s[(n * d.h * d.w + p) * d.c + c]);
    return buf.data();
  }
  // An output; written back to `dst` (narrowed, reordered) by finish().
  C* output(void* dst, std::int64_t n) { return output(dst, Dims4{1, 1, 1, n}, false); }
  C* output(void* dst, const Dims4& d, bool channels_last) {
    if constexpr (std::is_same_v<S, C>) {
      if (!channels_last) return as<C>(dst);
    }
    auto& buf = buffers_.emplace_back(static_cast<std::size_t>(d.numel()));
    pending_.push_back({dst, &buf, d, channels_last});
    return buf.data();
  }
  void finish() {
    for (const auto& p : pending_) {
      S* out = as<S>(p.dst);
      const auto& buf = *p.buffer;
      const Dims4& d = p.dims;
      if (!p.channels_last) {
        for (std::int64_t i = 0; i < d.numel(); ++i) out[i] = store<S>(buf[static_cast<std::size_t>(i)]);
        continue;
      }
      for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t c = 0; c < d.c; ++c)
          for (std::int64_t q = 0; q < d.h * d.w; ++q)
            out[(n * d.h * d.w + q) * d.c + c] = store<S>(buf[static_cast<std::size_t>((n * d.c + c) * d.h * d.w + q)]);
    }
    pending_.clear();
  }

 private:
  struct Pending {
    void* dst;
    std::vector<C>* buffer;
    Dims4 dims;
    bool channels_last;
  };
  std::deque<std::vector<C>> buffers_;  // a deque: pending outputs point at its elements
  std::vector<Pending> pending_;
};

// ---------------------------------------------------------------------------------------------
// NCHW kernels in the compute type

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

template <typename T>
void relu_in_place(T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] > T(0) ? y[i] : T(0);
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

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend() : threads_(std::max(1, omp_get_max_threads())) {}

  std::string name() const override { return "reference"; }
  DeviceType device_type() const override { return DeviceType::cpu; }
  bool supports(DType dtype) const override { return dtype != DType::i64; }
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
      if (s_inner == 1 && d_inner == 1) {
        std::memcpy(d + d_off * elem, s + s_off * elem, static_cast<std::size_t>(inner) * elem);
      } else {
        for (std::int64_t j = 0; j < inner; ++j) {
          std::memcpy(d + (d_off + j * d_inner) * elem, s + (s_off + j * s_inner) * elem, elem);
        }
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
        if constexpr (std::is_same_v<S, float> && is_half<D>) {
          for (std::int64_t i = 0; i < n; ++i) out[i] = D(in[i]);  // one rounding
        } else if constexpr (is_half<S> && std::is_same_v<D, float>) {
          for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);  // exact
        } else {
          for (std::int64_t i = 0; i < n; ++i) out[i] = from_double<D>(to_double(in[i]));
        }
      });
    });
  }

  void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, std::int64_t n) override {
    dispatch_floating(dtype, "binary", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const S* pa = as<S>(a);
      const S* pb = as<S>(b);
      S* py = as<S>(y);
      auto apply = [&](auto f) {
        for (std::int64_t i = 0; i < n; ++i) py[i] = store<S>(f(load<C>(pa[i]), load<C>(pb[i])));
      };
      switch (op) {
        case BinaryOp::add:
          apply([](C u, C v) { return u + v; });
          break;
        case BinaryOp::sub:
          apply([](C u, C v) { return u - v; });
          break;
        case BinaryOp::mul:
          apply([](C u, C v) { return u * v; });
          break;
        case BinaryOp::div:
          apply([](C u, C v) { return u / v; });
          break;
      }
    });
  }

  void affine(DType dtype, const void* x, void* y, std::int64_t n, double scale, double shift) override {
    dispatch_floating(dtype, "affine", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const S* px = as<S>(x);
      S* py = as<S>(y);
      const C a = static_cast<C>(scale), b = static_cast<C>(shift);
      for (std::int64_t i = 0; i < n; ++i) py[i] = store<S>(a * load<C>(px[i]) + b);
    });
  }

  void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y) override {
    dispatch_floating(dtype, "axpy", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const S* px = as<S>(x);
      S* py = as<S>(y);
      const C a = static_cast<C>(alpha);
      for (std::int64_t i = 0; i < n; ++i) py[i] = store<S>(load<C>(py[i]) + a * load<C>(px[i]));
    });
  }

  void sum(DType dtype, const void* x, std::int64_t n, void* out) override {
    dispatch_floating(dtype, "sum", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      constexpr int lanes = 16;
      const S* px = as<S>(x);
      C partial[lanes] = {};
      std::int64_t i = 0;
      for (; i + lanes <= n; i += lanes) {
        for (int l = 0; l < lanes; ++l) partial[l] += load<C>(px[i + l]);
      }
      C total = 0;
      for (int l = 0; l < lanes; ++l) total += partial[l];
      for (; i < n; ++i) total += load<C>(px[i]);
      *as<S>(out) = store<S>(total);
    });
  }

  // ---- relu ----
  void relu_forward(DType dtype, const void* x, void* y, std::int64_t n) override {
    dispatch_floating(dtype, "relu_forward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const S* px = as<S>(x);
      S* py = as<S>(y);
      for (std::int64_t i = 0; i < n; ++i) py[i] = load<C>(px[i]) > C(0) ? px[i] : store<S>(C(0));
    });
  }
  void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n) override {
    dispatch_floating(dtype, "relu_backward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const S* py = as<S>(y);
      const S* pdy = as<S>(dy);
      S* pdx = as<S>(dx);
      for (std::int64_t i = 0; i < n; ++i) pdx[i] = load<C>(py[i]) > C(0) ? pdy[i] : store<S>(C(0));
    });
  }

  // ---- bias add ----
  void bias_add_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer,
                        std::int64_t channels, std::int64_t inner) override {
    dispatch_floating(dtype, "bias_add_forward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const S* px = as<S>(x);
      const S* pb = as<S>(bias);
      S* py = as<S>(y);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t c = 0; c < channels; ++c) {
          const std::int64_t base = (o * channels + c) * inner;
          const C b = load<C>(pb[c]);
          for (std::int64_t i = 0; i < inner; ++i) py[base + i] = store<S>(load<C>(px[base + i]) + b);
        }
      }
    });
  }
  void bias_add_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                         std::int64_t inner) override {
    dispatch_floating(dtype, "bias_add_backward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      Stage<S, C> st;
      const C* g = st.input(dy, outer * channels * inner);
      channel_sums(g, st.output(dbias, channels), outer, channels, inner, threads_);
      st.finish();
    });
  }

  // ---- linear ----
  void linear_forward(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                      std::int64_t batch, std::int64_t in_features, std::int64_t out_features) override {
    dispatch_floating(dtype, "linear_forward", [&](auto tag) {
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
          if (relu) v = v > C(0) ? v : C(0);
          py[b * out_features + o] = v;
        }
      }
      st.finish();
    });
  }
  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in_features, std::int64_t out_features) override {
    dispatch_floating(dtype, "linear_backward_data", [&](auto tag) {
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
    dispatch_floating(dtype, "linear_backward_weights", [&](auto tag) {
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
    dispatch_floating(dtype, "conv2d_forward", [&](auto tag) {
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
    dispatch_floating(dtype, "conv2d_backward_data", [&](auto tag) {
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
    dispatch_floating(dtype, "conv2d_backward_weights", [&](auto tag) {
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

  // ---- max-pool: the workspace holds, per output, the argmax's offset in its NCHW input plane ----
  std::size_t max_pool2d_workspace_bytes(DType, const Pool2dShape& s) override {
    return static_cast<std::size_t>(s.batch * s.channels * s.out_h() * s.out_w()) * sizeof(std::int64_t);
  }
  void max_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y, void* workspace) override {
    dispatch_floating(dtype, "max_pool2d_forward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const std::int64_t oh_n = s.out_h(), ow_n = s.out_w(), planes = s.batch * s.channels;
      Stage<S, C> st;
      const C* px = st.input(x, Dims4{s.batch, s.channels, s.in_h, s.in_w}, s.channels_last);
      C* py = st.output(y, Dims4{s.batch, s.channels, oh_n, ow_n}, s.channels_last);
      auto* indices = as<std::int64_t>(workspace);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t plane = 0; plane < planes; ++plane) {
        const C* in = px + plane * s.in_h * s.in_w;
        C* out = py + plane * oh_n * ow_n;
        std::int64_t* idx = indices + plane * oh_n * ow_n;
        for (std::int64_t oh = 0; oh < oh_n; ++oh) {
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            C best = -std::numeric_limits<C>::infinity();
            std::int64_t best_index = -1;
            for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
              const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
              if (ih < 0 || ih >= s.in_h) continue;
              for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
                if (iw < 0 || iw >= s.in_w) continue;
                const C value = in[ih * s.in_w + iw];
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
      st.finish();
    });
  }
  void max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* dy, const void* workspace,
                           void* dx) override {
    dispatch_floating(dtype, "max_pool2d_backward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      const std::int64_t out_plane = s.out_h() * s.out_w(), in_plane = s.in_h * s.in_w;
      const std::int64_t planes = s.batch * s.channels;
      Stage<S, C> st;
      const C* pdy = st.input(dy, Dims4{s.batch, s.channels, s.out_h(), s.out_w()}, s.channels_last);
      C* pdx = st.output(dx, Dims4{s.batch, s.channels, s.in_h, s.in_w}, s.channels_last);
      const auto* indices = as<std::int64_t>(workspace);
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t plane = 0; plane < planes; ++plane) {
        C* out = pdx + plane * in_plane;
        std::fill(out, out + in_plane, C(0));
        const C* grad = pdy + plane * out_plane;
        const std::int64_t* idx = indices + plane * out_plane;
        for (std::int64_t i = 0; i < out_plane; ++i) {
          if (idx[i] >= 0) out[idx[i]] += grad[i];
        }
      }
      st.finish();
    });
  }

  // ---- softmax cross-entropy ----
  void softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                     std::int64_t classes, void* probs, void* loss) override {
    dispatch_floating(dtype, "softmax_cross_entropy_forward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      Stage<S, C> st;
      const C* z = st.input(logits, batch * classes);
      C* p = st.output(probs, batch * classes);
      double total = 0;
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t label = labels[b];
        if (label < 0 || label >= classes) {
          throw Error("cross_entropy: label " + std::to_string(label) + " at batch index " + std::to_string(b) +
                      " is outside [0, " + std::to_string(classes) + ")");
        }
        const C* row = z + b * classes;
        C* prow = p + b * classes;
        // log softmax = (z - max) - log(sum exp(z - max)): never adds the max back, so large
        // logits lose no precision.
        const C max = *std::max_element(row, row + classes);
        C denom = 0;
        for (std::int64_t c = 0; c < classes; ++c) denom += std::exp(row[c] - max);
        const C log_denom = std::log(denom);
        for (std::int64_t c = 0; c < classes; ++c) prow[c] = std::exp((row[c] - max) - log_denom);
        total += static_cast<double>(log_denom - (row[label] - max));
      }
      *as<S>(loss) = store<S>(static_cast<C>(total / static_cast<double>(batch)));
      st.finish();
    });
  }
  void softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, const void* dloss, void* dlogits) override {
    dispatch_floating(dtype, "softmax_cross_entropy_backward", [&](auto tag) {
      using S = decltype(tag);
      using C = compute_t<S>;
      Stage<S, C> st;
      const C* p = st.input(probs, batch * classes);
      C* g = st.output(dlogits, batch * classes);
      const C scale = load<C>(*as<S>(dloss)) / static_cast<C>(batch);
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t c = 0; c < classes; ++c) {
          g[b * classes + c] = (p[b * classes + c] - (c == labels[b] ? C(1) : C(0))) * scale;
        }
      }
      st.finish();
    });
  }

  // ---- optimisers ----
  void sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer,
                const SgdStep& st) override {
    dispatch_full(dtype, "sgd_step", [&](auto tag) {
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
    dispatch_full(dtype, "adamw_step", [&](auto tag) {
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
    BackendInfo{"reference",
                "plain loops in f32/f64 (bf16/f16 computed in f32), NCHW and channels-last; the oracle every "
                "other backend is tested against",
                DeviceType::cpu, 0},
    [] { return std::make_unique<ReferenceBackend>(); }};

}  // namespace
}  // namespace trainlab::reference
