// Branch-free exp and tanh for f32 loops that the compiler vectorises (the C library's expf and
// tanhf are calls, one element at a time: GPT's GELU spent 45% of a training step in tanhf). exp is
// Cephes' expf: x clamped to [-87.3, 88] (above 88: exp(88), 1.6e38), x = n ln2 + r with |r| <= ln2 / 2, a degree-6
// polynomial in r, scaled by 2^n built in the exponent bits; within 2 ulp of expf. tanh(u) =
// 1 - 2 / (1 + exp(2u)): within 1e-7 of tanhf absolutely (the form GELU's 1 + tanh needs). In
// double (the reference arithmetic of an f64 run) both are the C library's.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace trainlab::cpu {

inline float fast_exp(float x) {
  x = std::min(std::max(x, -87.3365447f), 88.0f);
  // n = round(x / ln 2) by the 1.5 x 2^23 trick (std::floor and nearbyint keep a loop scalar:
  // they may raise FP exceptions); |x / ln 2| < 2^22 here, so it is exact.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;  // ln 2 in two parts: r exact to f32
  r -= n * -2.12194440e-4f;
  const float z = r * r;
  const float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
                   1.6666665459e-1f) *
                      r +
                  5.0000001201e-1f;
  // 2^n in the exponent bits: n in [-126, 127] after the clamp.
  return (p * z + r + 1.0f) * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}

inline double fast_exp(double x) { return std::exp(x); }

inline float fast_tanh(float u) { return 1.0f - 2.0f / (1.0f + fast_exp(2.0f * u)); }
inline double fast_tanh(double u) { return std::tanh(u); }

}  // namespace trainlab::cpu
