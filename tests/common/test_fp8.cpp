// The FP8 conversions against the formats' definitions (common/fp8.h): the
// GPU's casts are later checked bit for bit against these, so these must be
// right by construction, not by agreement with another implementation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/fp8.h"

namespace fsdp {
namespace {

constexpr Fp8 kFormats[] = {Fp8::e4m3, Fp8::e5m2};

bool is_nan_code(uint8_t c, Fp8 f) {
  const int mag = c & 0x7f;
  return f == Fp8::e4m3 ? mag == 0x7f : mag > 0x7c;
}
bool is_inf_code(uint8_t c, Fp8 f) {
  return f == Fp8::e5m2 && (c & 0x7f) == 0x7c;
}

TEST(Fp8, KnownValues) {
  EXPECT_EQ(fp8_to_f32(0x38, Fp8::e4m3), 1.0f);
  EXPECT_EQ(fp8_to_f32(0x7e, Fp8::e4m3), 448.0f);
  EXPECT_EQ(fp8_to_f32(0xfe, Fp8::e4m3), -448.0f);
  EXPECT_EQ(fp8_to_f32(0x08, Fp8::e4m3), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_to_f32(0x01, Fp8::e4m3), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_to_f32(0x07, Fp8::e4m3), 7 * std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7f, Fp8::e4m3)));
  EXPECT_EQ(fp8_to_f32(0x3c, Fp8::e5m2), 1.0f);
  EXPECT_EQ(fp8_to_f32(0x7b, Fp8::e5m2), 57344.0f);
  EXPECT_EQ(fp8_to_f32(0x04, Fp8::e5m2), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_to_f32(0x01, Fp8::e5m2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_to_f32(0x7c, Fp8::e5m2), INFINITY);
  EXPECT_EQ(fp8_to_f32(0xfc, Fp8::e5m2), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7d, Fp8::e5m2)));
  EXPECT_EQ(fp8_spec(Fp8::e4m3).max, fp8_to_f32(fp8_spec(Fp8::e4m3).max_code, Fp8::e4m3));
  EXPECT_EQ(fp8_spec(Fp8::e5m2).max, fp8_to_f32(fp8_spec(Fp8::e5m2).max_code, Fp8::e5m2));
}

// Every finite code decodes to a value that encodes back to the same code,
// and decoding is strictly increasing over the positive codes.
TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (Fp8 f : kFormats) {
    int finite = 0;
    float prev = -1;
    for (int c = 0; c < 256; ++c) {
      const auto code = uint8_t(c);
      if (is_nan_code(code, f) || is_inf_code(code, f)) continue;
      ++finite;
      const float v = fp8_to_f32(code, f);
      EXPECT_EQ(f32_to_fp8(v, f), code) << fp8_name(f) << " code " << c << " value " << v;
      EXPECT_EQ(std::signbit(v), c >= 0x80) << c;
      if (c < 0x80) {
        EXPECT_GT(v, prev) << fp8_name(f) << " code " << c;
        prev = v;
      }
    }
    EXPECT_EQ(finite, f == Fp8::e4m3 ? 254 : 248) << fp8_name(f);
  }
}

// Between two neighbouring codes: below the midpoint rounds down, above it
// up, and the midpoint itself to the code with an even mantissa (even code).
TEST(Fp8, RoundsToNearestTiesToEven) {
  for (Fp8 f : kFormats) {
    const uint8_t top = fp8_spec(f).max_code;
    for (int c = 0; c < top; ++c) {
      for (float sign : {1.0f, -1.0f}) {
        const uint8_t s = sign < 0 ? 0x80 : 0;
        const float lo = fp8_to_f32(uint8_t(c), f), hi = fp8_to_f32(uint8_t(c + 1), f);
        const float mid = (lo + hi) / 2;  // exact: a few bits wider than fp8
        const float below = std::nextafter(mid, lo), above = std::nextafter(mid, hi);
        EXPECT_EQ(f32_to_fp8(sign * below, f), s | c) << fp8_name(f) << " " << c;
        EXPECT_EQ(f32_to_fp8(sign * above, f), s | (c + 1)) << fp8_name(f) << " " << c;
        EXPECT_EQ(f32_to_fp8(sign * mid, f), s | (c % 2 == 0 ? c : c + 1))
            << fp8_name(f) << " tie between " << c << " and " << c + 1;
      }
    }
  }
}

TEST(Fp8, SaturatesAndKeepsNanAndSignedZero) {
  for (Fp8 f : kFormats) {
    const Fp8Spec s = fp8_spec(f);
    for (float big :
         {s.max * 1.01f, s.max * 2, 1e30f, std::numeric_limits<float>::max(), float(INFINITY)}) {
      EXPECT_EQ(f32_to_fp8(big, f), s.max_code) << fp8_name(f) << " " << big;
      EXPECT_EQ(f32_to_fp8(-big, f), 0x80 | s.max_code) << fp8_name(f) << " " << -big;
    }
    EXPECT_EQ(f32_to_fp8(NAN, f), 0x7f);
    EXPECT_EQ(f32_to_fp8(-NAN, f), 0x7f);
    EXPECT_EQ(f32_to_fp8(0.0f, f), 0x00);
    EXPECT_EQ(f32_to_fp8(-0.0f, f), 0x80);
    // Half the smallest subnormal is a tie with zero: even, so zero; above it, the subnormal.
    const float tiny = fp8_to_f32(0x01, f);
    EXPECT_EQ(f32_to_fp8(tiny / 2, f), 0x00);
    EXPECT_EQ(f32_to_fp8(std::nextafter(tiny / 2, 1.0f), f), 0x01);
    EXPECT_EQ(f32_to_fp8(-tiny / 4, f), 0x80);
    EXPECT_EQ(f32_to_fp8(std::numeric_limits<float>::denorm_min(), f), 0x00);
  }
}

}  // namespace
}  // namespace fsdp
