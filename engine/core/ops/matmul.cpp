// A batch of matrix products, attention's two (scores = q k^T, then probs v):
//   forward    y[..., m, n] = a[..., m, k] b[..., k, n]   (the same batch dimensions, no broadcasting)
//   backward   da = dy b^T;  db = a^T dy
// An operand that is a transposed view of a dense buffer (k.transpose(-2, -1)) is read in place,
// the kernel told so (MatmulShape's trans flags), and so are the backward's transposes: nothing is
// copied but an operand in some other layout.
#include "engine/core/autocast.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

// Whether t's strides are `expected` (a dimension of size 1 may have any stride).
bool has_strides(const Tensor& t, const Shape& expected) {
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) != 1 && t.strides()[static_cast<std::size_t>(d)] != expected[static_cast<std::size_t>(d)])
      return false;
  }
  return true;
}

// An operand as the kernel reads it: a detached handle on a dense buffer, and whether each of its
// matrices is stored transposed ([.., cols, rows] dense).
struct MatmulOperand {
  Tensor data;
  bool transposed;
};

MatmulOperand matmul_operand(const Tensor& t) {
  const std::int64_t d = t.dim(), rows = t.size(d - 2), cols = t.size(d - 1);
  Shape dense(static_cast<std::size_t>(d)), swapped(static_cast<std::size_t>(d));
  std::int64_t step = rows * cols;
  dense[static_cast<std::size_t>(d - 1)] = 1;
  dense[static_cast<std::size_t>(d - 2)] = cols;
  swapped[static_cast<std::size_t>(d - 1)] = rows;
  swapped[static_cast<std::size_t>(d - 2)] = 1;
  for (std::int64_t i = d - 3; i >= 0; --i) {
    dense[static_cast<std::size_t>(i)] = swapped[static_cast<std::size_t>(i)] = step;
    step *= t.size(i);
  }
  const Tensor detached = t.detach();
  if (has_strides(t, dense)) return {detached, false};
  if (has_strides(t, swapped)) return {detached, true};
  return {detached.contiguous(), false};
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  TL_SPAN("matmul.forward");
  ops_detail::check_defined("matmul", "a", a_in);
  ops_detail::check_defined("matmul", "b", b_in);
  const Tensor a_cast = autocast_low(a_in), b_cast = autocast_low(b_in);
  ops_detail::check_compatible("matmul", a_cast, b_cast);
  ops_detail::check_floating("matmul", a_cast);
  TL_CHECK(a_cast.dim() >= 2 && a_cast.dim() == b_cast.dim(),
           "matmul: a and b must be [..., m, k] and [..., k, n] of the same rank >= 2, got " +
               shape_str(a_cast.shape()) + " and " + shape_str(b_cast.shape()));
  const std::int64_t d = a_cast.dim();
  for (std::int64_t i = 0; i < d - 2; ++i)
    TL_CHECK(a_cast.size(i) == b_cast.size(i), "matmul: batch dimensions differ: " + shape_str(a_cast.shape()) +
                                                   " and " + shape_str(b_cast.shape()) + " (no broadcasting)");
  TL_CHECK(a_cast.size(d - 1) == b_cast.size(d - 2),
           "matmul: a " + shape_str(a_cast.shape()) + " has k = " + std::to_string(a_cast.size(d - 1)) + " but b " +
               shape_str(b_cast.shape()) + " has k = " + std::to_string(b_cast.size(d - 2)));
  const MatmulOperand a = matmul_operand(a_cast), b = matmul_operand(b_cast);
  const std::int64_t m = a_cast.size(d - 2), k = a_cast.size(d - 1), n = b_cast.size(d - 1);
  const std::int64_t batch = a_cast.numel() / (m * k == 0 ? 1 : m * k);
  Shape out_shape = a_cast.shape();
  out_shape.back() = n;
  Backend& be = a.data.backend();
  const DType dtype = a.data.dtype();
  Tensor y = Tensor::empty(out_shape, dtype, be);
  if (y.numel() > 0) {
    if (k == 0) {
      be.fill(dtype, y.raw_data(), y.numel(), 0.0);
    } else {
      be.matmul(dtype, MatmulShape{batch, m, n, k, a.transposed, b.transposed}, a.data.raw_data(), b.data.raw_data(),
                y.raw_data());
    }
  }
  const Shape a_shape = a_cast.shape(), b_shape = b_cast.shape();
  return record(y, "matmul", {a_cast, b_cast}, [=](const Tensor& g, const std::vector<bool>& needs) {
    const Tensor dy = ops_detail::dense(g);
    Backend& bk = dy.backend();
    Tensor da, db;
    if (needs[0]) {  // da [m, k] = dy [m, n] b^T
      da = Tensor::empty(a_shape, dy.dtype(), bk);
      if (n == 0)
        bk.fill(dy.dtype(), da.raw_data(), da.numel(), 0.0);
      else if (da.numel() > 0)
        bk.matmul(dy.dtype(), MatmulShape{batch, m, k, n, false, !b.transposed}, dy.raw_data(), b.data.raw_data(),
                  da.raw_data());
    }
    if (needs[1]) {  // db [k, n] = a^T dy [m, n]
      db = Tensor::empty(b_shape, dy.dtype(), bk);
      if (m == 0)
        bk.fill(dy.dtype(), db.raw_data(), db.numel(), 0.0);
      else if (db.numel() > 0)
        bk.matmul(dy.dtype(), MatmulShape{batch, k, n, m, !a.transposed, false}, a.data.raw_data(), dy.raw_data(),
                  db.raw_data());
    }
    return std::vector<Tensor>{da, db};
  });
}

}  // namespace trainlab
