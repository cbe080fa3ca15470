// The hand-written CUDA kernels, every version, against plain host computations (CUDA builds; a
// GPU test: without a GPU it exits 77, which ctest reports as skipped). Also measures the fused
// elementwise kernels on 256 MiB tensors against the device-to-device copy rate in the same run
// (reported against its 70% target; a miss is a measurement, not a failure).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/dtype.h"
#include "kernels/kernels.h"

using namespace trainlab;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

void cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "cuda_kernels_test: %s: %s\n", call, cudaGetErrorString(status));
    std::exit(1);
  }
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* p = nullptr;
  cuda(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(1, host.size() * sizeof(T))), "cudaMalloc");
  if (!host.empty()) cuda(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

template <typename T>
std::vector<T> host_copy(const T* p, std::size_t n) {
  std::vector<T> host(n);
  cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (n) cuda(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

double relative(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

std::vector<float> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void test_sum() {
  for (std::size_t n : {1u, 1000u, 1u << 20}) {
    const auto x = random_values(n, 1);
    double want = 0;
    for (float v : x) want += v;
    float* dx = device_copy(x);
    float* out = device_copy(std::vector<float>(1));
    float* scratch = device_copy(std::vector<float>(static_cast<std::size_t>(kernels::sum_scratch_elements(0))));
    kernels::sum_v1(DType::f32, dx, static_cast<std::int64_t>(n), out, scratch, nullptr);
    const float v1 = host_copy(out, 1)[0];
    kernels::sum(DType::f32, dx, static_cast<std::int64_t>(n), out, scratch, nullptr);
    const float v2 = host_copy(out, 1)[0];
    kernels::sum(DType::f32, dx, static_cast<std::int64_t>(n), out, scratch, nullptr);
    const float again = host_copy(out, 1)[0];
    const double tol = 1e-5 * std::sqrt(static_cast<double>(n)) + 1e-6;
    expect(std::abs(v1 - want) <= tol * std::max(1.0, std::abs(want)), "sum_v1 n=" + std::to_string(n));
    expect(std::abs(v2 - want) <= tol * std::max(1.0, std::abs(want)), "sum n=" + std::to_string(n));
    expect(v2 == again, "sum is the same bits on a second run, n=" + std::to_string(n));
    cudaFree(dx);
    cudaFree(out);
    cudaFree(scratch);
  }
}

// The ring's reduction and the compression cast, bit for bit against the host ring's arithmetic
// (comm/communicator.cpp: (y + x) * scale in f32, bf16 rounded once; f32 in f32).
void test_ring_reduce_and_convert() {
  const std::size_t n = 100003;
  const auto a = random_values(n, 7), b = random_values(n, 8);
  for (double scale : {1.0, 0.25, 1.0 / 3.0}) {
    // f32
    float* dy = device_copy(a);
    float* dx = device_copy(b);
    kernels::ring_reduce(DType::f32, dy, dx, static_cast<std::int64_t>(n), scale, nullptr);
    const auto got = host_copy(dy, n);
    bool same = true;
    for (std::size_t i = 0; i < n; ++i) {
      const float want = scale != 1.0 ? (a[i] + b[i]) * static_cast<float>(scale) : a[i] + b[i];
      same = same && got[i] == want;
    }
    expect(same, "ring_reduce f32, scale " + std::to_string(scale) + ": the host's bits");
    // f32 -> bf16 with the scale, and back
    std::vector<bf16> packed_host(n);
    for (std::size_t i = 0; i < n; ++i) packed_host[i] = bf16(a[i] * static_cast<float>(scale));
    bf16* packed = device_copy(std::vector<bf16>(n));
    float* da = device_copy(a);
    kernels::convert_scaled(DType::f32, da, DType::bf16, packed, static_cast<std::int64_t>(n), scale, nullptr);
    const auto packed_got = host_copy(packed, n);
    bool converted = true;
    for (std::size_t i = 0; i < n; ++i)
      converted = converted && static_cast<float>(packed_got[i]) == static_cast<float>(packed_host[i]);
    expect(converted, "convert_scaled f32 -> bf16, scale " + std::to_string(scale) + ": the host's bits");
    cudaFree(dy);
    cudaFree(dx);
    cudaFree(da);
    cudaFree(packed);
  }
}

void test_bias_backward() {
  const std::int64_t outer = 7, channels = 33, inner = 129;
  const auto dy = random_values(static_cast<std::size_t>(outer * channels * inner), 2);
  std::vector<double> want(static_cast<std::size_t>(channels), 0.0);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t k = 0; k < inner; ++k) want[c] += dy[static_cast<std::size_t>((o * channels + c) * inner + k)];
  float* d = device_copy(dy);
  float* db = device_copy(std::vector<float>(static_cast<std::size_t>(channels)));
  float* scratch = device_copy(std::vector<float>(
      static_cast<std::size_t>(kernels::relu_bias_backward_scratch_elements(outer * inner, channels, 1))));
  kernels::bias_backward_v1(DType::f32, d, db, outer, channels, inner, nullptr);
  expect(relative(host_copy(db, channels), want) < 1e-5, "bias_backward_v1");
  kernels::bias_backward(DType::f32, d, db, outer, channels, inner, scratch, nullptr);
  expect(relative(host_copy(db, channels), want) < 1e-5, "bias_backward (NCHW planes)");
  // The linear and channels_last case (inner == 1): the same numbers over rows of channels.
  std::vector<float> rows(dy.size());
  std::vector<double> want_rows(static_cast<std::size_t>(channels), 0.0);
  for (std::int64_t r = 0; r < outer * inner; ++r)
    for (std::int64_t c = 0; c < channels; ++c) {
      rows[static_cast<std::size_t>(r * channels + c)] = dy[static_cast<std::size_t>(r * channels + c)];
      want_rows[static_cast<std::size_t>(c)] += dy[static_cast<std::size_t>(r * channels + c)];
    }
  float* dr = device_copy(rows);
  kernels::bias_backward(DType::f32, dr, db, outer * inner, channels, 1, scratch, nullptr);
  expect(relative(host_copy(db, channels), want_rows) < 1e-5, "bias_backward (rows, inner == 1)");
  // An empty batch: a zero gradient, and no launch of an empty grid (which fails).
  kernels::bias_backward(DType::f32, dr, db, 0, channels, 1, scratch, nullptr);
  expect(host_copy(db, channels) == std::vector<float>(static_cast<std::size_t>(channels), 0.f),
         "bias_backward of an empty batch: zeros, no launch error");
  kernels::relu_bias_backward(DType::f32, dr, dr, dr, db, 0, channels, 1, scratch, nullptr);
  expect(host_copy(db, channels) == std::vector<float>(static_cast<std::size_t>(channels), 0.f),
         "relu_bias_backward of an empty batch: zeros, no launch error");
  cudaFree(d);
  cudaFree(dr);
  cudaFree(db);
  cudaFree(scratch);
}

// Max-pool against the CPU backends' rule written out on the host: the first maximum in window
// order wins, a NaN beats any number; the backward routes each gradient to its window's argmax and
// adds where windows overlap (in window order, as the device does, so the sums agree exactly).
void test_max_pool() {
  struct Case {
    std::int64_t n, c, h, w, k, stride, pad;
    bool nhwc;
  };
  for (const Case cs :
       {Case{2, 3, 8, 6, 2, 2, 0, false}, Case{2, 3, 8, 6, 2, 2, 0, true}, Case{2, 4, 9, 7, 3, 2, 1, false},
        Case{2, 4, 9, 7, 3, 2, 1, true}, Case{1, 5, 7, 9, 2, 2, 0, true}}) {
    const std::int64_t oh_n = (cs.h + 2 * cs.pad - cs.k) / cs.stride + 1,
                       ow_n = (cs.w + 2 * cs.pad - cs.k) / cs.stride + 1;
    const auto in_n = static_cast<std::size_t>(cs.n * cs.c * cs.h * cs.w);
    const auto out_n = static_cast<std::size_t>(cs.n * cs.c * oh_n * ow_n);
    auto x = random_values(in_n, 41);
    for (std::size_t i = 0; i < in_n; i += 23) x[i] = x[(i + 1) % in_n];  // ties
    x[5] = std::nanf("");
    auto at = [&](std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t hh, std::int64_t ww) {
      return static_cast<std::size_t>(cs.nhwc ? ((n * hh + h) * ww + w) * cs.c + c
                                              : ((n * cs.c + c) * hh + h) * ww + w);
    };
    std::vector<float> want_y(out_n), dy = random_values(out_n, 42), want_dx(in_n, 0.f);
    std::vector<std::int32_t> want_arg(out_n);
    for (std::int64_t n = 0; n < cs.n; ++n)
      for (std::int64_t c = 0; c < cs.c; ++c)
        for (std::int64_t oh = 0; oh < oh_n; ++oh)
          for (std::int64_t ow = 0; ow < ow_n; ++ow) {
            float best = -INFINITY;
            std::int64_t arg = -1;
            for (std::int64_t kh = 0; kh < cs.k; ++kh)
              for (std::int64_t kw = 0; kw < cs.k; ++kw) {
                const std::int64_t ih = oh * cs.stride - cs.pad + kh, iw = ow * cs.stride - cs.pad + kw;
                if (ih < 0 || ih >= cs.h || iw < 0 || iw >= cs.w) continue;
                const float v = x[at(n, c, ih, iw, cs.h, cs.w)];
                if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                  best = v;
                  arg = ih * cs.w + iw;
                }
              }
            const std::size_t o = at(n, c, oh, ow, oh_n, ow_n);
            want_y[o] = best;
            want_arg[o] = static_cast<std::int32_t>(arg);
          }
    // The backward in the device's order: each input sums its won windows in window order.
    for (std::int64_t n = 0; n < cs.n; ++n)
      for (std::int64_t c = 0; c < cs.c; ++c)
        for (std::int64_t ih = 0; ih < cs.h; ++ih)
          for (std::int64_t iw = 0; iw < cs.w; ++iw) {
            float sum = 0.f;
            for (std::int64_t oh = 0; oh < oh_n; ++oh)
              for (std::int64_t ow = 0; ow < ow_n; ++ow) {
                const std::size_t o = at(n, c, oh, ow, oh_n, ow_n);
                if (want_arg[o] == ih * cs.w + iw) sum += dy[o];
              }
            want_dx[at(n, c, ih, iw, cs.h, cs.w)] = sum;
          }
    const kernels::MaxPoolShape shape{cs.n, cs.c,      cs.h,      cs.w,   oh_n,   ow_n,   cs.k,
                                      cs.k, cs.stride, cs.stride, cs.pad, cs.pad, cs.nhwc};
    float* xd = device_copy(x);
    float* yd = device_copy(std::vector<float>(out_n));
    float* dyd = device_copy(dy);
    float* dxd = device_copy(std::vector<float>(in_n));
    std::int32_t* argd = device_copy(std::vector<std::int32_t>(out_n));
    kernels::max_pool2d_forward(DType::f32, shape, xd, yd, argd, nullptr);
    kernels::max_pool2d_backward(DType::f32, shape, dyd, argd, dxd, nullptr);
    const auto y = host_copy(yd, out_n);
    bool same_y = true;
    for (std::size_t i = 0; i < out_n; ++i)
      same_y = same_y && (std::isnan(want_y[i]) ? std::isnan(y[i]) : y[i] == want_y[i]);
    const std::string what = "max_pool2d " + std::to_string(cs.k) + "x" + std::to_string(cs.k) + " stride " +
                             std::to_string(cs.stride) + " pad " + std::to_string(cs.pad) +
                             (cs.nhwc ? " nhwc" : " nchw");
    expect(same_y, what + ": the forward's winners (first maximum, NaN wins)");
    expect(host_copy(argd, out_n) == want_arg, what + ": the argmax kept in the workspace");
    expect(host_copy(dxd, in_n) == want_dx, what + ": the backward routes each gradient to its argmax, exactly");
    for (void* p : {static_cast<void*>(xd), static_cast<void*>(yd), static_cast<void*>(dyd), static_cast<void*>(dxd),
                    static_cast<void*>(argd)})
      cudaFree(p);
  }
}

// fill gives the host's bits: f64 to f32, then to nearest even, NaN with dtype.h's payload.
void test_fill() {
  for (const double value : {1.0, 0.1, 1.0 + 0x1p-9 + 0x1p-30, 65519.0, -0.0, std::nan(""), -HUGE_VAL}) {
    const float narrowed = static_cast<float>(value);
    for (const DType dtype : {DType::bf16, DType::f16}) {
      std::uint16_t* y = device_copy(std::vector<std::uint16_t>(1000));
      kernels::fill(dtype, y, 1000, value, nullptr);
      const std::uint16_t want = dtype == DType::bf16 ? f32_to_bf16_bits(narrowed) : f32_to_f16_bits(narrowed);
      const auto got = host_copy(y, 1000);
      expect(std::all_of(got.begin(), got.end(), [&](std::uint16_t b) { return b == want; }),
             std::string("fill ") + dtype_name(dtype) + " with " + std::to_string(value) + ": the host's bits");
      cudaFree(y);
    }
  }
}

// Why the NCCL communicator clears "not ready" (comm/nccl_communicator.cpp): a query of a busy
// stream leaves cudaErrorNotReady as the thread's last error, which the next launch check would
// report as a failed launch.
void test_not_ready_is_cleared() {
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // Work that keeps the stream busy for a while: 32 fills of 1 GiB.
  const std::int64_t n = std::int64_t{1} << 28;
  float* big = nullptr;
  cuda(cudaMalloc(reinterpret_cast<void**>(&big), static_cast<std::size_t>(n) * sizeof(float)), "cudaMalloc");
  for (int i = 0; i < 32; ++i) kernels::fill(DType::f32, big, n, 1.0, stream);
  const cudaError_t busy = cudaStreamQuery(stream);
  const cudaError_t left = cudaGetLastError();  // what a launch check would read, then clears
  expect(busy != cudaErrorNotReady || left == cudaErrorNotReady || left == cudaSuccess,
         "a busy stream's query answers not ready (the runtime may keep it as the last error)");
  (void)cudaStreamQuery(stream);
  (void)cudaGetLastError();  // the communicator's clearing
  float* one = device_copy(std::vector<float>(1));
  bool threw = false;
  try {
    kernels::fill(DType::f32, one, 1, 1.0, stream);
  } catch (const std::exception&) {
    threw = true;
  }
  expect(!threw, "after clearing not ready, the next launch check passes");
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaFree(one);
  cudaFree(big);
  cudaStreamDestroy(stream);
}

void test_relu_bias_backward() {
  // dx = dy * (y > 0) and dbias = sum of dx, in one pass, both layouts' shapes ([N, C, HW] and [NHW, C, 1]).
  for (auto [outer, channels, inner] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{5, 32, 257},
                                        std::tuple<std::int64_t, std::int64_t, std::int64_t>{1285, 32, 1},
                                        std::tuple<std::int64_t, std::int64_t, std::int64_t>{77, 45, 1}}) {
    const auto n = static_cast<std::size_t>(outer * channels * inner);
    const auto y = random_values(n, 4), dy = random_values(n, 5);
    std::vector<float> want_dx(n);
    std::vector<double> want_db(static_cast<std::size_t>(channels), 0.0);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t k = 0; k < inner; ++k) {
          const auto i = static_cast<std::size_t>((o * channels + c) * inner + k);
          want_dx[i] = y[i] > 0.f ? dy[i] : 0.f;
          want_db[static_cast<std::size_t>(c)] += want_dx[i];
        }
    float *dy_d = device_copy(dy), *y_d = device_copy(y), *dx = device_copy(std::vector<float>(n)),
          *db = device_copy(std::vector<float>(static_cast<std::size_t>(channels))),
          *scratch = device_copy(std::vector<float>(
              static_cast<std::size_t>(kernels::relu_bias_backward_scratch_elements(outer, channels, inner))));
    for (int version : {1, 2}) {
      const std::string name = version == 1 ? "relu_bias_backward_v1" : "relu_bias_backward";
      if (version == 1) {
        kernels::relu_bias_backward_v1(DType::f32, y_d, dy_d, dx, db, outer, channels, inner, nullptr);
      } else {
        kernels::relu_bias_backward(DType::f32, y_d, dy_d, dx, db, outer, channels, inner, scratch, nullptr);
      }
      expect(host_copy(dx, n) == want_dx, name + ": dx is dy masked by y > 0, exactly");
      expect(relative(host_copy(db, channels), want_db) < 1e-5, name + ": dbias is the sum of dx");
    }
    for (float* p : {dy_d, y_d, dx, db, scratch}) cudaFree(p);
  }
}

void test_cross_entropy() {
  const std::int64_t batch = 37, classes = 10;
  const auto logits = random_values(static_cast<std::size_t>(batch * classes), 3);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
  for (std::int64_t r = 0; r < batch; ++r) labels[r] = (r * 7) % classes;
  double want = 0;
  std::vector<double> want_probs(logits.size());
  for (std::int64_t r = 0; r < batch; ++r) {
    double m = -1e30, s = 0;
    for (std::int64_t j = 0; j < classes; ++j) m = std::max(m, static_cast<double>(logits[r * classes + j]));
    for (std::int64_t j = 0; j < classes; ++j) s += std::exp(logits[r * classes + j] - m);
    for (std::int64_t j = 0; j < classes; ++j) want_probs[r * classes + j] = std::exp(logits[r * classes + j] - m) / s;
    want += std::log(s) + m - logits[r * classes + labels[r]];
  }
  want /= static_cast<double>(batch);
  float* dl = device_copy(logits);
  std::int64_t* dlab = device_copy(labels);
  float* probs = device_copy(std::vector<float>(logits.size()));
  float* loss = device_copy(std::vector<float>(1));
  float* rows = device_copy(std::vector<float>(static_cast<std::size_t>(batch)));
  int* bad = device_copy(std::vector<int>(1));
  for (int version : {1, 2}) {
    if (version == 1) {
      kernels::softmax_cross_entropy_forward_v1(DType::f32, dl, dlab, batch, classes, probs, loss, rows, bad, nullptr);
    } else {
      kernels::softmax_cross_entropy_forward(DType::f32, dl, dlab, batch, classes, probs, loss, rows, bad, nullptr);
    }
    const std::string name = version == 1 ? "softmax_cross_entropy_forward_v1" : "softmax_cross_entropy_forward";
    expect(std::abs(host_copy(loss, 1)[0] - want) < 1e-5 * std::abs(want) + 1e-6, name + " loss");
    expect(relative(host_copy(probs, logits.size()), want_probs) < 1e-5, name + " probabilities");
    expect(host_copy(bad, 1)[0] == 0, name + " reports no bad label");
  }
  labels[5] = 12;  // out of range
  cuda(cudaMemcpy(dlab, labels.data(), labels.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "cudaMemcpy");
  kernels::softmax_cross_entropy_forward(DType::f32, dl, dlab, batch, classes, probs, loss, rows, bad, nullptr);
  expect(host_copy(bad, 1)[0] == 6, "a label outside [0, classes) is reported with its row (6 = row 5 + 1)");
  for (void* p : {static_cast<void*>(dl), static_cast<void*>(dlab), static_cast<void*>(probs), static_cast<void*>(loss),
                  static_cast<void*>(rows), static_cast<void*>(bad)})
    cudaFree(p);
}

void test_optimizer_launches() {
  // The whole-model launch equals the per-tensor one, and the bf16 working copies it writes in
  // the same pass equal a cast of the updated parameters.
  const std::vector<std::int64_t> sizes = {5, 1000, 70000};
  std::vector<float*> p1, p2, g, b1, b2;
  std::vector<void*> fused, cast;
  std::vector<kernels::MultiSlot> slots;
  std::int64_t max_n = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const auto n = static_cast<std::size_t>(sizes[t]);
    const auto values = random_values(n, 10 + t), grads = random_values(n, 20 + t), buf = random_values(n, 30 + t);
    p1.push_back(device_copy(values));
    p2.push_back(device_copy(values));
    g.push_back(device_copy(grads));
    b1.push_back(device_copy(buf));
    b2.push_back(device_copy(buf));
    void* w = nullptr;
    void* c = nullptr;
    cuda(cudaMalloc(&w, n * 2), "cudaMalloc");
    cuda(cudaMalloc(&c, n * 2), "cudaMalloc");
    fused.push_back(w);
    cast.push_back(c);
    slots.push_back(kernels::MultiSlot{p2.back(), g.back(), b2.back(), nullptr, sizes[t], 0, 0, w});
    max_n = std::max(max_n, sizes[t]);
  }
  for (std::size_t t = 0; t < sizes.size(); ++t)
    kernels::sgd_step(DType::f32, sizes[t], p1[t], g[t], b1[t], 0.1f, 0.9f, 0.f, 0.01f, false, false, DType::f32,
                      nullptr, nullptr);
  kernels::MultiSlot* table = device_copy(slots);
  kernels::sgd_step_multi(DType::f32, table, static_cast<int>(slots.size()), max_n, 0.1f, 0.9f, 0.f, 0.01f, false,
                          DType::bf16, nullptr);
  bool same = true, copies = true;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    same = same && host_copy(p1[t], sizes[t]) == host_copy(p2[t], sizes[t]) &&
           host_copy(b1[t], sizes[t]) == host_copy(b2[t], sizes[t]);
    kernels::cast(DType::f32, p2[t], DType::bf16, cast[t], sizes[t], nullptr);
    std::vector<std::uint16_t> a(static_cast<std::size_t>(sizes[t])), b(a.size());
    cuda(cudaMemcpy(a.data(), fused[t], a.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda(cudaMemcpy(b.data(), cast[t], b.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    copies = copies && a == b;
  }
  expect(same, "sgd_step_multi equals sgd_step per tensor, bit for bit");
  expect(copies, "sgd_step_multi's fused bf16 working copies equal the cast of the updated parameters");
  for (void* p : fused) cudaFree(p);
  for (void* p : cast) cudaFree(p);
  cudaFree(table);
  for (auto* v : {&p1, &p2, &g, &b1, &b2})
    for (float* p : *v) cudaFree(p);
}

void bandwidth() {
  // Fused elementwise kernels on 256 MiB against the device-to-device copy, same run.
  const std::size_t n = (256u << 20) / sizeof(float);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  cuda(cudaMalloc(reinterpret_cast<void**>(&a), n * sizeof(float)), "cudaMalloc");
  cuda(cudaMalloc(reinterpret_cast<void**>(&b), n * sizeof(float)), "cudaMalloc");
  cuda(cudaMalloc(reinterpret_cast<void**>(&c), n * sizeof(float)), "cudaMalloc");
  kernels::fill(DType::f32, a, static_cast<std::int64_t>(n), 1.f, nullptr);
  kernels::fill(DType::f32, b, static_cast<std::int64_t>(n), 2.f, nullptr);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  auto time = [&](auto&& launch, double bytes_moved) {
    launch();
    cudaEventRecord(start);
    for (int i = 0; i < 10; ++i) launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return bytes_moved * 10 / (ms * 1e-3) * 1e-9;  // GB/s, bytes read + written
  };
  const double bytes = static_cast<double>(n * sizeof(float));
  const double copy = time([&] { cudaMemcpyAsync(c, a, n * sizeof(float), cudaMemcpyDeviceToDevice); }, 2 * bytes);
  const double relu =
      time([&] { kernels::relu_forward(DType::f32, a, c, static_cast<std::int64_t>(n), nullptr); }, 2 * bytes);
  const double add =
      time([&] { kernels::binary(0, DType::f32, a, b, c, static_cast<std::int64_t>(n), nullptr); }, 3 * bytes);
  const double bias_relu = time(
      [&] {
        kernels::bias_relu_forward(DType::f32, a, b, c, 1024, 64, static_cast<std::int64_t>(n / (1024 * 64)), true,
                                   nullptr);
      },
      2 * bytes);
  // A measurement with a target, reported, never a failure of this correctness test.
  const bool met = relu >= 0.7 * copy && add >= 0.7 * copy && bias_relu >= 0.7 * copy;
  std::printf(
      "bandwidth (256 MiB, GB/s counting reads and writes): copy %.0f, relu %.0f (%.0f%%), add %.0f (%.0f%%), "
      "bias+relu %.0f (%.0f%%); target >= 70%% of copy: %s\n",
      copy, relu, 100 * relu / copy, add, 100 * add / copy, bias_relu, 100 * bias_relu / copy,
      met ? "met" : "MISSED (a measurement, not a failure)");
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no usable GPU (%s)\n", status != cudaSuccess ? cudaGetErrorString(status) : "no devices");
    return 77;
  }
  test_sum();
  test_ring_reduce_and_convert();
  test_bias_backward();
  test_relu_bias_backward();
  test_max_pool();
  test_fill();
  test_not_ready_is_cleared();
  test_cross_entropy();
  test_optimizer_launches();
  bandwidth();
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
