// model/rope.h: RoPE's frequencies, plain and with Llama 3.1's scaling. The
// scaled values are checked against transformers' own rope in
// tests/tools/test_import_hf.py (a Llama 3.2-like model); here, the bands.
#include <gtest/gtest.h>

#include <cmath>

#include "model/rope.h"

namespace fsdp {
namespace {

constexpr double kPi = 3.14159265358979323846;

TEST(Rope, PlainIsThetaToTheMinusTwoIOverD) {
  const Rope r(10000.0f);
  for (int i : {0, 5, 31}) EXPECT_DOUBLE_EQ(rope_inv_freq(r, i, 64), std::pow(1e4, -2.0 * i / 64));
}

TEST(Rope, Llama3ScalingKeepsFastDividesSlowAndBlendsBetween) {
  // Llama 3.1's values: factor 8, low 1, high 4, pretrained context 8192.
  const Rope plain(500000.0f);
  const Rope r(500000.0f, {8.0f, 1.0f, 4.0f, 8192});
  int fast = 0, slow = 0, blended = 0;
  double last = 2;
  for (int i = 0; i < 64; ++i) {
    const double f = rope_inv_freq(plain, i, 128), g = rope_inv_freq(r, i, 128);
    const double wavelen = 2 * kPi / f;
    if (wavelen < 8192 / 4.0) {
      EXPECT_DOUBLE_EQ(g, f) << i;
      ++fast;
    } else if (wavelen > 8192 / 1.0) {
      EXPECT_DOUBLE_EQ(g, f / 8) << i;
      ++slow;
    } else {
      // Between: (1 - s) f / 8 + s f with s = (8192 / wavelen - 1) / 3, in (0, 1).
      const double s = (8192 / wavelen - 1) / 3;
      EXPECT_GT(s, 0);
      EXPECT_LT(s, 1);
      EXPECT_NEAR(g, (1 - s) * f / 8 + s * f, 1e-15 * f) << i;
      EXPECT_GT(g, f / 8);
      EXPECT_LT(g, f);
      ++blended;
    }
    EXPECT_LT(g, last) << "frequencies fall with i";  // the bands join without a jump back
    last = g;
  }
  EXPECT_GT(fast, 0);
  EXPECT_GT(slow, 0);
  EXPECT_GT(blended, 0);
}

}  // namespace
}  // namespace fsdp
