// Element types and the bf16/f16 storage conversions (round-to-nearest-even from f32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace trainlab {

// f32/f64 compute types; bf16/f16 storage types (compute lands with the fast backends);
// i64 holds labels and pooling indices and is never differentiated.
enum class DType : std::uint8_t { f32, f64, bf16, f16, i64 };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses "f32", "f64", "bf16", "f16", "i64"; throws Error naming the value and the allowed ones.
DType parse_dtype(const std::string& name);
bool is_floating(DType dtype);

inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float bits_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// bf16 is the top half of an f32. Rounding to nearest even on the dropped 16 bits; NaN stays a
// (quiet) NaN with its sign, Inf stays Inf, finite values too large round to Inf, and f32
// subnormals round to bf16 subnormals or zero exactly as the bit pattern dictates.
inline std::uint16_t f32_to_bf16_bits(float value) {
  std::uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}
inline float bf16_bits_to_f32(std::uint16_t bits) { return bits_float(static_cast<std::uint32_t>(bits) << 16); }

// IEEE binary16 with round-to-nearest-even, including subnormal results and overflow to Inf
// (values >= 65520 round to Inf; 65504 is the largest finite half).
inline std::uint16_t f32_to_f16_bits(float value) {
  const std::uint32_t f32_infinity = 255u << 23;
  const std::uint32_t f16_overflow = (127u + 16u) << 23;  // 2^16: at or above it the half is Inf
  const std::uint32_t denormal_magic = 126u << 23;        // 0.5f: its ulp is the half subnormal step
  std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  std::uint16_t out;
  if (bits >= f16_overflow) {
    out = bits > f32_infinity ? static_cast<std::uint16_t>(0x7e00u | ((bits >> 13) & 0x3ffu)) : 0x7c00u;
  } else if (bits < (113u << 23)) {
    // Below 2^-14 the result is subnormal: adding 0.5f lets the FPU round at the half's ulp.
    const float shifted = bits_float(bits) + bits_float(denormal_magic);
    out = static_cast<std::uint16_t>(float_bits(shifted) - denormal_magic);
  } else {
    const std::uint32_t mantissa_odd = (bits >> 13) & 1u;
    bits += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + mantissa_odd;
    out = static_cast<std::uint16_t>(bits >> 13);
  }
  return static_cast<std::uint16_t>(out | (sign >> 16));
}

inline float f16_bits_to_f32(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // Inf / NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);  // +-0
  // Subnormal half: value = mantissa * 2^-24, exactly representable as a normal float.
  const float magnitude = static_cast<float>(mantissa) * bits_float(103u << 23);  // 2^-24
  return sign ? -magnitude : magnitude;
}

// Storage types with explicit conversions, so a bf16 buffer is never read as a float by mistake.
struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float value) : bits(f32_to_bf16_bits(value)) {}
  explicit operator float() const { return bf16_bits_to_f32(bits); }
};
struct f16 {
  std::uint16_t bits = 0;
  f16() = default;
  explicit f16(float value) : bits(f32_to_f16_bits(value)) {}
  explicit operator float() const { return f16_bits_to_f32(bits); }
};

}  // namespace trainlab
