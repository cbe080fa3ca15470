// The cross-backend harness's helpers (tests/backends/test_backends.cpp has the method): every op
// on every registered fast backend against the reference, forward and every gradient, norm-wise.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "test_util.h"

namespace trainlab::test::harness {

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

inline double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : 1e-2; }

inline double relative_error(const Tensor& got, const Tensor& expected) {
  const auto g = values(got), e = values(expected);
  REQUIRE(g.size() == e.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    diff += (g[i] - e[i]) * (g[i] - e[i]);
    norm += e[i] * e[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// The backends checked against the reference: every registered CPU backend, or the list in
// TRAINLAB_HARNESS_BACKENDS (comma-separated; the GPU tests run the harness with "cuda").
inline std::vector<std::string> fast_backends() {
  std::vector<std::string> names;
  if (const char* chosen = std::getenv("TRAINLAB_HARNESS_BACKENDS")) {
    std::string list(chosen), item;
    for (std::size_t start = 0; start <= list.size();) {
      const std::size_t comma = std::min(list.find(',', start), list.size());
      item = list.substr(start, comma - start);
      if (!item.empty()) names.push_back(item);
      start = comma + 1;
    }
    return names;
  }
  for (const auto& info : registered_backends()) {
    if (info.name != "reference" && info.device_type == DeviceType::cpu) names.push_back(info.name);
  }
  return names;
}

// Runs `op` on `backend`: inputs (f32 host values on the reference) are moved there, cast to
// `dtype` and laid out as asked; returns the output and the gradients of the inputs flagged.
struct Result {
  Tensor output;
  std::vector<Tensor> grads;
};

inline Result run(Backend& backend, DType dtype, const Op& op, const std::vector<Tensor>& host_inputs,
                  const std::vector<bool>& differentiable, const std::vector<bool>& channels_last,
                  const Tensor& host_weights) {
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < host_inputs.size(); ++i) {
    Tensor t = host_inputs[i].to(backend);
    if (is_floating(t.dtype())) t = t.to(dtype);
    if (channels_last[i]) t = t.contiguous(MemoryFormat::channels_last);
    t = t.detach();
    if (differentiable[i]) t.set_requires_grad(true);
    inputs.push_back(t);
  }
  Result result;
  result.output = op(inputs);
  const Tensor weights = host_weights.to(backend).to(result.output.dtype());
  sum(mul(result.output, weights)).backward();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (differentiable[i]) result.grads.push_back(inputs[i].grad());
  }
  return result;
}

// Compares `op` on every fast backend with the reference.
// Whether `backend` runs `op` in `dtype` (its capability table, backends/capability.h); when it does
// not, the case is skipped and says so, once per combination.
inline bool runs_here(Backend& backend, BackendOp op, DType dtype, bool channels_last) {
  const OpSupport support = backend.supports_op(op, dtype, channels_last);
  if (support.runs()) return true;
  static std::set<std::string> said;
  const std::string key =
      backend.name() + "/" + backend_op_name(op) + "/" + dtype_name(dtype) + "/" + (channels_last ? "nhwc" : "nchw");
  if (said.insert(key).second) WARN("skipped: " << unsupported_message(backend, op, dtype, channels_last, support));
  return false;
}

inline void check_op(const std::string& label, BackendOp backend_op, DType dtype, const Op& op,
                     const std::vector<Tensor>& host_inputs, std::vector<bool> differentiable,
                     std::vector<bool> channels_last, std::uint64_t seed) {
  if (channels_last.empty()) channels_last.assign(host_inputs.size(), false);
  Generator gen(seed);
  Tensor probe;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> inputs;
    for (const auto& t : host_inputs) inputs.push_back(is_floating(t.dtype()) ? t.to(dtype) : t);
    probe = op(inputs);
  }
  const Tensor weights = Tensor::uniform(probe.shape(), -1, 1, gen, DType::f32, ref());
  const Result expected = run(ref(), dtype, op, host_inputs, differentiable, channels_last, weights);
  for (const auto& name : fast_backends()) {
    Backend& backend = get_backend(name);
    if (!runs_here(backend, backend_op, dtype, channels_last[0])) continue;
    INFO(label << " on " << name << " in " << dtype_name(dtype) << " ("
               << support_name(backend.supports_op(backend_op, dtype, channels_last[0]).level) << ")");
    const Result got = run(backend, dtype, op, host_inputs, differentiable, channels_last, weights);
    CHECK(got.output.dtype() == expected.output.dtype());
    CHECK(got.output.memory_format() == expected.output.memory_format());
    const double out_err = relative_error(got.output, expected.output);
    INFO("output relative error " << out_err);
    CHECK(out_err < tolerance(dtype));
    for (std::size_t i = 0; i < expected.grads.size(); ++i) {
      const double err = relative_error(got.grads[i], expected.grads[i]);
      INFO("gradient " << i << " relative error " << err);
      CHECK(err < tolerance(dtype));
    }
  }
}

inline std::int64_t between(Generator& gen, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(hi - lo + 1)));
}

inline Tensor random(const Shape& shape, Generator& gen, double lo = -1, double hi = 1) {
  return Tensor::uniform(shape, lo, hi, gen, DType::f32, ref());
}

// Pooling inputs whose every window holds distinct values that bf16 represents exactly, so the
// argmax (and the gradient's route) is the same on every backend: a per-position offset below
// the window size plus a random multiple of it, all integers below 256.
inline Tensor pool_input(const Shape& shape, std::int64_t window, Generator& gen) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  const std::int64_t h = shape[2], w = shape[3];
  const std::int64_t levels = 256 / (window * window);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t y = static_cast<std::int64_t>(i) / w % h, x = static_cast<std::int64_t>(i) % w;
    const std::int64_t offset = (y % window) * window + (x % window);
    v[i] = static_cast<float>(
               static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(levels))) * window * window + offset) /
           16.0f;
  }
  return Tensor::from_vector(v, shape, ref());
}

inline const std::vector<DType> kDtypes = {DType::f32, DType::bf16, DType::f16};

}  // namespace trainlab::test::harness
