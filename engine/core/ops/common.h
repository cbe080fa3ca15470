// Helpers shared by the op files (not installed API).
#pragma once

#include <string>

#include "engine/core/autograd.h"
#include "engine/core/observer.h"
#include "engine/core/tensor.h"

namespace trainlab::ops_detail {

// A dense, detached handle on x for a kernel to read: saved tensors never hold the graph, so a
// node cannot keep its own output (or its producers) alive in a cycle.
inline Tensor dense(const Tensor& x, MemoryFormat format = MemoryFormat::contiguous) {
  Tensor d = x.detach();
  return d.is_contiguous(format) ? d : d.contiguous(format);
}

// Elementwise ops keep a channels_last input channels_last; anything else becomes contiguous.
inline MemoryFormat elementwise_format(const Tensor& x) { return x.memory_format(); }

inline void check_defined(const char* op, const char* what, const Tensor& t) {
  TL_CHECK(t.defined(), std::string(op) + ": " + what + " is undefined");
}

inline void check_floating(const char* op, const Tensor& t) {
  TL_CHECK(is_floating(t.dtype()), std::string(op) + ": needs a floating tensor, got " + dtype_name(t.dtype()));
}

// Same backend and dtype; the message names the op and both sides.
inline void check_compatible(const char* op, const Tensor& a, const Tensor& b) {
  TL_CHECK(&a.backend() == &b.backend(), std::string(op) + ": tensors are on different backends (" +
                                             a.backend().name() + " and " + b.backend().name() + ")");
  TL_CHECK(a.dtype() == b.dtype(),
           std::string(op) + ": dtypes differ (" + dtype_name(a.dtype()) + " and " + dtype_name(b.dtype()) + ")");
}

inline void check_rank(const char* op, const char* what, const Tensor& t, std::int64_t rank, const char* layout) {
  TL_CHECK(t.dim() == rank, std::string(op) + ": " + what + " must be " + std::to_string(rank) + "-D " + layout +
                                ", got shape " + shape_str(t.shape()));
}

}  // namespace trainlab::ops_detail
