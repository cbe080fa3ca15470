// Plain-loop matrix products for the reference backend. Loop orders keep the innermost loop
// contiguous so -O3 vectorises it; every output element is summed in a fixed order, so results
// do not depend on how the caller splits rows across threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINLAB_REFERENCE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TRAINLAB_REFERENCE_ASAN 1
#endif
#ifdef TRAINLAB_REFERENCE_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace trainlab::reference {

// Under AddressSanitizer (the sanitizer build) the two innermost loops below are checked a row at a
// time instead of an element at a time: `checked_row` asks ASan whether any byte of the row is
// poisoned and, if so, reads that byte from instrumented code, so the report is ASan's usual one
// (heap-buffer-overflow and the stack); the loop itself is not instrumented, by ASan or by UBSan
// (whose pointer-overflow check on every index also kept it scalar), and vectorises. It is most of
// the comm tests' time: every DDP, ZeRO and pipeline test trains on this backend. Elsewhere both
// are no-ops.
#ifdef TRAINLAB_REFERENCE_ASAN
#define TRAINLAB_ROW_LOOP __attribute__((no_sanitize("address", "undefined")))
inline void checked_row(const void* row, std::int64_t elements, std::size_t element_bytes) {
  const std::size_t bytes = static_cast<std::size_t>(elements) * element_bytes;
  if (void* bad = __asan_region_is_poisoned(const_cast<void*>(row), bytes)) {
    [[maybe_unused]] const volatile char touched = *static_cast<const volatile char*>(bad);
  }
}
#else
#define TRAINLAB_ROW_LOOP
inline void checked_row(const void*, std::int64_t, std::size_t) {}
#endif

// Dot product with 16 independent partial sums (vectorisable without -ffast-math), combined in a
// fixed order.
template <typename T>
TRAINLAB_ROW_LOOP inline T dot_unchecked(const T* a, const T* b, std::int64_t n) {
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
inline T dot(const T* a, const T* b, std::int64_t n) {
  checked_row(a, n, sizeof(T));
  checked_row(b, n, sizeof(T));
  return dot_unchecked(a, b, n);
}

template <typename T>
TRAINLAB_ROW_LOOP inline void axpy_row_unchecked(T alpha, const T* x, T* y, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) y[j] += alpha * x[j];
}

template <typename T>
inline void axpy_row(T alpha, const T* x, T* y, std::int64_t n) {
  checked_row(x, n, sizeof(T));
  checked_row(y, n, sizeof(T));
  axpy_row_unchecked(alpha, x, y, n);
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
