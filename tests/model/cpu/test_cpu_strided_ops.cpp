// The ops that take a row stride (`_ld`: q, k and v as views into the q|k|v
// GEMM's output, SwiGLU's a and b into W1|W3's) against the same ops on
// packed copies: bit for bit the same results, and the columns of the wider
// rows that are not the view's are neither read (they hold NaN) nor written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/cpu/cpu_ops.h"

namespace fsdp {
namespace {

using Vec = std::vector<float>;

Tensor view(Vec& v, int64_t from = 0) {
  return {v.data() + from, DType::f32, int64_t(v.size()) - from};
}

Vec random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (float& x : v) x = u(rng);
  return v;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A q|k|v-like buffer of `tokens` rows of `ld` elements, NaN everywhere but
// the columns [col, col + width), which hold `packed` row by row.
Vec widen(const Vec& packed, int64_t tokens, int64_t width, int64_t ld, int64_t col) {
  Vec wide(size_t(tokens * ld), kNaN);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < width; ++e)
      wide[size_t(t * ld + col + e)] = packed[size_t(t * width + e)];
  return wide;
}

// The columns [col, col + width) of every row, packed; and whether every other
// element of the wide buffer is still NaN.
Vec narrow(const Vec& wide, int64_t tokens, int64_t width, int64_t ld, int64_t col) {
  Vec out(static_cast<size_t>(tokens * width));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < width; ++e) out[size_t(t * width + e)] = wide[size_t(t * ld + col + e)];
  return out;
}
bool rest_untouched(const Vec& wide, int64_t tokens, int64_t width, int64_t ld, int64_t col) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < ld; ++e)
      if ((e < col || e >= col + width) && !std::isnan(wide[size_t(t * ld + e)])) return false;
  return true;
}

// GQA shape; the wide rows are q|k|v's: H + 2 KV heads.
struct Shape {
  int B = 2, T = 5, H = 4, KV = 2, hd = 8;
  int64_t tokens() const { return int64_t(B) * T; }
  int64_t ld() const { return int64_t(H + 2 * KV) * hd; }
};

// norm_rope on k's view (columns H*hd on) of the wide buffer, forward and
// backward, against norm_rope on the packed k.
TEST(CpuStridedOps, NormRopeOnAViewIsNormRopeOnThePackedRows) {
  const Shape s;
  const float eps = 1e-5f, theta = 10000.0f;
  const int64_t width = int64_t(s.KV) * s.hd, col = int64_t(s.H) * s.hd, n = s.tokens() * width;
  const int rows = int(s.tokens()) * s.KV;
  CpuOps ops;
  std::mt19937 rng(11);
  Vec x = random_vec(rng, size_t(n), -2.0f, 2.0f), g = random_vec(rng, size_t(s.hd), 0.5f, 1.5f);
  Vec xw = widen(x, s.tokens(), width, s.ld(), col);

  Vec want_y(static_cast<size_t>(n)), want_r(static_cast<size_t>(rows)), y(static_cast<size_t>(n)),
      r(static_cast<size_t>(rows));
  ops.norm_rope(view(want_y), view(want_r), view(x), view(g), s.B, s.T, s.KV, s.hd, eps, theta,
                width);
  ops.norm_rope(view(y), view(r), view(xw, col), view(g), s.B, s.T, s.KV, s.hd, eps, theta, s.ld());
  EXPECT_EQ(y, want_y);
  EXPECT_EQ(r, want_r);

  const Vec dy = random_vec(rng, size_t(n));
  Vec dy1 = dy, dx(static_cast<size_t>(n)), dg(size_t(s.hd), 0.0f), am(1);
  ops.norm_rope_backward(view(dx), view(dg), view(dy1), view(x), view(g), view(r), s.B, s.T, s.KV,
                         s.hd, theta, view(am), width);
  Vec dy2 = dy, dxw(size_t(s.tokens() * s.ld()), kNaN), dg2(size_t(s.hd), 0.0f), am2(1);
  ops.norm_rope_backward(view(dxw, col), view(dg2), view(dy2), view(xw, col), view(g), view(r), s.B,
                         s.T, s.KV, s.hd, theta, view(am2), s.ld());
  EXPECT_EQ(narrow(dxw, s.tokens(), width, s.ld(), col), dx);
  EXPECT_TRUE(rest_untouched(dxw, s.tokens(), width, s.ld(), col)) << "dx wrote outside its view";
  EXPECT_EQ(dg2, dg);
  EXPECT_EQ(am2, am) << "max |dx|";

  // The view must reach the end of its last row; a stride below the row width is an error.
  Vec short_x(size_t((s.tokens() - 1) * s.ld() + width - 1));
  EXPECT_ANY_THROW(ops.norm_rope(view(y), view(r), view(short_x), view(g), s.B, s.T, s.KV, s.hd,
                                 eps, theta, s.ld()));
  EXPECT_ANY_THROW(ops.norm_rope(view(y), view(r), view(x), view(g), s.B, s.T, s.KV, s.hd, eps,
                                 theta, width - 1));
}

// attention with v (and dv) as the last columns of the wide buffer.
TEST(CpuStridedOps, AttentionWithAStridedVIsAttentionOnThePackedV) {
  const Shape s;
  const int64_t nq = s.tokens() * s.H * s.hd, width = int64_t(s.KV) * s.hd;
  const int64_t nkv = s.tokens() * width, col = int64_t(s.H + s.KV) * s.hd;
  const int64_t nl = int64_t(s.B) * s.H * s.T;
  CpuOps ops;
  std::mt19937 rng(12);
  Vec q = random_vec(rng, size_t(nq), -2.0f, 2.0f), k = random_vec(rng, size_t(nkv), -2.0f, 2.0f);
  Vec v = random_vec(rng, size_t(nkv)), R = random_vec(rng, size_t(nq));
  Vec vw = widen(v, s.tokens(), width, s.ld(), col);

  Vec out(static_cast<size_t>(nq)), lse(static_cast<size_t>(nl)), out2(static_cast<size_t>(nq)),
      lse2(static_cast<size_t>(nl));
  ops.attention(view(out), view(lse), view(q), view(k), view(v), s.B, s.T, s.H, s.KV, s.hd, width);
  ops.attention(view(out2), view(lse2), view(q), view(k), view(vw, col), s.B, s.T, s.H, s.KV, s.hd,
                s.ld());
  EXPECT_EQ(out2, out);
  EXPECT_EQ(lse2, lse);

  Vec dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nkv)), dv(static_cast<size_t>(nkv));
  ops.attention_backward(view(dq), view(dk), view(dv), view(R), view(out), view(lse), view(q),
                         view(k), view(v), s.B, s.T, s.H, s.KV, s.hd, width);
  Vec dq2(static_cast<size_t>(nq)), dk2(static_cast<size_t>(nkv)),
      dvw(size_t(s.tokens() * s.ld()), kNaN);
  ops.attention_backward(view(dq2), view(dk2), view(dvw, col), view(R), view(out), view(lse),
                         view(q), view(k), view(vw, col), s.B, s.T, s.H, s.KV, s.hd, s.ld());
  EXPECT_EQ(dq2, dq);
  EXPECT_EQ(dk2, dk);
  EXPECT_EQ(narrow(dvw, s.tokens(), width, s.ld(), col), dv);
  EXPECT_TRUE(rest_untouched(dvw, s.tokens(), width, s.ld(), col)) << "dv wrote outside its view";
}

// SwiGLU on a and b side by side in rows of 2 cols (the W1|W3 GEMM's output).
TEST(CpuStridedOps, SwigluOnTheHalvesOfARowIsSwigluOnPackedHalves) {
  const int rows = 6, cols = 5;
  const int64_t n = int64_t(rows) * cols, ld = 2 * cols;
  CpuOps ops;
  std::mt19937 rng(13);
  Vec a = random_vec(rng, size_t(n), -4.0f, 4.0f), b = random_vec(rng, size_t(n), -2.0f, 2.0f);
  Vec ab = widen(a, rows, cols, ld, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ab[size_t(r * ld + cols + c)] = b[size_t(r * cols + c)];

  Vec s(static_cast<size_t>(n)), s2(static_cast<size_t>(n)), am(1), am2(1);
  ops.swiglu(view(s), view(a), view(b), rows, cols, cols, view(am));
  ops.swiglu(view(s2), view(ab), view(ab, cols), rows, cols, ld, view(am2));
  EXPECT_EQ(s2, s);
  EXPECT_EQ(am2, am) << "max |s|";

  const Vec ds = random_vec(rng, size_t(n));
  Vec ds1 = ds, da(static_cast<size_t>(n)), db(static_cast<size_t>(n));
  ops.swiglu_backward(view(da), view(db), view(ds1), view(a), view(b), rows, cols, cols, view(am));
  float want = 0.0f;  // the joint amax: over da and db
  for (size_t i = 0; i < da.size(); ++i)
    want = std::fmax(want, std::fmax(std::fabs(da[i]), std::fabs(db[i])));
  EXPECT_EQ(am[0], want) << "max |da|, |db|";
  Vec dab(static_cast<size_t>(rows * ld), kNaN);
  ops.swiglu_backward(view(dab), view(dab, cols), view(ds1), view(ab), view(ab, cols), rows, cols,
                      ld, view(am2));
  EXPECT_EQ(narrow(dab, rows, cols, ld, 0), da);
  EXPECT_EQ(narrow(dab, rows, cols, ld, cols), db);
  EXPECT_EQ(am2, am);
  EXPECT_ANY_THROW(ops.swiglu(view(s), view(ab), view(ab, cols), rows, cols, cols - 1, {}));
}

}  // namespace
}  // namespace fsdp
