#include "backends/cpu/cpu_backend.h"

#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/parallel_chunks.h"
#include "backends/cpu/simd.h"

namespace trainlab::cpu {

namespace {

class SteadyTimer final : public Timer {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  void stop() override { stop_ = std::chrono::steady_clock::now(); }
  double elapsed_s() override { return std::chrono::duration<double>(stop_ - start_).count(); }
  const char* kind() const override { return "steady_clock"; }

 private:
  std::chrono::steady_clock::time_point start_{}, stop_{};
};

// A batch of 2-D transposes: for each of `outer` offsets pairs, rows x cols elements with
// src[i + j * s_col] -> dst[i * d_row + j] (the source contiguous along i, the destination along j),
// in 16 x 16 tiles so that both sides touch whole cache lines. An NCHW <-> NHWC reorder is one.
template <typename E>
void transpose_tiles(const unsigned char* s, unsigned char* d, const std::vector<std::int64_t>& s_outer,
                     const std::vector<std::int64_t>& d_outer, std::int64_t rows, std::int64_t cols, std::int64_t s_col,
                     std::int64_t d_row, int threads, bool parallel) {
  constexpr std::int64_t tile = 16;
  const std::int64_t row_tiles = (rows + tile - 1) / tile;
  const auto count = static_cast<std::int64_t>(s_outer.size()) * row_tiles;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (std::int64_t t = 0; t < count; ++t) {
    const auto o = static_cast<std::size_t>(t / row_tiles);
    const std::int64_t i0 = (t % row_tiles) * tile, i1 = std::min(rows, i0 + tile);
    const E* src = reinterpret_cast<const E*>(s) + s_outer[o];
    E* dst = reinterpret_cast<E*>(d) + d_outer[o];
    for (std::int64_t j0 = 0; j0 < cols; j0 += tile) {
      const std::int64_t j1 = std::min(cols, j0 + tile);
      for (std::int64_t i = i0; i < i1; ++i)
        for (std::int64_t j = j0; j < j1; ++j) dst[i * d_row + j] = src[i + j * s_col];
    }
  }
}

// [rows][cols] 16-bit -> [cols][rows] (out[c * rows + r] = in[r * cols + c]): 8 x 8 tiles in SSE2
// registers (every x86-64 has them), the edges plain.
void transpose_u16(const std::uint16_t* in, std::uint16_t* out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (std::int64_t r = 0; r < rows8; r += 8) {
    for (std::int64_t c = 0; c < cols8; c += 8) {
      __m128i v[8];
      for (int i = 0; i < 8; ++i) v[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + (r + i) * cols + c));
      const __m128i a0 = _mm_unpacklo_epi16(v[0], v[1]), a1 = _mm_unpackhi_epi16(v[0], v[1]);
      const __m128i a2 = _mm_unpacklo_epi16(v[2], v[3]), a3 = _mm_unpackhi_epi16(v[2], v[3]);
      const __m128i a4 = _mm_unpacklo_epi16(v[4], v[5]), a5 = _mm_unpackhi_epi16(v[4], v[5]);
      const __m128i a6 = _mm_unpacklo_epi16(v[6], v[7]), a7 = _mm_unpackhi_epi16(v[6], v[7]);
      const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
      const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
      const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
      const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
      const __m128i t[8] = {_mm_unpacklo_epi64(b0, b4), _mm_unpackhi_epi64(b0, b4), _mm_unpacklo_epi64(b1, b5),
                            _mm_unpackhi_epi64(b1, b5), _mm_unpacklo_epi64(b2, b6), _mm_unpackhi_epi64(b2, b6),
                            _mm_unpacklo_epi64(b3, b7), _mm_unpackhi_epi64(b3, b7)};
      for (int i = 0; i < 8; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (c + i) * rows + r), t[i]);
    }
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = r < rows8 ? cols8 : 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

template <typename E>
void copy_elements(const unsigned char* s, std::int64_t s_stride, unsigned char* d, std::int64_t d_stride,
                   std::int64_t n) {
  const E* src = reinterpret_cast<const E*>(s);
  E* dst = reinterpret_cast<E*>(d);
  for (std::int64_t j = 0; j < n; ++j) dst[j * d_stride] = src[j * s_stride];
}

}  // namespace

CpuBackend::CpuBackend(std::string name, bool caching)
    : name_(std::move(name)), threads_(std::max(1, omp_get_max_threads())), allocator_(caching) {}

void CpuBackend::set_num_threads(int threads) {
  TL_CHECK(threads >= 1, "threads must be >= 1, got " + std::to_string(threads));
  threads_ = threads;
}

void CpuBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

std::unique_ptr<Timer> CpuBackend::make_timer() { return std::make_unique<SteadyTimer>(); }

std::string CpuBackend::isa() const { return cpu_isa_name(cpu_isa()); }

std::string CpuBackend::supported_dtypes() const {
  std::string out;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    if (supports(d)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  }
  return out;
}

OpSupport CpuBackend::supports_fused(const FusedPattern& pattern, DType dtype, bool channels_last,
                                     const FusedShapes& shapes) const {
  if (pattern == FusedPattern::pool_relu()) {
    const OpSupport pool = supports_op(BackendOp::max_pool2d, dtype, channels_last);
    if (!pool.runs()) return pool;
    return pool.level == Support::native ? OpSupport::native("the ReLU in the pool's own pass (shared CPU loops)")
                                         : pool;
  }
  return Backend::supports_fused(pattern, dtype, channels_last, shapes);
}

OpSupport CpuBackend::supports_op(BackendOp op, DType dtype, bool channels_last) const {
  if (!supports(dtype)) {
    return OpSupport::unsupported("backend '" + name_ + "' has no " + dtype_name(dtype) + " kernels (it runs " +
                                  supported_dtypes() + ")");
  }
  const bool full = dtype == DType::f32 || dtype == DType::f64;
  switch (op) {
    case BackendOp::linear:
    case BackendOp::conv2d:
      return matrix_op_support(op, dtype, channels_last);
    case BackendOp::matmul:  // through linear_forward
      return matrix_op_support(BackendOp::linear, dtype, false);
    case BackendOp::cross_entropy:
      return full ? OpSupport::native("shared CPU loops") : OpSupport::emulated("widened to f32 (shared CPU loops)");
    case BackendOp::optimizer:
      return full ? OpSupport::native("shared CPU loops")
                  : OpSupport::unsupported("optimiser state is f32 or f64 (mixed precision keeps f32 master weights)");
    case BackendOp::relu:
    case BackendOp::max_pool2d:
      return OpSupport::native(std::string("shared CPU loops, ") + cpu_isa_name(simd().isa) + " vector loops");
    case BackendOp::elementwise:
    case BackendOp::bias_add:
    case BackendOp::unscale:
    case BackendOp::batch_norm:
    case BackendOp::avg_pool:
    case BackendOp::dropout:
    case BackendOp::layer_norm:
    case BackendOp::gelu:
    case BackendOp::softmax:
    case BackendOp::embedding:
    case BackendOp::attention:
      return OpSupport::native("shared CPU loops");
  }
  return OpSupport::unsupported("unknown op");
}

// ---- elementwise ----

void CpuBackend::fill(DType dtype, void* y, std::int64_t n, double value) {
  dispatch_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = from_double<T>(value);
    parallel_chunks(n, threads_, [&](std::int64_t b, std::int64_t e) { std::fill(as<T>(y) + b, as<T>(y) + e, v); });
  });
}

void CpuBackend::copy_strided(DType dtype, const void* src, const Layout& src_layout, void* dst,
                              const Layout& dst_layout) {
  TL_CHECK(src_layout.shape == dst_layout.shape, "copy_strided: source and destination shapes differ");
  const auto elem = static_cast<std::int64_t>(dtype_size(dtype));
  const std::size_t rank = src_layout.shape.size();
  const std::int64_t numel = std::accumulate(src_layout.shape.begin(), src_layout.shape.end(), std::int64_t{1},
                                             std::multiplies<std::int64_t>());
  if (numel == 0) return;
  const auto* s = static_cast<const unsigned char*>(src) + src_layout.offset * elem;
  auto* d = static_cast<unsigned char*>(dst) + dst_layout.offset * elem;
  if (rank == 0) {
    std::memcpy(d, s, static_cast<std::size_t>(elem));
    return;
  }
  // Visit dimensions in the destination's memory order (largest stride first), so writes are
  // sequential; an NCHW <-> NHWC reorder then reads with a stride and writes straight through.
  std::vector<std::size_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return dst_layout.strides[a] > dst_layout.strides[b]; });
  // In that order, without the dimensions of size 1, and with neighbours that are contiguous with
  // each other in both layouts merged into one (an NCHW <-> NHWC reorder becomes [N, HW, C]).
  std::vector<std::int64_t> shape, s_strides, d_strides;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t n = src_layout.shape[order[i]], ss = src_layout.strides[order[i]],
                       ds = dst_layout.strides[order[i]];
    if (n == 1) continue;
    if (!shape.empty() && s_strides.back() == n * ss && d_strides.back() == n * ds) {
      shape.back() *= n;
      s_strides.back() = ss;
      d_strides.back() = ds;
      continue;
    }
    shape.push_back(n);
    s_strides.push_back(ss);
    d_strides.push_back(ds);
  }
  if (shape.empty()) {
    std::memcpy(d, s, static_cast<std::size_t>(elem));
    return;
  }
  if (transpose_copy(elem, s, shape, s_strides, d, d_strides)) return;
  const std::size_t rank_merged = shape.size();
  const std::int64_t inner = shape[rank_merged - 1];
  const std::int64_t s_inner = s_strides[rank_merged - 1], d_inner = d_strides[rank_merged - 1];
  const std::int64_t rows = numel / inner;
  auto copy_row = [&](std::int64_t row) {
    std::int64_t s_off = 0, d_off = 0, rest = row;
    for (std::size_t k = rank_merged - 1; k-- > 0;) {
      const std::int64_t i = rest % shape[k];
      rest /= shape[k];
      s_off += i * s_strides[k];
      d_off += i * d_strides[k];
    }
    const unsigned char* sp = s + s_off * elem;
    unsigned char* dp = d + d_off * elem;
    if (s_inner == 1 && d_inner == 1) {
      std::memcpy(dp, sp, static_cast<std::size_t>(inner * elem));
    } else if (elem == 2) {
      copy_elements<std::uint16_t>(sp, s_inner, dp, d_inner, inner);
    } else if (elem == 4) {
      copy_elements<std::uint32_t>(sp, s_inner, dp, d_inner, inner);
    } else {
      copy_elements<std::uint64_t>(sp, s_inner, dp, d_inner, inner);
    }
  };
  if (numel < kChunk) {
    for (std::int64_t r = 0; r < rows; ++r) copy_row(r);
  } else {
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) copy_row(r);
  }
}

bool CpuBackend::transpose_copy(std::int64_t elem, const unsigned char* s, const std::vector<std::int64_t>& shape,
                                const std::vector<std::int64_t>& s_strides, unsigned char* d,
                                const std::vector<std::int64_t>& d_strides) {
  // The destination contiguous along its last dimension, the source along another one (k).
  const std::size_t last = shape.size() - 1;
  if (d_strides[last] != 1 || s_strides[last] == 1) return false;
  std::size_t k = last;
  for (std::size_t i = 0; i < last; ++i)
    if (s_strides[i] == 1) k = i;
  if (k == last) return false;
  // Every other dimension's offsets, in order.
  std::vector<std::int64_t> s_outer{0}, d_outer{0};
  for (std::size_t i = 0; i < last; ++i) {
    if (i == k) continue;
    std::vector<std::int64_t> s_next, d_next;
    s_next.reserve(s_outer.size() * static_cast<std::size_t>(shape[i]));
    d_next.reserve(s_next.capacity());
    for (std::size_t o = 0; o < s_outer.size(); ++o)
      for (std::int64_t x = 0; x < shape[i]; ++x) {
        s_next.push_back(s_outer[o] + x * s_strides[i]);
        d_next.push_back(d_outer[o] + x * d_strides[i]);
      }
    s_outer = std::move(s_next);
    d_outer = std::move(d_next);
  }
  const bool parallel = static_cast<std::int64_t>(s_outer.size()) * shape[k] * shape[last] >= kChunk;
  if ((elem == 4 || elem == 2) && s_strides[last] == shape[k] && d_strides[k] == shape[last]) {
    // Dense blocks (an NCHW <-> NHWC reorder of a whole tensor): transposes in registers, a block
    // per sample (moves, bit for bit): f32 through this CPU's table, 16-bit types through SSE2.
    const auto blocks = static_cast<std::int64_t>(s_outer.size());
#pragma omp parallel for num_threads(threads_) schedule(static) if (parallel)
    for (std::int64_t o = 0; o < blocks; ++o) {
      const auto so = s_outer[static_cast<std::size_t>(o)], dof = d_outer[static_cast<std::size_t>(o)];
      if (elem == 4) {
        simd().transpose_f32(reinterpret_cast<const float*>(s) + so, reinterpret_cast<float*>(d) + dof, shape[last],
                             shape[k]);
      } else {
        transpose_u16(reinterpret_cast<const std::uint16_t*>(s) + so, reinterpret_cast<std::uint16_t*>(d) + dof,
                      shape[last], shape[k]);
      }
    }
    return true;
  }
  if (elem == 2) {
    transpose_tiles<std::uint16_t>(s, d, s_outer, d_outer, shape[k], shape[last], s_strides[last], d_strides[k],
                                   threads_, parallel);
  } else if (elem == 4) {
    transpose_tiles<std::uint32_t>(s, d, s_outer, d_outer, shape[k], shape[last], s_strides[last], d_strides[k],
                                   threads_, parallel);
  } else {
    transpose_tiles<std::uint64_t>(s, d, s_outer, d_outer, shape[k], shape[last], s_strides[last], d_strides[k],
                                   threads_, parallel);
  }
  return true;
}

void CpuBackend::cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n) {
  dispatch_storage(src_dtype, [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_storage(dst_dtype, [&](auto dst_tag) {
      using D = decltype(dst_tag);
      const S* in = as<S>(src);
      D* out = as<D>(dst);
      parallel_chunks(n, threads_, [&](std::int64_t b, std::int64_t e) {
        if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bf16>) {
          simd().f32_to_bf16(in + b, out + b, e - b);  // one rounding
        } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, f16>) {
          simd().f32_to_f16(in + b, out + b, e - b);
        } else if constexpr (std::is_same_v<S, bf16> && std::is_same_v<D, float>) {
          simd().bf16_to_f32(in + b, out + b, e - b);  // exact
        } else if constexpr (std::is_same_v<S, f16> && std::is_same_v<D, float>) {
          simd().f16_to_f32(in + b, out + b, e - b);
        } else {
          for (std::int64_t i = b; i < e; ++i) out[i] = from_double<D>(to_double(in[i]));
        }
      });
    });
  });
}

void CpuBackend::binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, std::int64_t n) {
  dispatch_floating(dtype, op_name("binary").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* pa = as<S>(a);
    const S* pb = as<S>(b);
    S* py = as<S>(y);
    auto apply = [&](auto f) {
      parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) py[i] = store<S>(f(load<C>(pa[i]), load<C>(pb[i])));
      });
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

void CpuBackend::affine(DType dtype, const void* x, void* y, std::int64_t n, double scale, double shift) {
  dispatch_floating(dtype, op_name("affine").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* px = as<S>(x);
    S* py = as<S>(y);
    const C a = static_cast<C>(scale), b = static_cast<C>(shift);
    parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) py[i] = store<S>(a * load<C>(px[i]) + b);
    });
  });
}

void CpuBackend::axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y) {
  dispatch_floating(dtype, op_name("axpy").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* px = as<S>(x);
    S* py = as<S>(y);
    const C a = static_cast<C>(alpha);
    parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) py[i] = store<S>(load<C>(py[i]) + a * load<C>(px[i]));
    });
  });
}

bool CpuBackend::unscale_and_check_finite(DType dtype, void* x, std::int64_t n, double inv_scale) {
  bool finite = true;
  dispatch_floating(dtype, op_name("unscale_and_check_finite").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    S* px = as<S>(x);
    const C s = static_cast<C>(inv_scale);
    for (std::int64_t i = 0; i < n; ++i) {
      const C v = load<C>(px[i]) * s;
      finite = finite && std::isfinite(static_cast<double>(v));
      px[i] = store<S>(v);
    }
  });
  return finite;
}

void CpuBackend::sum(DType dtype, const void* x, std::int64_t n, void* out) {
  dispatch_floating(dtype, op_name("sum").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* px = as<S>(x);
    // Fixed chunks, each summed with 16 lanes, then the chunk sums in order: the same result at
    // any thread count.
    const std::int64_t chunks = std::max<std::int64_t>(1, (n + kChunk - 1) / kChunk);
    std::vector<C> partials(static_cast<std::size_t>(chunks), C(0));
    parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
      constexpr int lanes = 16;
      C lane[lanes] = {};
      std::int64_t i = lo;
      for (; i + lanes <= hi; i += lanes) {
        for (int l = 0; l < lanes; ++l) lane[l] += load<C>(px[i + l]);
      }
      C total = 0;
      for (int l = 0; l < lanes; ++l) total += lane[l];
      for (; i < hi; ++i) total += load<C>(px[i]);
      partials[static_cast<std::size_t>(lo / kChunk)] = total;
    });
    C total = 0;
    for (C p : partials) total += p;
    *as<S>(out) = store<S>(total);
  });
}

// ---- relu ----

void CpuBackend::relu_forward(DType dtype, const void* x, void* y, std::int64_t n) {
  dispatch_floating(dtype, op_name("relu_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    const S* px = as<S>(x);
    S* py = as<S>(y);
    // The pointers are captured by value: captured by reference, every store through py could
    // alias them, and the loop would reload them instead of vectorising.
    parallel_chunks(n, threads_, [px, py](std::int64_t lo, std::int64_t hi) { relu_run(px + lo, py + lo, hi - lo); });
  });
}

void CpuBackend::relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n) {
  dispatch_floating(dtype, op_name("relu_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    const S* py = as<S>(y);
    const S* pdy = as<S>(dy);
    S* pdx = as<S>(dx);
    parallel_chunks(n, threads_, [py, pdy, pdx](std::int64_t lo, std::int64_t hi) {
      if constexpr (std::is_same_v<S, float>) {
        simd().relu_backward_f32(py + lo, pdy + lo, pdx + lo, hi - lo);
      } else if constexpr (std::is_same_v<S, bf16>) {
        simd().relu_backward_bf16(py + lo, pdy + lo, pdx + lo, hi - lo);
      } else if constexpr (std::is_same_v<S, f16>) {
        simd().relu_backward_f16(py + lo, pdy + lo, pdx + lo, hi - lo);
      } else {
        // PyTorch's threshold_backward on the result: zero where y <= 0, the gradient elsewhere.
        for (std::int64_t i = lo; i < hi; ++i) pdx[i] = py[i] <= S(0) ? S(0) : pdy[i];
      }
    });
  });
}

// ---- bias add ----

void CpuBackend::bias_add_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer,
                                  std::int64_t channels, std::int64_t inner) {
  dispatch_floating(dtype, op_name("bias_add_forward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* px = as<S>(x);
    const S* pb = as<S>(bias);
    S* py = as<S>(y);
    std::vector<C> b(static_cast<std::size_t>(channels));
    for (std::int64_t c = 0; c < channels; ++c) b[static_cast<std::size_t>(c)] = load<C>(pb[c]);
    if constexpr (std::is_same_v<S, bf16> || std::is_same_v<S, f16>) {
      if (inner == 1) {  // rows of `channels` (a linear layer's [N, out]): widened, added, narrowed a row at a time
#pragma omp parallel num_threads(threads_) if (outer * channels >= kChunk)
        {
          std::vector<float> row(static_cast<std::size_t>(channels));
#pragma omp for schedule(static)
          for (std::int64_t o = 0; o < outer; ++o) {
            widen_run(px + o * channels, row.data(), channels);
            for (std::int64_t c = 0; c < channels; ++c)
              row[static_cast<std::size_t>(c)] += b[static_cast<std::size_t>(c)];
            narrow_run(row.data(), py + o * channels, channels);
          }
        }
        return;
      }
    }
    if (inner == 1) {  // rows of `channels`, added as vectors
#pragma omp parallel for num_threads(threads_) schedule(static) if (outer * channels >= kChunk)
      for (std::int64_t o = 0; o < outer; ++o) {
        const S* xr = px + o * channels;
        S* yr = py + o * channels;
        const C* br = b.data();
        for (std::int64_t c = 0; c < channels; ++c) yr[c] = store<S>(load<C>(xr[c]) + br[c]);
      }
      return;
    }
#pragma omp parallel for num_threads(threads_) schedule(static) if (outer * channels * inner >= kChunk)
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t base = (o * channels + c) * inner;
        const C bc = b[static_cast<std::size_t>(c)];
        for (std::int64_t i = 0; i < inner; ++i) py[base + i] = store<S>(load<C>(px[base + i]) + bc);
      }
    }
  });
}

void CpuBackend::bias_add_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                                   std::int64_t inner) {
  dispatch_floating(dtype, op_name("bias_add_backward").c_str(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* g = as<S>(dy);
    S* db = as<S>(dbias);
    if (inner > 1) {
      // NCHW: each channel's rows are contiguous.
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::int64_t c = 0; c < channels; ++c) {
        C total = 0;
        for (std::int64_t o = 0; o < outer; ++o) {
          const S* row = g + (o * channels + c) * inner;
          for (std::int64_t i = 0; i < inner; ++i) total += load<C>(row[i]);
        }
        db[c] = store<S>(total);
      }
      return;
    }
    // Channels innermost ([rows, channels]): fixed blocks of rows add whole rows into a partial
    // vector, then the partials are added in block order.
    constexpr std::int64_t block = 256;
    const std::int64_t blocks = (outer + block - 1) / block;
    std::vector<C> partials(static_cast<std::size_t>(blocks * channels), C(0));
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      C* part = partials.data() + blk * channels;
      for (std::int64_t o = blk * block; o < std::min(outer, (blk + 1) * block); ++o) {
        const S* row = g + o * channels;
        for (std::int64_t c = 0; c < channels; ++c) part[c] += load<C>(row[c]);
      }
    }
    for (std::int64_t c = 0; c < channels; ++c) {
      C total = 0;
      for (std::int64_t blk = 0; blk < blocks; ++blk) total += partials[static_cast<std::size_t>(blk * channels + c)];
      db[c] = store<S>(total);
    }
  });
}

// ---- softmax cross-entropy ----

void CpuBackend::softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels,
                                               std::int64_t batch, std::int64_t classes, void* probs, void* loss) {
  dispatch_floating(dtype, op_name("softmax_cross_entropy_forward").c_str(), [&](auto tag) {
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

void CpuBackend::softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels,
                                                std::int64_t batch, std::int64_t classes, const void* dloss,
                                                void* dlogits) {
  dispatch_floating(dtype, op_name("softmax_cross_entropy_backward").c_str(), [&](auto tag) {
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

}  // namespace trainlab::cpu
