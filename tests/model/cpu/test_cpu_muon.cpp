// The CPU reference of Muon's ops against plain double-precision loops
// written from the definition (model/ops.h), with no BLAS: the reference
// must be right before it can judge anything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/cpu/cpu_ops.h"
#include "shard/muon.h"

namespace fsdp {
namespace {

std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int n, int k,
                           int m, bool b_transposed) {  // [n, k] x [k, m] (or b as [m, k])
  std::vector<double> c(size_t(n) * m, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      for (int t = 0; t < k; ++t)
        c[size_t(i) * m + j] +=
            a[size_t(i) * k + t] * (b_transposed ? b[size_t(j) * k + t] : b[size_t(t) * m + j]);
  return c;
}

// Newton-Schulz from its definition, in double.
std::vector<double> newton_schulz_double(const std::vector<float>& x, int rows, int cols,
                                         const NewtonSchulz& ns) {
  const bool tall = rows > cols;
  const int m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<double> X(size_t(m) * n);
  double sq = 0;
  for (float v : x) sq += double(v) * v;
  const double norm = std::max(std::sqrt(sq) * ns.norm_scale, double(ns.eps));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      (tall ? X[size_t(c) * n + r] : X[size_t(r) * n + c]) = x[size_t(r) * cols + c] / norm;
  for (int s = 0; s < ns.steps; ++s) {
    const NsQuintic& q = ns.quintics[std::min(size_t(s), ns.quintics.size() - 1)];
    const auto A = matmul(X, X, m, n, m, true);
    const auto AA = matmul(A, A, m, m, m, false);
    std::vector<double> B(A.size());
    for (size_t i = 0; i < A.size(); ++i) B[i] = q.b * A[i] + q.c * AA[i];
    const auto BX = matmul(B, X, m, m, n, false);
    for (size_t i = 0; i < X.size(); ++i) X[i] = q.a * X[i] + BX[i];
  }
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      out[size_t(r) * cols + c] = tall ? X[size_t(c) * n + r] : X[size_t(r) * n + c];
  return out;
}

// Uniform in [-1, 1) from a fixed generator: a full-rank matrix, as a
// gradient is (a smooth pattern would be nearly low-rank).
std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull * uint64_t(salt + 1);
  for (float& e : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    e = float(double(x >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

Tensor tensor(CpuOps& ops, const std::vector<float>& v) {
  Tensor t = ops.alloc(DType::f32, int64_t(v.size()));
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

TEST(CpuMuon, NewtonSchulzMatchesTheDefinition) {
  CpuOps ops;
  for (auto [kind, steps] :
       {std::pair{MuonNsCoefficients::jordan, 5}, std::pair{MuonNsCoefficients::polar_express, 5},
        std::pair{MuonNsCoefficients::polar_express, 7}})
    for (auto [rows, cols] : {std::pair{16, 40}, std::pair{40, 16}, std::pair{24, 24}}) {
      SCOPED_TRACE(testing::Message() << (kind == MuonNsCoefficients::jordan ? "jordan" : "polar")
                                      << ", " << steps << " steps");
      const auto x = values(rows * cols, 3);
      Tensor in = tensor(ops, x), out = ops.alloc(DType::f32, rows * cols);
      const NewtonSchulz ns = muon_newton_schulz(steps, kind);
      ops.newton_schulz(out, in, rows, cols, ns);
      const auto want = newton_schulz_double(x, rows, cols, ns);
      double num = 0, den = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        num += (out.f32()[i] - want[i]) * (out.f32()[i] - want[i]);
        den += want[i] * want[i];
      }
      // fp32 against double: each step multiplies earlier rounding by up to its
      // slope at zero a, 3.4^5 ~ 450 (jordan) or 8.2 x 4.0 x 3.9 x 3.3 x 2.3 ~
      // 1000 (polar_express) times fp32's 6e-8 unit roundoff, 3e-5 to 6e-5 at
      // worst (measured on one AVX-512 machine: 6e-7 jordan, 1.1e-6 to 1.4e-6
      // polar_express; 1.2e-5 to 2.2e-5 for jordan when this test was written).
      EXPECT_LT(std::sqrt(num / den), 1e-4) << rows << " x " << cols;
      // Nearly orthogonal: the singular values end near 1, so each row of a
      // wide result has a norm near 1.
      if (rows <= cols) {
        const auto gram = matmul(want, want, rows, cols, rows, true);
        for (int i = 0; i < rows; ++i) {
          EXPECT_GT(gram[size_t(i) * rows + i], 0.4) << "row " << i;
          EXPECT_LT(gram[size_t(i) * rows + i], 1.6) << "row " << i;
        }
      }
      ops.free(in), ops.free(out);
    }
}

// A batch is each matrix alone: the engine batches a unit's same-shape
// matrices, and one rank's result must not depend on what shares its batch.
TEST(CpuMuon, NewtonSchulzOfABatchIsEachMatrixAlone) {
  CpuOps ops;
  const int rows = 40, cols = 16, n = rows * cols;
  std::vector<Tensor> xs, outs;
  for (int i = 0; i < 3; ++i) {
    xs.push_back(tensor(ops, values(n, 10 + i)));
    outs.push_back(ops.alloc(DType::f32, n));
  }
  ops.newton_schulz(outs, xs, rows, cols, muon_newton_schulz(5));
  for (int i = 0; i < 3; ++i) {
    Tensor alone = ops.alloc(DType::f32, n);
    ops.newton_schulz(alone, xs[size_t(i)], rows, cols, muon_newton_schulz(5));
    EXPECT_TRUE(std::equal(alone.f32(), alone.f32() + n, outs[size_t(i)].f32())) << "matrix " << i;
    ops.free(alone), ops.free(xs[size_t(i)]), ops.free(outs[size_t(i)]);
  }
}

TEST(CpuMuon, MomentumAndUpdateFollowTheirFormulas) {
  CpuOps ops;
  const int64_t n = 12;
  const auto g0 = values(n, 1), b0 = values(n, 2), p0 = values(n, 4), u0 = values(n, 5);
  for (bool nesterov : {true, false}) {
    Tensor g = tensor(ops, g0), b = tensor(ops, b0);
    const float mu = 0.9f, scale = 0.5f;
    ops.muon_momentum(g, b, {{2, 7, 1}}, mu, nesterov, scale);  // elements 2..8
    for (int64_t i = 0; i < n; ++i) {
      if (i < 2 || i >= 9) {  // outside the span: untouched
        EXPECT_EQ(g.f32()[i], g0[size_t(i)]);
        EXPECT_EQ(b.f32()[i], b0[size_t(i)]);
        continue;
      }
      const double gi = double(g0[size_t(i)]) * scale;
      const double bi = mu * b0[size_t(i)] + (1 - mu) * gi;
      EXPECT_NEAR(b.f32()[i], bi, 1e-6);
      EXPECT_NEAR(g.f32()[i], nesterov ? (1 - mu) * gi + mu * bi : bi, 1e-6);
    }
    ops.free(g), ops.free(b);
  }
  Tensor p = tensor(ops, p0), u = tensor(ops, u0);
  ops.muon_update(p, u, {{0, 3, 2.0f}, {5, 2, 0.5f}}, 0.1f, 0.2f);
  for (int64_t i = 0; i < n; ++i) {
    const double s = i < 3 ? 2.0 : (i == 5 || i == 6) ? 0.5 : 0.0;
    const double want =
        s == 0 ? p0[size_t(i)] : p0[size_t(i)] * (1 - 0.1 * 0.2) - 0.1 * s * u0[size_t(i)];
    EXPECT_NEAR(p.f32()[i], want, 1e-6) << i;
  }
  ops.free(p), ops.free(u);
}

TEST(CpuMuon, TheFrontDoorRefusesBadArguments) {
  CpuOps ops;
  Tensor a = ops.alloc(DType::f32, 12), b = ops.alloc(DType::f32, 12);
  EXPECT_THROW(ops.newton_schulz(a, a, 3, 4, muon_newton_schulz(5)), Error);  // aliasing
  EXPECT_THROW(ops.newton_schulz(a, b, 4, 4, muon_newton_schulz(5)), Error);  // too small
  Tensor c = ops.alloc(DType::f32, 12), d = ops.alloc(DType::f32, 12);
  const NewtonSchulz ns = muon_newton_schulz(5);
  EXPECT_THROW(ops.newton_schulz({a, b}, {c}, 3, 4, ns), Error);                // counts differ
  EXPECT_THROW(ops.newton_schulz(std::vector<Tensor>{}, {}, 3, 4, ns), Error);  // nothing
  EXPECT_THROW(ops.newton_schulz({a, a}, {c, d}, 3, 4, ns), Error);             // outs alias
  EXPECT_THROW(ops.newton_schulz({a, b}, {c, b}, 3, 4, ns), Error);             // an out is an x
  EXPECT_NO_THROW(ops.newton_schulz({a, b}, {c, d}, 3, 4, ns));
  // Views that start apart but share elements overlap all the same.
  Tensor wide = ops.alloc(DType::f32, 24);
  EXPECT_THROW(ops.newton_schulz(wide.slice(0, 12), wide.slice(11, 12), 3, 4, ns), Error);
  EXPECT_THROW(ops.newton_schulz({wide.slice(0, 12), wide.slice(6, 12)}, {c, d}, 3, 4, ns), Error);
  EXPECT_NO_THROW(ops.newton_schulz(wide.slice(0, 12), wide.slice(12, 12), 3, 4, ns));
  ops.free(wide);
  ops.free(c), ops.free(d);
  EXPECT_THROW(ops.muon_momentum(a, b, {{0, 13, 1}}, 0.9f, true, 1), Error);    // past the end
  EXPECT_THROW(ops.muon_update(a, b, {{4, 2, 1}, {0, 2, 1}}, 0.1f, 0), Error);  // unsorted
  ops.free(a), ops.free(b);
}

}  // namespace
}  // namespace fsdp
