// Building blocks shared by the CPU backends: storage and compute types, dtype dispatch, and
// staging (widening bf16/f16 to f32 and reordering channels-last to NCHW in scratch, then writing
// outputs back). Header-only templates; not installed API.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/capability.h"
#include "backends/dtype.h"
#include "backends/error.h"

namespace trainlab::cpu {

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

// A kernel asked for a dtype it has no loop for (the planner asks supports_op() first, so this is
// the last line of defence for a caller that did not).
[[noreturn]] inline void unsupported(const char* op, DType dtype, const char* supported) {
  throw Unsupported(std::string(op) + " does not support dtype " + dtype_name(dtype) + " (supported: " + supported +
                    ")");
}

// An embedding's indices in [0, vocab) (the CPU backends' and the reference's check, before any work).
inline void check_embedding_indices(const std::int64_t* indices, std::int64_t n, std::int64_t vocab) {
  for (std::int64_t i = 0; i < n; ++i)
    TL_CHECK(indices[i] >= 0 && indices[i] < vocab, "embedding: index " + std::to_string(indices[i]) + " at position " +
                                                        std::to_string(i) + " is outside [0, " + std::to_string(vocab) +
                                                        ")");
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
  throw Error("invalid dtype " + std::to_string(static_cast<int>(dtype)));
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

}  // namespace trainlab::cpu
