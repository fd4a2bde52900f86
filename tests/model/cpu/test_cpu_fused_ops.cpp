// The fused ops of the CPU reference against the unfused ops they stand for:
// linear_add against linear then add (r separate and r aliasing y), and
// norm_rope against rmsnorm then rope, its backward against rope_backward
// then rmsnorm_backward composed by hand. The reference defines the fused ops
// as these compositions, so results must agree bit for bit; the op table's
// gradient mode (tests/model/op_table) checks norm_rope's gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/cpu/cpu_ops.h"

namespace fsdp {
namespace {

using Vec = std::vector<float>;

Tensor view(Vec& v) {
  return {v.data(), DType::f32, int64_t(v.size())};
}

// Uniform in [lo, hi), never exactly zero.
Vec random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (float& x : v) {
    do x = u(rng);
    while (x == 0.0f);
  }
  return v;
}

Vec nan_vec(size_t n) {
  return Vec(n, std::numeric_limits<float>::quiet_NaN());
}

TEST(CpuFusedOps, LinearAddIsLinearThenAdd) {
  const int M = 5, N = 7, K = 9;
  CpuOps ops;
  std::mt19937 rng(3);
  Vec x = random_vec(rng, M * K), w = random_vec(rng, N * K), r = random_vec(rng, M * N);
  const Vec r0 = r;
  Vec want = nan_vec(M * N);
  ops.linear(view(want), view(x), view(w), M, N, K);
  ops.add(view(want), view(want), view(r), M * N);

  Vec y = nan_vec(M * N);
  ops.linear_add(view(y), view(x), view(w), view(r), M, N, K);
  EXPECT_EQ(y, want);
  EXPECT_EQ(r, r0) << "r is an input";

  // r aliasing y: y holds the residual on entry, as the residual stream calls it.
  Vec yr = r0;
  ops.linear_add(view(yr), view(x), view(w), view(yr), M, N, K);
  EXPECT_EQ(yr, want);

  // Buffers larger than the call needs are fine; a short one is an error.
  Vec small(M * N - 1);
  EXPECT_ANY_THROW(ops.linear_add(view(small), view(x), view(w), view(r), M, N, K));
  EXPECT_ANY_THROW(ops.linear_add(view(y), view(x), view(w), view(small), M, N, K));
}

struct Heads {
  int B = 2, T = 5, H = 3, hd = 8;
  int rows() const { return B * T * H; }
  int64_t width() const { return int64_t(H) * hd; }  // a token's row: packed
  size_t n() const { return size_t(rows()) * hd; }
};

TEST(CpuFusedOps, NormRopeIsRmsnormThenRope) {
  const Heads s;
  const float eps = 1e-5f, theta = 10000.0f;
  CpuOps ops;
  std::mt19937 rng(4);
  Vec x = random_vec(rng, s.n(), -2.0f, 2.0f), g = random_vec(rng, s.hd, 0.5f, 1.5f);

  Vec want_y = nan_vec(s.n()), want_r = nan_vec(s.rows());
  ops.rmsnorm(view(want_y), view(want_r), view(x), view(g), s.rows(), s.hd, eps, {});
  ops.rope(view(want_y), s.B, s.T, s.H, s.hd, theta);
  Vec y = nan_vec(s.n()), rstd = nan_vec(s.rows());
  ops.norm_rope(view(y), view(rstd), view(x), view(g), s.B, s.T, s.H, s.hd, eps, theta, s.width());
  EXPECT_EQ(y, want_y);
  EXPECT_EQ(rstd, want_r);

  // Backward: dx overwritten, dg accumulated, against the hand-made chain.
  const Vec dy = random_vec(rng, s.n()), dg0 = random_vec(rng, s.hd);
  Vec d = dy, want_dx = nan_vec(s.n()), want_dg = dg0;
  ops.rope_backward(view(d), s.B, s.T, s.H, s.hd, theta);
  ops.rmsnorm_backward(view(want_dx), view(want_dg), view(d), view(x), view(g), view(rstd),
                       s.rows(), s.hd, false, Tensor{});
  Vec dyc = dy, dx = nan_vec(s.n()), dg = dg0, amax = nan_vec(1);
  ops.norm_rope_backward(view(dx), view(dg), view(dyc), view(x), view(g), view(rstd), s.B, s.T, s.H,
                         s.hd, theta, view(amax), s.width());
  EXPECT_EQ(dx, want_dx);
  EXPECT_EQ(dg, want_dg);
  float want_amax = 0.0f;
  for (float v : want_dx) want_amax = std::max(want_amax, std::fabs(v));
  EXPECT_EQ(amax[0], want_amax) << "max |dx|";
  EXPECT_EQ(dyc, dy) << "the reference leaves dy as it was";

  // Odd head_dim: RoPE pairs the halves of a head, so it must be even.
  EXPECT_ANY_THROW(ops.norm_rope(view(y), view(rstd), view(x), view(g), s.B, s.T, s.H * 8, 1, eps,
                                 theta, s.H * 8));
}

}  // namespace
}  // namespace fsdp
