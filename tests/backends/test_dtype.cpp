// bf16 and f16 conversions from f32: round to nearest even, NaN, Inf, signed zero, subnormals,
// overflow, and ties.
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {
float f(std::uint32_t bits) { return bits_float(bits); }
}  // namespace

TEST_CASE("bf16: exact values, specials and signed zero", "[dtype]") {
  CHECK(f32_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(f32_to_bf16_bits(-2.0f) == 0xc000);
  CHECK(f32_to_bf16_bits(0.0f) == 0x0000);
  CHECK(f32_to_bf16_bits(-0.0f) == 0x8000);
  CHECK(f32_to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(f32_to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xff80);
  // NaN stays NaN (quiet), keeps its sign, and never rounds into Inf.
  const std::uint16_t nan = f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(bf16_bits_to_f32(nan)));
  CHECK(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(f(0x7f800001u)))));  // signalling NaN, low payload only
  CHECK(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(f(0x7fffffffu)))));  // would carry into Inf if rounded
  CHECK((f32_to_bf16_bits(f(0xffc00000u)) & 0x8000) != 0);                // -NaN keeps its sign
  // Round trip of every bf16 value that is not NaN.
  int mismatches = 0;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float v = bf16_bits_to_f32(static_cast<std::uint16_t>(b));
    if (std::isnan(v)) continue;
    if (f32_to_bf16_bits(v) != b) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("bf16: round to nearest, ties to even", "[dtype]") {
  // 1.0 = 0x3f800000; bf16 keeps 7 mantissa bits, so one bf16 ulp at 1.0 is 2^-7 (bit 16).
  CHECK(f32_to_bf16_bits(f(0x3f808000u)) == 0x3f80);  // exactly half an ulp above 1.0 (even): down
  CHECK(f32_to_bf16_bits(f(0x3f818000u)) == 0x3f82);  // half an ulp above 0x3f81 (odd): up to even
  CHECK(f32_to_bf16_bits(f(0x3f808001u)) == 0x3f81);  // just above half: up
  CHECK(f32_to_bf16_bits(f(0x3f807fffu)) == 0x3f80);  // just below half: down
  CHECK(f32_to_bf16_bits(f(0xbf818000u)) == 0xbf82);  // negative ties behave the same
  // The largest finite floats round up to Inf; the largest bf16 stays.
  CHECK(f32_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(f32_to_bf16_bits(f(0x7f7f0000u)) == 0x7f7f);
}

TEST_CASE("bf16: subnormals", "[dtype]") {
  // bf16 has f32's exponent: f32 subnormals keep their top 7 mantissa bits.
  CHECK(f32_to_bf16_bits(f(0x00010000u)) == 0x0001);  // smallest bf16 subnormal, exact
  CHECK(f32_to_bf16_bits(f(0x00008000u)) == 0x0000);  // half of it: tie to even (0)
  CHECK(f32_to_bf16_bits(f(0x00018000u)) == 0x0002);  // 1.5 of it: tie to even (2)
  CHECK(f32_to_bf16_bits(f(0x00008001u)) == 0x0001);  // above the tie
  CHECK(f32_to_bf16_bits(f(0x007fffffu)) == 0x0080);  // largest f32 subnormal rounds up to the smallest normal
  CHECK(bf16_bits_to_f32(0x0001) == f(0x00010000u));
}

TEST_CASE("f16: exact values, specials and signed zero", "[dtype]") {
  CHECK(f32_to_f16_bits(1.0f) == 0x3c00);
  CHECK(f32_to_f16_bits(-2.0f) == 0xc000);
  CHECK(f32_to_f16_bits(65504.0f) == 0x7bff);  // largest finite half
  CHECK(f32_to_f16_bits(0.0f) == 0x0000);
  CHECK(f32_to_f16_bits(-0.0f) == 0x8000);
  CHECK(f32_to_f16_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(f32_to_f16_bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  const std::uint16_t nan = f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  CHECK(std::isnan(f16_bits_to_f32(f32_to_f16_bits(f(0x7f800001u)))));  // payload below f16's bits stays NaN
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float v = f16_bits_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(v)) continue;
    if (f32_to_f16_bits(v) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("f16: overflow and ties", "[dtype]") {
  CHECK(f32_to_f16_bits(65519.996f) == 0x7bff);  // below the midpoint to 2^16: stays finite
  CHECK(f32_to_f16_bits(65520.0f) == 0x7c00);    // the tie between 65504 (odd) and 65536: to even, Inf
  CHECK(f32_to_f16_bits(1e6f) == 0x7c00);
  CHECK(f32_to_f16_bits(-1e6f) == 0xfc00);
  // 1 + 2^-11 is half an ulp above 1.0 (even): down; 1 + 3 * 2^-11 is a tie above 0x3c01: up.
  CHECK(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
}

TEST_CASE("f16: subnormals", "[dtype]") {
  const float smallest = std::ldexp(1.0f, -24);  // the smallest half subnormal
  CHECK(f32_to_f16_bits(smallest) == 0x0001);
  CHECK(f32_to_f16_bits(smallest / 2) == 0x0000);              // tie to even: 0
  CHECK(f32_to_f16_bits(smallest * 1.5f) == 0x0002);           // tie to even: 2
  CHECK(f32_to_f16_bits(smallest * 0.51f) == 0x0001);          // above the tie
  CHECK(f32_to_f16_bits(-smallest * 0.25f) == 0x8000);         // underflows to -0
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -14)) == 0x0400);     // the smallest normal
  CHECK(f32_to_f16_bits(std::ldexp(1023.5f, -24)) == 0x0400);  // tie between 1023 (odd) and 1024: up, normal
  CHECK(f16_bits_to_f32(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(f32_to_f16_bits(f(0x00000001u)) == 0x0000);  // an f32 subnormal is far below half's range
}

TEST_CASE("cast kernels agree with the scalar conversions", "[dtype]") {
  Generator gen(3);
  const Tensor x = Tensor::normal({1000}, gen, DType::f32, ref());
  const auto xs = x.to_vector<float>();
  const auto b = x.to(DType::bf16).to_vector<bf16>();
  const auto h = x.to(DType::f16).to_vector<f16>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(b[i].bits == f32_to_bf16_bits(xs[i]));
    CHECK(h[i].bits == f32_to_f16_bits(xs[i]));
  }
  // bf16 -> f32 is exact.
  const auto back = x.to(DType::bf16).to(DType::f32).to_vector<float>();
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(back[i] == bf16_bits_to_f32(b[i].bits));
  CHECK(parse_dtype("bf16") == DType::bf16);
  REQUIRE_THROWS_CONTAINING(parse_dtype("f8"), "unknown dtype 'f8'", "f32, f64, bf16, f16, i64");
}
