// Winograd F(4x4, 3x3) for 3x3 convolutions of stride 1 and padding 1 (backends/cpu/conv_winograd.h).
//
// Per chunk of kChunkTiles tiles, on one thread: the inputs' transform V[36][tile][in] (B^T d B,
// eight channels at a time), 36 products M[c] = V[c] . U[c] (a 6-tile x 16-channel register block,
// one fused multiply-add per term), the outputs' transform (A^T m A) with the bias and the ReLU,
// written straight into y. The matrices are Lavin and Gray's, interpolation points 0, +-1, +-2, inf.
#include "backends/cpu/conv_winograd.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "backends/cpu/simd.h"
#include "backends/error.h"

namespace trainlab::cpu::winograd {

namespace {

constexpr int kRows = 6;                  // tiles per register block of the products
constexpr std::int64_t kChunkTiles = 24;  // tiles per chunk: a multiple of kRows
constexpr std::size_t kAlignFloats = 16;  // each thread's workspace starts on a 64-byte line

using V8 = __m256;

V8 splat(float v) { return _mm256_set1_ps(v); }

// B^T over one column (or row) of a 6x6 patch.
void input_1d(const V8 (&a)[kPatch], V8 (&r)[kPatch]) {
  const V8 two = splat(2.f), four = splat(4.f), five = splat(5.f);
  r[0] = four * a[0] - five * a[2] + a[4];
  r[1] = (a[3] + a[4]) - four * (a[1] + a[2]);
  r[2] = four * (a[1] - a[2]) + (a[4] - a[3]);
  r[3] = two * (a[3] - a[1]) + (a[4] - a[2]);
  r[4] = two * (a[1] - a[3]) + (a[4] - a[2]);
  r[5] = four * a[1] - five * a[3] + a[5];
}

// A^T over one column (or row) of a 6x6 product: four outputs.
void output_1d(const V8 (&m)[kPatch], V8 (&o)[kTile]) {
  const V8 two = splat(2.f), four = splat(4.f), eight = splat(8.f);
  const V8 sum12 = m[1] + m[2], diff12 = m[1] - m[2], sum34 = m[3] + m[4], diff34 = m[3] - m[4];
  o[0] = m[0] + sum12 + sum34;
  o[1] = diff12 + two * diff34;
  o[2] = sum12 + four * sum34;
  o[3] = diff12 + eight * diff34 + m[5];
}

// A over four values of dy (one column, or row, of a 4x4 tile): six.
void gradient_1d(const V8 (&y)[kTile], V8 (&r)[kPatch]) {
  const V8 two = splat(2.f), four = splat(4.f), eight = splat(8.f);
  const V8 even = y[0] + y[2], odd = y[1] + y[3], even4 = y[0] + four * y[2], odd2 = two * y[1] + eight * y[3];
  r[0] = y[0];
  r[1] = even + odd;
  r[2] = even - odd;
  r[3] = even4 + odd2;
  r[4] = even4 - odd2;
  r[5] = y[3];
}

struct Geometry {
  std::int64_t h, w, in, out, tiles_h, tiles_w;
};

// V[36][kChunkTiles][in] of the tiles first .. first + count.
void transform_inputs(const float* x, const Geometry& g, std::int64_t first, std::int64_t count, float* v) {
  const std::int64_t per_image = g.tiles_h * g.tiles_w;
  for (std::int64_t t = 0; t < count; ++t) {
    const std::int64_t tile = first + t, n = tile / per_image;
    const std::int64_t y0 = (tile % per_image) / g.tiles_w * kTile - 1, x0 = tile % g.tiles_w * kTile - 1;
    const float* image = x + n * g.h * g.w * g.in;
    for (std::int64_t c = 0; c < g.in; c += 8) {
      V8 d[kPatch][kPatch];
      for (int i = 0; i < kPatch; ++i) {
        const std::int64_t row = y0 + i;
        for (int j = 0; j < kPatch; ++j) {
          const std::int64_t col = x0 + j;
          d[i][j] = row >= 0 && row < g.h && col >= 0 && col < g.w
                        ? _mm256_loadu_ps(image + (row * g.w + col) * g.in + c)
                        : _mm256_setzero_ps();
        }
      }
      V8 columns[kPatch][kPatch];  // [j][i]: B^T d, column j
      for (int j = 0; j < kPatch; ++j) {
        V8 column[kPatch], r[kPatch];
        for (int i = 0; i < kPatch; ++i) column[i] = d[i][j];
        input_1d(column, r);
        for (int i = 0; i < kPatch; ++i) columns[j][i] = r[i];
      }
      for (int i = 0; i < kPatch; ++i) {
        V8 row[kPatch], r[kPatch];
        for (int j = 0; j < kPatch; ++j) row[j] = columns[j][i];
        input_1d(row, r);
        for (int j = 0; j < kPatch; ++j) _mm256_storeu_ps(v + ((i * kPatch + j) * kChunkTiles + t) * g.in + c, r[j]);
      }
    }
  }
}

// c[r][0 .. 8 * NV) (+)= sum over d of a[r * a_row + d * a_depth] * b[d * ldb + 0 .. 8 * NV), r < R:
// one fused multiply-add per term in order of d, from +0 or (Accumulate) from c's values (the same
// bits for a row whatever block it is computed in).
template <int R, int NV, bool Accumulate>
void block(const float* a, std::int64_t a_row, std::int64_t a_depth, const float* b, std::int64_t ldb,
           std::int64_t depth, float* c, std::int64_t ldc) {
  V8 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) acc[r][j] = Accumulate ? _mm256_loadu_ps(c + r * ldc + 8 * j) : _mm256_setzero_ps();
  for (std::int64_t d = 0; d < depth; ++d) {
    V8 bv[NV];
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) bv[j] = _mm256_loadu_ps(b + d * ldb + 8 * j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V8 av = _mm256_broadcast_ss(a + r * a_row + d * a_depth);
#pragma GCC unroll 2
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm256_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(c + r * ldc + 8 * j, acc[r][j]);
}

// The product of `rows` (1 .. kRows) rows of a and the columns of b, in register blocks of 16 and
// then 8 columns (columns a multiple of 8).
template <bool Accumulate>
void product(int rows, const float* a, std::int64_t a_row, std::int64_t a_depth, const float* b, std::int64_t ldb,
             std::int64_t depth, float* c, std::int64_t ldc, std::int64_t columns) {
  auto run = [&](auto nv, std::int64_t o) {
    constexpr int NV = decltype(nv)::value;
    switch (rows) {
      case 6:
        return block<6, NV, Accumulate>(a, a_row, a_depth, b + o, ldb, depth, c + o, ldc);
      case 5:
        return block<5, NV, Accumulate>(a, a_row, a_depth, b + o, ldb, depth, c + o, ldc);
      case 4:
        return block<4, NV, Accumulate>(a, a_row, a_depth, b + o, ldb, depth, c + o, ldc);
      case 3:
        return block<3, NV, Accumulate>(a, a_row, a_depth, b + o, ldb, depth, c + o, ldc);
      case 2:
        return block<2, NV, Accumulate>(a, a_row, a_depth, b + o, ldb, depth, c + o, ldc);
      default:
        return block<1, NV, Accumulate>(a, a_row, a_depth, b + o, ldb, depth, c + o, ldc);
    }
  };
  std::int64_t o = 0;
  for (; o + 16 <= columns; o += 16) run(std::integral_constant<int, 2>{}, o);
  if (o < columns) run(std::integral_constant<int, 1>{}, o);
}

// M[36][kChunkTiles][out] = V[c] . U[c] for the chunk's `count` tiles.
void multiply(const float* v, const float* u, const Geometry& g, std::int64_t count, float* m) {
  for (int component = 0; component < kComponents; ++component) {
    const float* a = v + component * kChunkTiles * g.in;
    const float* b = u + component * g.in * g.out;
    float* c = m + component * kChunkTiles * g.out;
    for (std::int64_t r = 0; r < count; r += kRows) {
      const int rows = static_cast<int>(std::min<std::int64_t>(kRows, count - r));
      product<false>(rows, a + r * g.in, g.in, 1, b, g.out, g.in, c + r * g.out, g.out, g.out);
    }
  }
}

// y's outputs of the chunk's tiles from M: A^T m A, the bias, the ReLU (a NaN passes); whether
// every output before the ReLU is finite.
bool transform_outputs(const float* m, const Geometry& g, std::int64_t first, std::int64_t count, const float* bias,
                       bool relu, float* y) {
  const std::int64_t per_image = g.tiles_h * g.tiles_w;
  const V8 zero = _mm256_setzero_ps();
  V8 odd = zero;  // lanes where some output before the ReLU was NaN or infinite (v - v is NaN there)
  for (std::int64_t t = 0; t < count; ++t) {
    const std::int64_t tile = first + t, n = tile / per_image;
    const std::int64_t y0 = (tile % per_image) / g.tiles_w * kTile, x0 = tile % g.tiles_w * kTile;
    float* image = y + n * g.h * g.w * g.out;
    for (std::int64_t o = 0; o < g.out; o += 8) {
      V8 columns[kPatch][kTile];  // [j][a]: A^T m, column j
      for (int j = 0; j < kPatch; ++j) {
        V8 column[kPatch], r[kTile];
        for (int i = 0; i < kPatch; ++i)
          column[i] = _mm256_loadu_ps(m + ((i * kPatch + j) * kChunkTiles + t) * g.out + o);
        output_1d(column, r);
        for (int a = 0; a < kTile; ++a) columns[j][a] = r[a];
      }
      const V8 shift = bias != nullptr ? _mm256_loadu_ps(bias + o) : zero;
      for (int a = 0; a < kTile && y0 + a < g.h; ++a) {
        V8 row[kPatch], r[kTile];
        for (int j = 0; j < kPatch; ++j) row[j] = columns[j][a];
        output_1d(row, r);
        for (int b = 0; b < kTile && x0 + b < g.w; ++b) {
          V8 value = r[b] + shift;
          odd = _mm256_or_ps(odd, _mm256_cmp_ps(_mm256_sub_ps(value, value), zero, _CMP_UNORD_Q));
          if (relu) value = _mm256_andnot_ps(_mm256_cmp_ps(value, zero, _CMP_LE_OQ), value);
          _mm256_storeu_ps(image + ((y0 + a) * g.w + x0 + b) * g.out + o, value);
        }
      }
    }
  }
  return _mm256_movemask_ps(odd) == 0;
}

// D[36][kChunkTiles][out] = A dy A^T of the chunk's tiles (dy beyond the image is 0), and each
// tile's 16 dy added, in order, to bias_sum [out] when it is not null.
void transform_gradients(const float* dy, const Geometry& g, std::int64_t first, std::int64_t count, float* grad,
                         float* bias_sum) {
  const std::int64_t per_image = g.tiles_h * g.tiles_w;
  for (std::int64_t t = 0; t < count; ++t) {
    const std::int64_t tile = first + t, n = tile / per_image;
    const std::int64_t y0 = (tile % per_image) / g.tiles_w * kTile, x0 = tile % g.tiles_w * kTile;
    const float* image = dy + n * g.h * g.w * g.out;
    for (std::int64_t o = 0; o < g.out; o += 8) {
      V8 d[kTile][kTile];
      V8 sum = _mm256_setzero_ps();
      for (int a = 0; a < kTile; ++a) {
        for (int b = 0; b < kTile; ++b) {
          d[a][b] = y0 + a < g.h && x0 + b < g.w ? _mm256_loadu_ps(image + ((y0 + a) * g.w + x0 + b) * g.out + o)
                                                 : _mm256_setzero_ps();
          sum = sum + d[a][b];
        }
      }
      if (bias_sum != nullptr) _mm256_storeu_ps(bias_sum + o, _mm256_loadu_ps(bias_sum + o) + sum);
      V8 columns[kTile][kPatch];  // [b][i]: A dy, column b
      for (int b = 0; b < kTile; ++b) {
        V8 column[kTile];
        for (int a = 0; a < kTile; ++a) column[a] = d[a][b];
        gradient_1d(column, columns[b]);
      }
      for (int i = 0; i < kPatch; ++i) {
        V8 row[kTile], r[kPatch];
        for (int b = 0; b < kTile; ++b) row[b] = columns[b][i];
        gradient_1d(row, r);
        for (int j = 0; j < kPatch; ++j)
          _mm256_storeu_ps(grad + ((i * kPatch + j) * kChunkTiles + t) * g.out + o, r[j]);
      }
    }
  }
}

// dU[36][in][out] += V[c]^T . D[c] over the chunk's `count` tiles, in tile order.
void accumulate_weights(const float* v, const float* grad, const Geometry& g, std::int64_t count, float* du) {
  for (int component = 0; component < kComponents; ++component) {
    const float* a = v + component * kChunkTiles * g.in;
    const float* b = grad + component * kChunkTiles * g.out;
    float* c = du + component * g.in * g.out;
    for (std::int64_t r = 0; r < g.in; r += kRows) {
      const int rows = static_cast<int>(std::min<std::int64_t>(kRows, g.in - r));
      product<true>(rows, a + r, 1, g.in, b, g.out, count, c + r * g.out, g.out, g.out);
    }
  }
}

// The backward pass for the weights runs the chunks in kGroups fixed groups (each its own partial
// sums, its chunks in order), then adds the groups in order: the bits do not depend on the threads.
constexpr std::int64_t kGroups = 16;

// G, the kernel's transform (6x3): U = G g G^T, and the weights' gradient dW = G^T dU G.
constexpr double kG[kPatch][3] = {{1.0 / 4, 0, 0},
                                  {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                  {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                  {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                  {0, 0, 1}};

std::size_t thread_floats(std::int64_t in_channels, std::int64_t out_channels) {
  const auto floats = static_cast<std::size_t>(kComponents * kChunkTiles * (in_channels + out_channels));
  return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

enum class Algo { automatic, direct, winograd };

Algo read_algo() {
  const char* value = std::getenv("TRAINLAB_CONV_ALGO");
  const std::string v = value != nullptr ? value : "";
  if (v.empty() || v == "auto") return Algo::automatic;
  if (v == "direct") return Algo::direct;
  if (v == "winograd") return Algo::winograd;
  throw Error("TRAINLAB_CONV_ALGO=" + quote_value(v) + " names no algorithm (allowed: auto, direct, winograd)");
}

Algo algo() {
  static const Algo value = read_algo();
  return value;
}

}  // namespace

bool chosen(DType dtype, const Conv2dShape& s, Pass pass) {
  if (!applies(dtype, s)) return false;
  switch (algo()) {
    case Algo::direct:
      return false;
    case Algo::winograd:
      return true;
    case Algo::automatic:
      break;
  }
  switch (pass) {
    case Pass::forward:
      return false;
    case Pass::backward_data:
    case Pass::backward_weights:
    case Pass::inference:
      return simd().isa == CpuIsa::avx2;
  }
  return false;
}

std::string policy() {
  switch (algo()) {
    case Algo::direct:
      return "direct (TRAINLAB_CONV_ALGO=direct)";
    case Algo::winograd:
      return "Winograd F(4x4,3x3) for every pass (TRAINLAB_CONV_ALGO=winograd)";
    case Algo::automatic:
      break;
  }
  return simd().isa == CpuIsa::avx2
             ? "direct forward, Winograd F(4x4,3x3) gradients and inference blocks (auto on avx2)"
             : std::string("direct (auto on ") + cpu_isa_name(simd().isa) + ")";
}

bool applies(DType dtype, const Conv2dShape& s) {
  return dtype == DType::f32 && s.channels_last && simd().isa >= CpuIsa::avx2 && s.kernel_h == 3 && s.kernel_w == 3 &&
         s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 1 && s.pad_w == 1 && s.in_channels > 0 &&
         s.in_channels % 8 == 0 && s.out_channels > 0 && s.out_channels % 8 == 0 && s.batch > 0 && s.in_h > 0 &&
         s.in_w > 0;
}

std::size_t weights_floats(std::int64_t in_channels, std::int64_t out_channels) {
  return static_cast<std::size_t>(kComponents * in_channels * out_channels);
}

void transform_weights(const float* weight, std::int64_t out_channels, std::int64_t in_channels, bool for_backward_data,
                       float* u) {
  for (std::int64_t o = 0; o < out_channels; ++o) {
    for (std::int64_t c = 0; c < in_channels; ++c) {
      const float* k = weight + (o * in_channels + c) * 9;
      double g[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) g[i][j] = for_backward_data ? k[(2 - i) * 3 + (2 - j)] : k[i * 3 + j];
      double t[kPatch][3];  // G g
      for (int i = 0; i < kPatch; ++i)
        for (int j = 0; j < 3; ++j) t[i][j] = kG[i][0] * g[0][j] + kG[i][1] * g[1][j] + kG[i][2] * g[2][j];
      for (int i = 0; i < kPatch; ++i) {
        for (int j = 0; j < kPatch; ++j) {
          const double value = t[i][0] * kG[j][0] + t[i][1] * kG[j][1] + t[i][2] * kG[j][2];
          // The forward's input is x (in_channels), the backward's dy (out_channels).
          const std::size_t at =
              for_backward_data ? static_cast<std::size_t>(((i * kPatch + j) * out_channels + o) * in_channels + c)
                                : static_cast<std::size_t>(((i * kPatch + j) * in_channels + c) * out_channels + o);
          u[at] = static_cast<float>(value);
        }
      }
    }
  }
}

std::size_t workspace_bytes(std::int64_t in_channels, std::int64_t out_channels, int threads) {
  return (thread_floats(in_channels, out_channels) * static_cast<std::size_t>(std::max(threads, 1)) + kAlignFloats) *
         sizeof(float);
}

bool convolve(const float* x, std::int64_t batch, std::int64_t h, std::int64_t w, std::int64_t in_channels,
              const float* u, std::int64_t out_channels, const float* bias, bool relu, float* y, int threads,
              void* workspace) {
  const Geometry g{h, w, in_channels, out_channels, (h + kTile - 1) / kTile, (w + kTile - 1) / kTile};
  const std::int64_t tiles = batch * g.tiles_h * g.tiles_w;
  const std::int64_t chunks = (tiles + kChunkTiles - 1) / kChunkTiles;
  auto* base = static_cast<float*>(workspace);
  base += (kAlignFloats - reinterpret_cast<std::uintptr_t>(base) / sizeof(float) % kAlignFloats) % kAlignFloats;
  const std::size_t per_thread = thread_floats(in_channels, out_channels);
  threads = std::max(1, static_cast<int>(std::min<std::int64_t>(threads, chunks)));
  bool finite = true;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(&& : finite)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    float* v = base + per_thread * static_cast<std::size_t>(omp_get_thread_num());
    float* m = v + kComponents * kChunkTiles * in_channels;
    const std::int64_t first = chunk * kChunkTiles, count = std::min(kChunkTiles, tiles - first);
    transform_inputs(x, g, first, count, v);
    multiply(v, u, g, count, m);
    finite = transform_outputs(m, g, first, count, bias, relu, y) && finite;
  }
  return finite;
}

std::size_t backward_weights_workspace_bytes(std::int64_t in_channels, std::int64_t out_channels, int threads) {
  const auto partial = static_cast<std::size_t>(kComponents * in_channels * out_channels + out_channels);
  return workspace_bytes(in_channels, out_channels, threads) + (partial * kGroups + kAlignFloats) * sizeof(float);
}

void backward_weights(const float* x, const float* dy, std::int64_t batch, std::int64_t h, std::int64_t w,
                      std::int64_t in_channels, std::int64_t out_channels, float* dweight, float* dbias, int threads,
                      void* workspace) {
  const Geometry g{h, w, in_channels, out_channels, (h + kTile - 1) / kTile, (w + kTile - 1) / kTile};
  const std::int64_t tiles = batch * g.tiles_h * g.tiles_w;
  const std::int64_t chunks = (tiles + kChunkTiles - 1) / kChunkTiles;
  const std::int64_t groups = std::min(kGroups, chunks);
  auto* base = static_cast<float*>(workspace);
  base += (kAlignFloats - reinterpret_cast<std::uintptr_t>(base) / sizeof(float) % kAlignFloats) % kAlignFloats;
  const std::size_t per_thread = thread_floats(in_channels, out_channels);
  const auto weights = static_cast<std::size_t>(kComponents * in_channels * out_channels);
  const std::size_t partial = weights + static_cast<std::size_t>(out_channels);
  float* partials = base + per_thread * static_cast<std::size_t>(std::max(threads, 1));
  threads = std::max(1, static_cast<int>(std::min<std::int64_t>(threads, groups)));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t group = 0; group < groups; ++group) {
    float* v = base + per_thread * static_cast<std::size_t>(omp_get_thread_num());
    float* grad = v + kComponents * kChunkTiles * in_channels;
    float* du = partials + partial * static_cast<std::size_t>(group);
    std::memset(du, 0, partial * sizeof(float));
    for (std::int64_t chunk = group * chunks / groups; chunk < (group + 1) * chunks / groups; ++chunk) {
      const std::int64_t first = chunk * kChunkTiles, count = std::min(kChunkTiles, tiles - first);
      transform_inputs(x, g, first, count, v);
      transform_gradients(dy, g, first, count, grad, du + weights);
      accumulate_weights(v, grad, g, count, du);
    }
  }
  for (std::int64_t group = 1; group < groups; ++group) {
    const float* from = partials + partial * static_cast<std::size_t>(group);
    for (std::size_t e = 0; e < partial; ++e) partials[e] += from[e];
  }
  if (dbias != nullptr) std::memcpy(dbias, partials + weights, static_cast<std::size_t>(out_channels) * sizeof(float));
  // dW = G^T dU G per (out, in): 6x6 -> 3x3.
  for (std::int64_t o = 0; o < out_channels; ++o) {
    for (std::int64_t c = 0; c < in_channels; ++c) {
      double t[kPatch][3] = {};  // dU G
      for (int i = 0; i < kPatch; ++i)
        for (int j = 0; j < kPatch; ++j) {
          const double value =
              partials[static_cast<std::size_t>(((i * kPatch + j) * in_channels + c) * out_channels + o)];
          for (int b = 0; b < 3; ++b) t[i][b] += value * kG[j][b];
        }
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          double value = 0;
          for (int i = 0; i < kPatch; ++i) value += kG[i][a] * t[i][b];
          dweight[((o * in_channels + c) * 3 + a) * 3 + b] = static_cast<float>(value);
        }
    }
  }
}

}  // namespace trainlab::cpu::winograd
