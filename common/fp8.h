// The two 8-bit floating-point formats of Hopper's tensor cores (the OCP
// "FP8" formats), emulated exactly on the host: the CPU reference quantizes
// with these, and every GPU cast is checked against them bit for bit.
//
//   e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, the
//         all-ones pattern S.1111.111 is NaN, so the largest finite is
//         S.1111.110 = 448. Smallest subnormal 2^-9. For weights/activations.
//   e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-style inf
//         (S.11111.00) and NaNs; largest finite 57344, smallest subnormal
//         2^-16. For gradients (range over precision).
//
// Conversion from f32 rounds to nearest, ties to even, and saturates: a
// finite value or an infinity beyond the largest finite becomes +-max (what
// the hardware's cvt.rn.satfinite does; training never wants inf from a
// cast), NaN becomes the canonical NaN 0x7f, and the sign of zero is kept.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

namespace fsdp {

enum class Fp8 : uint8_t { e4m3, e5m2 };

struct Fp8Spec {
  int mant_bits, bias;
  uint8_t max_code;  // the largest finite magnitude's bit pattern
  float max;         // its value
};
inline constexpr Fp8Spec fp8_spec(Fp8 f) {
  return f == Fp8::e4m3 ? Fp8Spec{3, 7, 0x7e, 448.0f} : Fp8Spec{2, 15, 0x7b, 57344.0f};
}
inline const char* fp8_name(Fp8 f) {
  return f == Fp8::e4m3 ? "e4m3" : "e5m2";
}

// Per-tensor scaling: the factor that maps amax onto the format's largest
// finite value, 1 when there is nothing to scale by (amax 0, inf or NaN).
// The GPU's quantize kernel computes it with the same f32 operations.
inline float fp8_scale(float amax, Fp8 f) {
  return amax > 0.0f && amax <= FLT_MAX ? fp8_spec(f).max / amax : 1.0f;
}

inline float fp8_to_f32(uint8_t code, Fp8 f) {
  const Fp8Spec s = fp8_spec(f);
  const bool neg = code & 0x80;
  const int mag = code & 0x7f, e = mag >> s.mant_bits, m = mag & ((1 << s.mant_bits) - 1);
  const int e_max = (1 << (7 - s.mant_bits)) - 1;
  float v;
  if (f == Fp8::e4m3 && mag == 0x7f) {
    v = NAN;
  } else if (f == Fp8::e5m2 && e == e_max) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {  // subnormal: m * 2^(1 - bias - mant_bits)
    v = std::ldexp(float(m), 1 - s.bias - s.mant_bits);
  } else {
    v = std::ldexp(float((1 << s.mant_bits) + m), e - s.bias - s.mant_bits);
  }
  return neg ? -v : v;
}

inline uint8_t f32_to_fp8(float x, Fp8 f) {
  const Fp8Spec s = fp8_spec(f);
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (!(a <= s.max)) return sign | s.max_code;  // beyond max, or inf: saturate
  // The value in units of the smallest subnormal, 2^(1 - bias - mant_bits),
  // for subnormals; for normals, the significand in units of its own ulp.
  // Both scalings are by powers of two, so exact; nearbyint then rounds half
  // to even. A carry out of the mantissa lands in the exponent field, which
  // is the right encoding (also from the largest subnormal to the smallest
  // normal).
  int e = 0;
  std::frexp(a, &e);                      // a = f * 2^e, f in [0.5, 1)
  const int min_normal_exp = 1 - s.bias;  // 2^min_normal_exp is the smallest normal
  int code;
  if (a == 0.0f || e - 1 < min_normal_exp) {
    code = int(std::nearbyint(std::ldexp(a, s.bias - 1 + s.mant_bits)));
  } else {
    const int q = int(std::nearbyint(std::ldexp(a, s.mant_bits - (e - 1))));  // in [2^m, 2^(m+1)]
    code = ((e - 1 + s.bias) << s.mant_bits) + (q - (1 << s.mant_bits));
  }
  if (code > s.max_code) code = s.max_code;  // rounded up past max: saturate
  return uint8_t(sign | code);
}

}  // namespace fsdp
