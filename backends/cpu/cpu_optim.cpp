// The CPU backends' optimiser steps: SGD and AdamW per parameter and over the whole model in one call,
// the working copies of mixed precision written in the same pass (CpuBackend, backends/cpu/cpu_backend.h).
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/parallel_chunks.h"
#include "backends/cpu/simd.h"

namespace trainlab::cpu {

namespace {

// SGD over elements [lo, hi) of one parameter (torch.optim.SGD's update, element by element).
template <typename T>
void sgd_range(T* w, const T* g, T* buf, std::int64_t lo, std::int64_t hi, const SgdStep& st) {
  const T lr = static_cast<T>(st.lr), mom = static_cast<T>(st.momentum), wd = static_cast<T>(st.weight_decay);
  const T damp = static_cast<T>(1.0 - st.dampening);
  for (std::int64_t i = lo; i < hi; ++i) {
    T d = g[i];
    if (st.weight_decay != 0) d += wd * w[i];
    if (st.momentum != 0) {
      buf[i] = st.first_step ? d : mom * buf[i] + damp * d;
      d = st.nesterov ? d + mom * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  }
}

// AdamW over elements [lo, hi) of one parameter (torch.optim.AdamW's update).
template <typename T>
void adamw_range(T* w, const T* g, T* m, T* v, std::int64_t lo, std::int64_t hi, const AdamWStep& st) {
  const double bias1 = 1.0 - std::pow(st.beta1, static_cast<double>(st.step));
  const double bias2 = 1.0 - std::pow(st.beta2, static_cast<double>(st.step));
  const T decay = static_cast<T>(1.0 - st.lr * st.weight_decay);
  const T b1 = static_cast<T>(st.beta1), b2 = static_cast<T>(st.beta2);
  const T step_size = static_cast<T>(st.lr / bias1);
  const T bias2_sqrt = static_cast<T>(std::sqrt(bias2));
  const T eps = static_cast<T>(st.eps);
  for (std::int64_t i = lo; i < hi; ++i) {
    w[i] *= decay;
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    const T denom = std::sqrt(v[i]) / bias2_sqrt + eps;
    w[i] -= step_size * m[i] / denom;
  }
}

// Every slot's elements in kChunk pieces over one parallel region, fn(slot, lo, hi) per piece,
// then narrow(slot, lo, hi) where the slot has a working copy, while the piece is in cache: one
// pass over the weights, and the same bits as an update then a cast.
template <typename Fn, typename Narrow>
void each_slot_chunk(const std::vector<OptimizerSlot>& slots, int threads, Fn&& fn, Narrow&& narrow) {
  std::int64_t pieces = 0;
  for (const OptimizerSlot& slot : slots) pieces += (slot.n + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads) schedule(static) if (pieces > 1)
  for (std::int64_t p = 0; p < pieces; ++p) {
    std::int64_t first = 0;
    for (const OptimizerSlot& slot : slots) {
      const std::int64_t count = (slot.n + kChunk - 1) / kChunk;
      if (p < first + count) {
        const std::int64_t lo = (p - first) * kChunk, hi = std::min(slot.n, lo + kChunk);
        fn(slot, lo, hi);
        if (slot.working != nullptr) narrow(slot, lo, hi);
        break;
      }
      first += count;
    }
  }
}

}  // namespace

void CpuBackend::sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer,
                          const SgdStep& st) {
  dispatch_full(dtype, op_name("sgd_step").c_str(), [&](auto tag) {
    using T = decltype(tag);
    parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
      sgd_range(as<T>(param), as<T>(grad), as<T>(momentum_buffer), lo, hi, st);
    });
  });
}

void CpuBackend::adamw_step(DType dtype, std::int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                            const AdamWStep& st) {
  dispatch_full(dtype, op_name("adamw_step").c_str(), [&](auto tag) {
    using T = decltype(tag);
    parallel_chunks(n, threads_, [&](std::int64_t lo, std::int64_t hi) {
      adamw_range(as<T>(param), as<T>(grad), as<T>(exp_avg), as<T>(exp_avg_sq), lo, hi, st);
    });
  });
}

// One piece's working copy through this class's cast (a piece is at most one chunk: no nested
// parallel region).
void CpuBackend::narrow_piece(const OptimizerSlot& slot, std::int64_t lo, std::int64_t hi) {
  CpuBackend::cast(
      DType::f32, static_cast<const float*>(slot.param) + lo, slot.working_dtype,
      static_cast<unsigned char*>(slot.working) + lo * static_cast<std::int64_t>(dtype_size(slot.working_dtype)),
      hi - lo);
}

void CpuBackend::sgd_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& step) {
  if (dtype != DType::f32) return Backend::sgd_step_all(dtype, slots, step);
  each_slot_chunk(
      slots, threads_,
      [&](const OptimizerSlot& slot, std::int64_t lo, std::int64_t hi) {
        SgdStep one = step;
        one.first_step = slot.first_step;
        sgd_range(static_cast<float*>(slot.param), static_cast<const float*>(slot.grad),
                  static_cast<float*>(slot.state1), lo, hi, one);
      },
      [this](const OptimizerSlot& slot, std::int64_t lo, std::int64_t hi) { narrow_piece(slot, lo, hi); });
}

void CpuBackend::adamw_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamWStep& step) {
  if (dtype != DType::f32) return Backend::adamw_step_all(dtype, slots, step);
  each_slot_chunk(
      slots, threads_,
      [&](const OptimizerSlot& slot, std::int64_t lo, std::int64_t hi) {
        AdamWStep one = step;
        one.step = slot.step;
        adamw_range(static_cast<float*>(slot.param), static_cast<const float*>(slot.grad),
                    static_cast<float*>(slot.state1), static_cast<float*>(slot.state2), lo, hi, one);
      },
      [this](const OptimizerSlot& slot, std::int64_t lo, std::int64_t hi) { narrow_piece(slot, lo, hi); });
}

}  // namespace trainlab::cpu
