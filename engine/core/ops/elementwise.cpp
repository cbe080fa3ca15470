// Elementwise arithmetic and full reductions: forward and backward of each, side by side.
#include <utility>

#include "engine/core/autocast.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

using ops_detail::check_compatible;
using ops_detail::check_floating;
using ops_detail::dense;

namespace {

Tensor binary_forward(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  ops_detail::check_defined(name, "first operand", a);
  ops_detail::check_defined(name, "second operand", b);
  check_compatible(name, a, b);
  check_floating(name, a);
  TL_CHECK(a.shape() == b.shape(), std::string(name) + ": shapes " + shape_str(a.shape()) + " and " +
                                       shape_str(b.shape()) + " differ (no broadcasting)");
  // Both operands in one layout: the first's when the second shares it, else row-major.
  const MemoryFormat format = a.memory_format() == b.memory_format() ? a.memory_format() : MemoryFormat::contiguous;
  const Tensor da = dense(a, format), db = dense(b, format);
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.backend(), format);
  a.backend().binary(op, a.dtype(), da.raw_data(), db.raw_data(), y.raw_data(), y.numel());
  return y;
}

// Under autocast an f32 operand meets a low-precision one in the low precision.
std::pair<Tensor, Tensor> autocast_pair(const Tensor& a, const Tensor& b) {
  if (!autocast_enabled() || !a.defined() || !b.defined() || a.dtype() == b.dtype()) return {a, b};
  if (a.dtype() == DType::f32) return {a.to(b.dtype()), b};
  if (b.dtype() == DType::f32) return {a, b.to(a.dtype())};
  return {a, b};
}

}  // namespace

// y = a + b;  da = g, db = g
Tensor add(const Tensor& a_in, const Tensor& b_in) {
  TL_SPAN("add.forward");
  const auto [a, b] = autocast_pair(a_in, b_in);
  Tensor y = binary_forward(BinaryOp::add, "add", a, b);
  return record(y, "add", {a, b}, [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g, g}; });
}

// y = a - b;  da = g, db = -g
Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  TL_SPAN("sub.forward");
  const auto [a, b] = autocast_pair(a_in, b_in);
  Tensor y = binary_forward(BinaryOp::sub, "sub", a, b);
  return record(y, "sub", {a, b}, [](const Tensor& g, const std::vector<bool>& needs) {
    return std::vector<Tensor>{g, needs[1] ? neg(g) : Tensor()};
  });
}

// y = a * b;  da = g * b, db = g * a
Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  TL_SPAN("mul.forward");
  const auto [a, b] = autocast_pair(a_in, b_in);
  Tensor y = binary_forward(BinaryOp::mul, "mul", a, b);
  const Tensor sa = a.detach(), sb = b.detach();
  return record(y, "mul", {a, b}, [sa, sb](const Tensor& g, const std::vector<bool>& needs) {
    return std::vector<Tensor>{needs[0] ? mul(g, sb) : Tensor(), needs[1] ? mul(g, sa) : Tensor()};
  });
}

// y = a / b;  da = g / b, db = -g * a / b^2 = -g * y / b
Tensor div(const Tensor& a_in, const Tensor& b_in) {
  TL_SPAN("div.forward");
  const auto [a, b] = autocast_pair(a_in, b_in);
  Tensor y = binary_forward(BinaryOp::div, "div", a, b);
  const Tensor sb = b.detach(), sy = y.detach();
  return record(y, "div", {a, b}, [sb, sy](const Tensor& g, const std::vector<bool>& needs) {
    return std::vector<Tensor>{needs[0] ? div(g, sb) : Tensor(), needs[1] ? neg(div(mul(g, sy), sb)) : Tensor()};
  });
}

static Tensor affine_forward(const char* name, const Tensor& x, double scale, double shift) {
  ops_detail::check_defined(name, "input", x);
  check_floating(name, x);
  const MemoryFormat format = x.memory_format();
  const Tensor dx = dense(x, format);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.backend(), format);
  x.backend().affine(x.dtype(), dx.raw_data(), y.raw_data(), y.numel(), scale, shift);
  return y;
}

// y = s x;  dx = s g
Tensor mul_scalar(const Tensor& x, double scale) {
  TL_SPAN("mul_scalar.forward");
  Tensor y = affine_forward("mul_scalar", x, scale, 0.0);
  return record(y, "mul_scalar", {x}, [scale](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{mul_scalar(g, scale)};
  });
}

// y = x + s;  dx = g
Tensor add_scalar(const Tensor& x, double shift) {
  TL_SPAN("add_scalar.forward");
  Tensor y = affine_forward("add_scalar", x, 1.0, shift);
  return record(y, "add_scalar", {x}, [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; });
}

Tensor neg(const Tensor& x) { return mul_scalar(x, -1.0); }

// y = sum_i x_i (0-d);  dx_i = g
Tensor sum(const Tensor& x) {
  TL_SPAN("sum.forward");
  ops_detail::check_defined("sum", "input", x);
  check_floating("sum", x);
  const Tensor dx = dense(x, x.memory_format());  // any dense layout holds the same elements
  Tensor y = Tensor::empty({}, x.dtype(), x.backend());
  x.backend().sum(x.dtype(), dx.raw_data(), dx.numel(), y.raw_data());
  const Shape shape = x.shape();
  return record(y, "sum", {x}, [shape](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{Tensor::full(shape, g.item(), g.dtype(), g.backend())};
  });
}

Tensor mean(const Tensor& x) {
  TL_CHECK(x.defined() && x.numel() > 0, "mean: needs a non-empty tensor");
  return mul_scalar(sum(x), 1.0 / static_cast<double>(x.numel()));
}

}  // namespace trainlab
