// Plain-loop matrix products for the reference backend. Loop orders keep the innermost loop
// contiguous so -O3 vectorises it; every output element is summed in a fixed order, so results
// do not depend on how the caller splits rows across threads.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trainlab::reference {

// Dot product with 16 independent partial sums (vectorisable without -ffast-math), combined in a
// fixed order.
template <typename T>
inline T dot(const T* a, const T* b, std::int64_t n) {
  constexpr int lanes = 16;
  T partial[lanes] = {};
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (int l = 0; l < lanes; ++l) partial[l] += a[i + l] * b[i + l];
  }
  T total = 0;
  for (int l = 0; l < lanes; ++l) total += partial[l];
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

template <typename T>
inline void axpy_row(T alpha, const T* x, T* y, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) y[j] += alpha * x[j];
}

// C[rows_begin..rows_end, N] = A[M, K] * B[K, N] (rows of C computed by this call only).
// Rows are taken eight at a time so each row of B is read once per block.
template <typename T>
void gemm_nn_rows(std::int64_t rows_begin, std::int64_t rows_end, std::int64_t n, std::int64_t k, const T* a,
                  const T* b, T* c) {
  constexpr std::int64_t block = 8;
  for (std::int64_t i0 = rows_begin; i0 < rows_end; i0 += block) {
    const std::int64_t i1 = std::min(i0 + block, rows_end);
    for (std::int64_t i = i0; i < i1; ++i) std::fill(c + i * n, c + (i + 1) * n, T(0));
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const T* b_row = b + kk * n;
      for (std::int64_t i = i0; i < i1; ++i) axpy_row(a[i * k + kk], b_row, c + i * n, n);
    }
  }
}

// C[rows, N] = A[M, K] * B[N, K]^T: each element a dot product of two contiguous rows.
template <typename T>
void gemm_nt_rows(std::int64_t rows_begin, std::int64_t rows_end, std::int64_t n, std::int64_t k, const T* a,
                  const T* b, T* c) {
  for (std::int64_t i = rows_begin; i < rows_end; ++i) {
    for (std::int64_t j = 0; j < n; ++j) c[i * n + j] = dot(a + i * k, b + j * k, k);
  }
}

// C[rows, N] = A[K, M]^T * B[K, N].
template <typename T>
void gemm_tn_rows(std::int64_t rows_begin, std::int64_t rows_end, std::int64_t m, std::int64_t n, std::int64_t k,
                  const T* a, const T* b, T* c) {
  for (std::int64_t i = rows_begin; i < rows_end; ++i) {
    T* c_row = c + i * n;
    std::fill(c_row, c_row + n, T(0));
    for (std::int64_t kk = 0; kk < k; ++kk) axpy_row(a[kk * m + i], b + kk * n, c_row, n);
  }
}

}  // namespace trainlab::reference
