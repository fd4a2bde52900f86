// The fp32 reference backend against direct double-precision computations
// (forward), the semantics of its backwards (what accumulates, what is
// skipped) and, for attention on tiny shapes, central finite differences at
// every coordinate. Every other op's gradients are checked against finite
// differences by the op table's gradient mode (tests/model/op_table). Outputs
// are poisoned with NaN before each call so an element an op forgets to write
// fails.
//
// Tolerances:
//  - Forward: ops reduce in double and round once (linear: OpenBLAS in fp32
//    with K <= 16), so results sit within a few fp32 ulps of the double
//    reference; kFwdTol = 1e-5 relative (atol 1e-6 for values near zero) is
//    ~100 ulps of headroom yet far below any real bug.
//  - Gradients: as the op table's gradient mode (test_op_table.cpp), 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "model/cpu/cpu_ops.h"
#include "tests/model/gradcheck.h"

namespace fsdp {
namespace {

using test::grad_check;
using test::GradCheckResult;

constexpr double kFwdTol = 1e-5;
constexpr double kGradTol = 1e-2;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// A CpuOps buffer that frees itself.
class Buf {
 public:
  Buf(CpuOps& ops, DType dtype, int64_t n) : ops_(ops), t_(ops.alloc(dtype, n)) {}
  ~Buf() { ops_.free(t_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  operator Tensor() const { return t_; }
  Tensor t() const { return t_; }
  float* f() const { return t_.f32(); }
  int32_t* i() const { return t_.i32(); }
  float& operator[](int64_t i) const { return t_.f32()[i]; }
  int64_t n() const { return t_.numel; }

 private:
  CpuOps& ops_;
  Tensor t_;
};

class CpuOpsTest : public ::testing::Test {
 protected:
  // Uniform in [lo, hi) but never exactly zero, so no input hides a term.
  void fill(const Buf& b, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < b.n(); ++i) {
      float x = u(rng_);
      while (x == 0.0f) x = u(rng_);
      b[i] = x;
    }
  }
  static void poison(const Buf& b) {
    for (int64_t i = 0; i < b.n(); ++i) b[i] = kNaN;
  }
  static std::vector<float> snapshot(const Buf& b) { return {b.f(), b.f() + b.n()}; }
  // sum(out * r) in double: the scalar whose gradient with respect to out is r.
  static double dot_loss(const Buf& out, const Buf& r) {
    double s = 0.0;
    for (int64_t i = 0; i < out.n(); ++i) s += double(out[i]) * double(r[i]);
    return s;
  }

  CpuOps ops_;
  std::mt19937 rng_{12345};
};

// Largest |got - want| / (floor + |want|), reported and checked against tol.
// The floor of 0.1 makes the check absolute (tol * 0.1) for values near zero,
// whose relative error says nothing.
void expect_close(const char* what, const float* got, const std::vector<double>& want,
                  double tol = kFwdTol, double floor = 0.1) {
  double worst = 0.0;
  int64_t at = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]) / (floor + std::abs(want[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      at = int64_t(i);
    }
  }
  std::printf("  [forward] %-28s worst rel err %.2e\n", what, worst);
  EXPECT_LE(worst, tol) << what << " at " << at << ": got " << got[at] << " want " << want[at];
}

void expect_grad(const char* what, const GradCheckResult& r) {
  std::printf("  [gradcheck] %-26s worst rel err %.2e over %d coords\n", what, r.worst_rel_err,
              r.checked);
  EXPECT_LT(r.worst_rel_err, kGradTol) << what << ": " << r.describe();
}

// ---- memory ------------------------------------------------------------------

TEST_F(CpuOpsTest, MemoryAllocZeroCopyTransfer) {
  EXPECT_EQ(ops_.compute_dtype(), DType::f32);
  Buf a(ops_, DType::f32, 37), b(ops_, DType::f32, 37);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.t().data) % 64, 0u);
  fill(a);
  poison(b);
  ops_.copy(b, a);
  EXPECT_EQ(std::memcmp(a.f(), b.f(), a.t().bytes()), 0);
  ops_.zero(b);
  for (int64_t i = 0; i < b.n(); ++i) EXPECT_EQ(b[i], 0.0f);
  std::vector<float> host(37);
  ops_.to_host(host.data(), a);
  EXPECT_EQ(host, snapshot(a));
  host[5] = 42.0f;
  ops_.to_device(b, host.data());
  EXPECT_EQ(b[5], 42.0f);

  Buf empty(ops_, DType::f32, 0);
  EXPECT_EQ(empty.n(), 0);
  Buf bf(ops_, DType::bf16, 37);
  EXPECT_THROW(ops_.copy(bf, a), Error);                            // dtype mismatch
  EXPECT_THROW(ops_.rmsnorm(bf, a, a, a, 1, 4, 1e-5f, {}), Error);  // non-f32 rejected
}

// ---- embedding -----------------------------------------------------------------

TEST_F(CpuOpsTest, Embedding) {
  const int V = 7, C = 5, n = 9;
  Buf wte(ops_, DType::f32, V * C), out(ops_, DType::f32, n * C), tok(ops_, DType::i32, n);
  fill(wte);
  const int32_t tokens[n] = {3, 0, 6, 3, 3, 1, 6, 2, 0};  // repeats on purpose
  std::memcpy(tok.i(), tokens, sizeof tokens);
  poison(out);
  ops_.embedding(out, tok, wte, n, C);
  std::vector<double> want(n * C);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) want[i * C + c] = wte[tokens[i] * C + c];
  expect_close("embedding", out.f(), want, 0.0);

  Buf r(ops_, DType::f32, n * C), dwte(ops_, DType::f32, V * C);
  fill(r);
  ops_.zero(dwte);
  ops_.embedding_backward(dwte, r, tok, n, C);

  // Weight gradients accumulate: a second call adds the same amount again.
  const std::vector<float> once = snapshot(dwte);
  ops_.embedding_backward(dwte, r, tok, n, C);
  for (int64_t i = 0; i < dwte.n(); ++i) EXPECT_FLOAT_EQ(dwte[i], 2.0f * once[i]);

  tok.i()[4] = V;  // out of vocabulary
  EXPECT_THROW(ops_.embedding(out, tok, wte, n, C), Error);
}

// ---- rmsnorm ---------------------------------------------------------------------

TEST_F(CpuOpsTest, RmsNorm) {
  const int rows = 5, dim = 16;
  const float eps = 1e-5f;
  Buf x(ops_, DType::f32, rows * dim), g(ops_, DType::f32, dim), y(ops_, DType::f32, rows * dim),
      rstd(ops_, DType::f32, rows);
  fill(x, -2.0f, 2.0f);
  fill(g, 0.5f, 1.5f);
  poison(y);
  poison(rstd);
  Buf y_amax(ops_, DType::f32, 1);
  poison(y_amax);
  ops_.rmsnorm(y, rstd, x, g, rows, dim, eps, y_amax);
  std::vector<double> want_y(rows * dim), want_r(rows);
  for (int r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    want_r[r] = 1.0 / std::sqrt(ss / dim + eps);
    for (int i = 0; i < dim; ++i) want_y[r * dim + i] = x[r * dim + i] * want_r[r] * g[i];
  }
  expect_close("rmsnorm y", y.f(), want_y);
  expect_close("rmsnorm rstd", rstd.f(), want_r);
  float want_y_amax = 0.0f;  // of y as stored
  for (int64_t i = 0; i < y.n(); ++i) want_y_amax = std::max(want_y_amax, std::fabs(y[i]));
  EXPECT_EQ(y_amax[0], want_y_amax);

  Buf R(ops_, DType::f32, rows * dim), dx(ops_, DType::f32, rows * dim), dg(ops_, DType::f32, dim);
  fill(R);
  poison(dx);
  ops_.zero(dg);
  ops_.rmsnorm_backward(dx, dg, R, x, g, rstd, rows, dim, false, Tensor{});

  // accumulate_dx adds to what is there; dg always accumulates.
  const std::vector<float> dx1 = snapshot(dx), dg1 = snapshot(dg);
  Buf base(ops_, DType::f32, rows * dim);
  fill(base);
  ops_.copy(dx, base);
  // The amax, when asked for, is of the sum stored, not of the part added.
  Buf amax(ops_, DType::f32, 1);
  poison(amax);
  ops_.rmsnorm_backward(dx, dg, R, x, g, rstd, rows, dim, true, amax);
  float want_amax = 0.0f;
  for (int64_t i = 0; i < dx.n(); ++i) {
    EXPECT_FLOAT_EQ(dx[i], base[i] + dx1[i]);
    want_amax = std::max(want_amax, std::fabs(dx[i]));
  }
  EXPECT_EQ(amax[0], want_amax);
  for (int64_t i = 0; i < dg.n(); ++i) EXPECT_FLOAT_EQ(dg[i], 2.0f * dg1[i]);
  ops_.copy(dx, base);
  ops_.rmsnorm_backward(dx, dg, R, x, g, rstd, rows, dim, false, Tensor{});
  for (int64_t i = 0; i < dx.n(); ++i) EXPECT_EQ(dx[i], dx1[i]);
}

// ---- linear ----------------------------------------------------------------------

TEST_F(CpuOpsTest, Linear) {
  const int M = 5, N = 7, K = 9;
  Buf x(ops_, DType::f32, M * K), w(ops_, DType::f32, N * K), y(ops_, DType::f32, M * N);
  fill(x);
  fill(w);
  poison(y);
  ops_.linear(y, x, w, M, N, K);
  std::vector<double> want(M * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) want[m * N + n] += double(x[m * K + k]) * w[n * K + k];
  expect_close("linear y", y.f(), want);

  Buf R(ops_, DType::f32, M * N), dx(ops_, DType::f32, M * K), dw(ops_, DType::f32, N * K);
  fill(R);
  poison(dx);
  ops_.zero(dw);
  ops_.linear_backward(dx, dw, R, x, w, M, N, K, false);

  const std::vector<float> dx1 = snapshot(dx), dw1 = snapshot(dw);
  Buf base(ops_, DType::f32, M * K);
  fill(base);
  ops_.copy(dx, base);
  ops_.linear_backward(dx, dw, R, x, w, M, N, K, true);
  for (int64_t i = 0; i < dx.n(); ++i) EXPECT_NEAR(dx[i], base[i] + dx1[i], 1e-6);
  for (int64_t i = 0; i < dw.n(); ++i) EXPECT_NEAR(dw[i], 2.0f * dw1[i], 1e-6);
  ops_.copy(dx, base);
  ops_.linear_backward(dx, dw, R, x, w, M, N, K, false);
  for (int64_t i = 0; i < dx.n(); ++i) EXPECT_EQ(dx[i], dx1[i]);

  // An empty dx skips the input gradient; dw still accumulates.
  Buf none(ops_, DType::f32, 0);
  ops_.linear_backward(none, dw, R, x, w, M, N, K, false);
  for (int64_t i = 0; i < dw.n(); ++i) EXPECT_NEAR(dw[i], 4.0f * dw1[i], 1e-5);
}

// ---- rope ------------------------------------------------------------------------

TEST_F(CpuOpsTest, Rope) {
  const int B = 2, T = 5, H = 3, hd = 8, half = hd / 2;
  const float theta = 10000.0f;
  const int64_t n = int64_t(B) * T * H * hd;
  Buf x(ops_, DType::f32, n), x0(ops_, DType::f32, n);
  fill(x0);
  ops_.copy(x, x0);
  ops_.rope(x, B, T, H, hd, theta);
  std::vector<double> want(n);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const int64_t o = ((int64_t(b) * T + t) * H + h) * hd;
        for (int i = 0; i < half; ++i) {
          const double ang = t / std::pow(double(theta), 2.0 * i / hd);
          const double lo = x0[o + i], hi = x0[o + i + half];
          want[o + i] = lo * std::cos(ang) - hi * std::sin(ang);
          want[o + i + half] = hi * std::cos(ang) + lo * std::sin(ang);
        }
      }
  expect_close("rope", x.f(), want);
  // Position 0 is not rotated at all.
  for (int i = 0; i < H * hd; ++i) EXPECT_EQ(x[i], x0[i]);

  // Backward is the inverse rotation.
  ops_.rope_backward(x, B, T, H, hd, theta);
  std::vector<double> orig(x0.f(), x0.f() + n);
  expect_close("rope_backward(rope(x))", x.f(), orig);
}

// ---- attention -------------------------------------------------------------------

struct AttnShape {
  int B, T, H, KV, hd;
  int64_t nq() const { return int64_t(B) * T * H * hd; }
  int64_t nkv() const { return int64_t(B) * T * KV * hd; }
};

// Direct double-precision causal GQA attention: full score matrix, mask, softmax.
void naive_attention(const AttnShape& s, const float* q, const float* k, const float* v,
                     std::vector<double>& out, std::vector<double>& lse) {
  out.assign(s.nq(), 0.0);
  lse.assign(int64_t(s.B) * s.H * s.T, 0.0);
  const double scale = 1.0 / std::sqrt(double(s.hd));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h) {
      const int kvh = h / (s.H / s.KV);
      for (int i = 0; i < s.T; ++i) {
        std::vector<double> sc(s.T, -INFINITY);
        double mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double d = 0.0;
          for (int e = 0; e < s.hd; ++e)
            d += double(q[((b * s.T + i) * s.H + h) * s.hd + e]) *
                 k[((b * s.T + j) * s.KV + kvh) * s.hd + e];
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        double z = 0.0;
        for (int j = 0; j < s.T; ++j) z += std::exp(sc[j] - mx);  // masked terms are exp(-inf) = 0
        lse[(b * s.H + h) * s.T + i] = mx + std::log(z);
        for (int j = 0; j < s.T; ++j) {
          const double p = std::exp(sc[j] - mx) / z;
          for (int e = 0; e < s.hd; ++e)
            out[((b * s.T + i) * s.H + h) * s.hd + e] +=
                p * v[((b * s.T + j) * s.KV + kvh) * s.hd + e];
        }
      }
    }
}

class AttentionTest : public CpuOpsTest, public ::testing::WithParamInterface<AttnShape> {};

TEST_P(AttentionTest, ForwardMatchesNaive) {
  const AttnShape s = GetParam();
  Buf q(ops_, DType::f32, s.nq()), k(ops_, DType::f32, s.nkv()), v(ops_, DType::f32, s.nkv()),
      out(ops_, DType::f32, s.nq()), lse(ops_, DType::f32, int64_t(s.B) * s.H * s.T);
  fill(q, -2.0f, 2.0f);  // wide enough that softmax rows are far from uniform
  fill(k, -2.0f, 2.0f);
  fill(v);
  poison(out);
  poison(lse);
  ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
  std::vector<double> want_out, want_lse;
  naive_attention(s, q.f(), k.f(), v.f(), want_out, want_lse);
  expect_close("attention out", out.f(), want_out);
  expect_close("attention lse", lse.f(), want_lse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(AttnShape{2, 6, 4, 2, 8},    // GQA
                                           AttnShape{1, 7, 3, 3, 4},    // MHA
                                           AttnShape{2, 5, 4, 1, 6}));  // MQA

TEST_F(CpuOpsTest, AttentionBackward) {
  const AttnShape s{2, 6, 4, 2, 8};  // GQA: query heads 0,1 -> kv 0; 2,3 -> kv 1
  const int64_t nl = int64_t(s.B) * s.H * s.T;
  Buf q(ops_, DType::f32, s.nq()), k(ops_, DType::f32, s.nkv()), v(ops_, DType::f32, s.nkv()),
      out(ops_, DType::f32, s.nq()), lse(ops_, DType::f32, nl);
  fill(q, -2.0f, 2.0f);
  fill(k, -2.0f, 2.0f);
  fill(v);
  Buf R(ops_, DType::f32, s.nq()), dq(ops_, DType::f32, s.nq()), dk(ops_, DType::f32, s.nkv()),
      dv(ops_, DType::f32, s.nkv());
  fill(R);
  ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
  poison(dq);
  poison(dk);
  poison(dv);
  ops_.attention_backward(dq, dk, dv, R, out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
  auto loss = [&] {
    ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
    return dot_loss(out, R);
  };
  test::GradCheckOptions all;
  all.max_coords = 1 << 20;  // small enough to check every coordinate
  expect_grad("attention dq", grad_check(loss, q.f(), dq.f(), q.n(), all));
  expect_grad("attention dk", grad_check(loss, k.f(), dk.f(), k.n(), all));
  expect_grad("attention dv", grad_check(loss, v.f(), dv.f(), v.n(), all));

  // Bitwise reproducible run to run.
  const std::vector<float> dq1 = snapshot(dq), dk1 = snapshot(dk), dv1 = snapshot(dv);
  ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
  ops_.attention_backward(dq, dk, dv, R, out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
  EXPECT_EQ(snapshot(dq), dq1);
  EXPECT_EQ(snapshot(dk), dk1);
  EXPECT_EQ(snapshot(dv), dv1);
}

TEST_F(CpuOpsTest, AttentionIsCausal) {
  const AttnShape s{2, 6, 4, 2, 8};
  const int64_t nl = int64_t(s.B) * s.H * s.T;
  Buf q(ops_, DType::f32, s.nq()), k(ops_, DType::f32, s.nkv()), v(ops_, DType::f32, s.nkv()),
      out(ops_, DType::f32, s.nq()), lse(ops_, DType::f32, nl);
  fill(q);
  fill(k);
  fill(v);
  ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
  const std::vector<float> out1 = snapshot(out), lse1 = snapshot(lse);
  // Change keys and values at position 4 (every batch row and kv head).
  const int t0 = 4;
  for (int b = 0; b < s.B; ++b)
    for (int e = 0; e < s.KV * s.hd; ++e) {
      const int64_t o = (int64_t(b) * s.T + t0) * s.KV * s.hd + e;
      k[o] += 3.0f;
      v[o] -= 5.0f;
    }
  ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, s.KV * s.hd);
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t) {
      bool same = true;
      for (int e = 0; e < s.H * s.hd; ++e) {
        const int64_t o = (int64_t(b) * s.T + t) * s.H * s.hd + e;
        same = same && out[o] == out1[o];
      }
      for (int h = 0; h < s.H; ++h) {
        const int64_t o = (int64_t(b) * s.H + h) * s.T + t;
        same = same && lse[o] == lse1[o];
      }
      if (t < t0)
        EXPECT_TRUE(same) << "batch " << b << " position " << t << " saw the future";
      else
        EXPECT_FALSE(same) << "batch " << b << " position " << t << " ignored position " << t0;
    }
}

// --document-mask: with documents, each document of a sequence attends as a
// sequence of its own. Forward and backward equal, bit for bit, the plain
// causal op run on each document's rows alone (the same sums in the same
// order), and a sequence that is one document equals the op without
// documents. Gradients also against finite differences.
TEST_F(CpuOpsTest, AttentionDocumentMask) {
  const AttnShape s{2, 9, 4, 2, 8};
  const int64_t nl = int64_t(s.B) * s.H * s.T, qw = int64_t(s.H) * s.hd, kw = int64_t(s.KV) * s.hd;
  // Sequence 0: documents [0, 3), [3, 7), [7, 9); sequence 1: one document.
  const std::vector<std::pair<int, int>> docs = {{0, 3}, {3, 7}, {7, 9}, {9, 18}};
  Buf starts(ops_, DType::i32, int64_t(s.B) * s.T), firsts(ops_, DType::i32, 5);
  for (size_t j = 0; j < docs.size(); ++j) {
    const auto [a, e] = docs[j];
    for (int i = a; i < e; ++i) starts.i()[i] = a % s.T;
    firsts.i()[j] = a;
  }
  firsts.i()[4] = s.B * s.T;
  const Documents documents{starts, firsts};
  Buf q(ops_, DType::f32, s.nq()), k(ops_, DType::f32, s.nkv()), v(ops_, DType::f32, s.nkv()),
      out(ops_, DType::f32, s.nq()), lse(ops_, DType::f32, nl), R(ops_, DType::f32, s.nq()),
      dq(ops_, DType::f32, s.nq()), dk(ops_, DType::f32, s.nkv()), dv(ops_, DType::f32, s.nkv());
  fill(q, -2.0f, 2.0f);
  fill(k, -2.0f, 2.0f);
  fill(v);
  fill(R);
  auto fwd = [&] { ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, kw, documents); };
  fwd();
  poison(dq);
  poison(dk);
  poison(dv);
  ops_.attention_backward(dq, dk, dv, R, out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, kw,
                          documents);

  for (const auto& [a, e] : docs) {
    SCOPED_TRACE("document [" + std::to_string(a) + ", " + std::to_string(e) + ")");
    const int n = e - a, b = a / s.T, t0 = a % s.T;
    const AttnShape d{1, n, s.H, s.KV, s.hd};
    Buf dq_(ops_, DType::f32, d.nq()), dk_(ops_, DType::f32, d.nkv()),
        dv_(ops_, DType::f32, d.nkv()), q_(ops_, DType::f32, d.nq()), k_(ops_, DType::f32, d.nkv()),
        v_(ops_, DType::f32, d.nkv()), o_(ops_, DType::f32, d.nq()),
        l_(ops_, DType::f32, int64_t(s.H) * n), R_(ops_, DType::f32, d.nq());
    std::copy_n(q.f() + int64_t(a) * qw, d.nq(), q_.f());
    std::copy_n(k.f() + int64_t(a) * kw, d.nkv(), k_.f());
    std::copy_n(v.f() + int64_t(a) * kw, d.nkv(), v_.f());
    std::copy_n(R.f() + int64_t(a) * qw, d.nq(), R_.f());
    ops_.attention(o_, l_, q_, k_, v_, 1, n, s.H, s.KV, s.hd, kw);
    ops_.attention_backward(dq_, dk_, dv_, R_, o_, l_, q_, k_, v_, 1, n, s.H, s.KV, s.hd, kw);
    for (int64_t i = 0; i < d.nq(); ++i) {
      ASSERT_EQ(out[int64_t(a) * qw + i], o_[i]) << "out " << i;
      ASSERT_EQ(dq[int64_t(a) * qw + i], dq_[i]) << "dq " << i;
    }
    for (int64_t i = 0; i < d.nkv(); ++i) {
      ASSERT_EQ(dk[int64_t(a) * kw + i], dk_[i]) << "dk " << i;
      ASSERT_EQ(dv[int64_t(a) * kw + i], dv_[i]) << "dv " << i;
    }
    for (int h = 0; h < s.H; ++h)
      for (int t = 0; t < n; ++t)
        ASSERT_EQ(lse[(int64_t(b) * s.H + h) * s.T + t0 + t], l_[int64_t(h) * n + t]) << "lse";
  }

  // The second sequence, one document, is the plain causal op's.
  const std::vector<float> masked = snapshot(out);
  ops_.attention(out, lse, q, k, v, s.B, s.T, s.H, s.KV, s.hd, kw);
  const std::vector<float> plain = snapshot(out);
  const int64_t row = int64_t(s.T) * qw;
  EXPECT_TRUE(std::equal(masked.begin() + row, masked.end(), plain.begin() + row));
  EXPECT_FALSE(std::equal(masked.begin(), masked.begin() + row, plain.begin()));

  auto loss = [&] {
    fwd();
    return dot_loss(out, R);
  };
  test::GradCheckOptions all;
  all.max_coords = 1 << 20;
  fwd();
  expect_grad("masked attention dq", grad_check(loss, q.f(), dq.f(), q.n(), all));
  expect_grad("masked attention dk", grad_check(loss, k.f(), dk.f(), k.n(), all));
  expect_grad("masked attention dv", grad_check(loss, v.f(), dv.f(), v.n(), all));
}

// ---- swiglu, relu2, value_residual, add -----------------------------------------

TEST_F(CpuOpsTest, SwiGlu) {
  const int64_t n = 40;
  Buf a(ops_, DType::f32, n), b(ops_, DType::f32, n), s(ops_, DType::f32, n);
  fill(a, -4.0f, 4.0f);
  fill(b, -2.0f, 2.0f);
  poison(s);
  Buf s_amax(ops_, DType::f32, 1);
  poison(s_amax);
  ops_.swiglu(s, a, b, 1, int(n), n, s_amax);
  std::vector<double> want(n);
  float want_amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    want[i] = a[i] / (1.0 + std::exp(-double(a[i]))) * b[i];
    want_amax = std::max(want_amax, std::fabs(s[i]));
  }
  expect_close("swiglu", s.f(), want);
  EXPECT_EQ(s_amax[0], want_amax);

  Buf R(ops_, DType::f32, n), da(ops_, DType::f32, n), db(ops_, DType::f32, n);
  fill(R);
  poison(da);
  poison(db);
  ops_.swiglu_backward(da, db, R, a, b, 1, int(n), n, {});
  for (int64_t i = 0; i < n; ++i) {  // every element written
    EXPECT_TRUE(std::isfinite(da[i]));
    EXPECT_TRUE(std::isfinite(db[i]));
  }
}

// The formula written out: s = relu(a)^2, da = 2 relu(a) ds (zero where a <=
// 0), each amax the largest |value| written; the backward in place over ds.
TEST_F(CpuOpsTest, Relu2) {
  const int64_t n = 40;
  Buf a(ops_, DType::f32, n), s(ops_, DType::f32, n), s_amax(ops_, DType::f32, 1);
  fill(a, -4.0f, 4.0f);
  a[3] = 0.0f;
  poison(s);
  poison(s_amax);
  ops_.relu2(s, a, n, s_amax);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] > 0 ? double(a[i]) * a[i] : 0.0;
  expect_close("relu2", s.f(), want);
  EXPECT_EQ(s_amax[0], *std::max_element(s.f(), s.f() + n));

  Buf ds(ops_, DType::f32, n), da_amax(ops_, DType::f32, 1);
  fill(ds, -2.0f, 2.0f);
  poison(da_amax);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] > 0 ? 2.0 * a[i] * ds[i] : 0.0;
  ops_.relu2_backward(ds, ds, a, n, da_amax);
  expect_close("relu2 da", ds.f(), want);
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(ds[i]));
  EXPECT_EQ(da_amax[0], m);
  EXPECT_EQ(ds[3], 0.0f);
}

// The formulas written out on v inside rows of ld > cols (as in the q|k|v
// GEMM's output): the first block copies v into v0, a later one means them
// in place; the backward's three roles; the columns past cols never touched.
TEST_F(CpuOpsTest, ValueResidual) {
  const int rows = 3, cols = 4, ld = 7;
  const int64_t nv = int64_t(rows) * ld, n = int64_t(rows) * cols;
  auto at = [&](int64_t i) { return i / cols * ld + i % cols; };  // packed index -> v's
  Buf v(ops_, DType::f32, nv), v0(ops_, DType::f32, n);
  fill(v, -2.0f, 2.0f);
  poison(v0);
  const std::vector<float> v_in(v.f(), v.f() + nv);
  ops_.value_residual(v, v0, rows, cols, ld, true);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(v0[i], v_in[size_t(at(i))]) << i;
  EXPECT_EQ(std::vector<float>(v.f(), v.f() + nv), v_in);  // the first block's v unchanged

  Buf w(ops_, DType::f32, nv);
  fill(w, -2.0f, 2.0f);
  std::vector<float> want(w.f(), w.f() + nv);
  for (int64_t i = 0; i < n; ++i) want[size_t(at(i))] = (want[size_t(at(i))] + v0[i]) / 2;
  ops_.value_residual(w, v0, rows, cols, ld, false);
  EXPECT_EQ(std::vector<float>(w.f(), w.f() + nv), want);

  // Backward: a later block's dv halves and its other half goes to dv0
  // (written, then added to), and the first block adds dv0 to its own.
  Buf dv(ops_, DType::f32, nv), dv0(ops_, DType::f32, n);
  fill(dv, -2.0f, 2.0f);
  poison(dv0);
  std::vector<float> dv_in(dv.f(), dv.f() + nv), dv0_want(n);
  ops_.value_residual_backward(dv, dv0, rows, cols, ld, false, false);
  for (int64_t i = 0; i < n; ++i) {
    dv0_want[size_t(i)] = dv_in[size_t(at(i))] / 2;
    EXPECT_EQ(dv0[i], dv0_want[size_t(i)]) << i;
    EXPECT_EQ(dv[at(i)], dv_in[size_t(at(i))] / 2) << i;
  }
  for (int64_t i = 0; i < nv; ++i) {
    if (i % ld < cols) continue;
    EXPECT_EQ(dv[i], dv_in[size_t(i)]) << "outside the rows' columns " << i;
  }
  fill(dv, -2.0f, 2.0f);
  dv_in.assign(dv.f(), dv.f() + nv);
  ops_.value_residual_backward(dv, dv0, rows, cols, ld, false, true);
  for (int64_t i = 0; i < n; ++i) {
    dv0_want[size_t(i)] += dv_in[size_t(at(i))] / 2;
    EXPECT_EQ(dv0[i], dv0_want[size_t(i)]) << i;
  }
  fill(dv, -2.0f, 2.0f);
  dv_in.assign(dv.f(), dv.f() + nv);
  ops_.value_residual_backward(dv, dv0, rows, cols, ld, true, false);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dv[at(i)], dv_in[size_t(at(i))] + dv0[i]) << i;
  EXPECT_THROW(ops_.value_residual_backward(dv, dv0, rows, cols, ld, true, true), Error);
}

TEST_F(CpuOpsTest, Add) {
  const int64_t n = 33;
  Buf a(ops_, DType::f32, n), b(ops_, DType::f32, n), y(ops_, DType::f32, n);
  fill(a);
  fill(b);
  poison(y);
  ops_.add(y, a, b, n);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = double(a[i]) + b[i];
  expect_close("add", y.f(), want);
  ops_.add(a, a, b, n);  // y aliasing a, as the residual stream does
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], y[i]);
}

// --unet-skips' scaled add and its backward, written out: x += w s; ds = w dx,
// dw += sum(dx s), dx left as it was. Buffers that overlap are refused (a
// slice of one buffer for both, one element apart).
TEST_F(CpuOpsTest, SkipAdd) {
  const int64_t n = 33;
  Buf x(ops_, DType::f32, n), s(ops_, DType::f32, n), w(ops_, DType::f32, 1);
  Buf dx(ops_, DType::f32, n), ds(ops_, DType::f32, n), dw(ops_, DType::f32, 1);
  fill(x);
  fill(s);
  fill(dx);
  poison(ds);
  w[0] = -0.7f;
  dw[0] = 0.25f;
  const std::vector<float> x0(x.f(), x.f() + n), dx0(dx.f(), dx.f() + n);
  ops_.skip_add(x, s, w, n);
  std::vector<double> want(n), want_ds(n);
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) {
    want[i] = x0[size_t(i)] + -0.7 * s[i];
    want_ds[i] = -0.7 * dx[i];
    dot += double(dx[i]) * s[i];
  }
  expect_close("skip_add x", x.f(), want);
  ops_.skip_add_backward(ds, dw, dx, s, w, n);
  expect_close("skip_add ds", ds.f(), want_ds);
  EXPECT_NEAR(dw[0], 0.25 + dot, 1e-6 * (1 + std::abs(dot)));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dx[i], dx0[size_t(i)]) << i;
  Buf both(ops_, DType::f32, n + 1);
  const Tensor lo = both.t().slice(0, n), hi = both.t().slice(1, n);
  EXPECT_THROW(ops_.skip_add(lo, hi, w, n), Error);
  EXPECT_THROW(ops_.skip_add_backward(lo, dw, hi, s, w, n), Error);
  EXPECT_THROW(ops_.skip_add_backward(hi, dw, dx, lo, w, n), Error);
}

// ---- cross-entropy -----------------------------------------------------------------

TEST_F(CpuOpsTest, CrossEntropy) {
  const int n = 6, V = 11;
  const float gs = 0.37f;
  Buf logits(ops_, DType::f32, n * V), losses(ops_, DType::f32, n), tg(ops_, DType::i32, n);
  fill(logits, -3.0f, 3.0f);
  const int32_t targets[n] = {4, -1, 0, 10, 4, 7};  // row 1 ignored
  std::memcpy(tg.i(), targets, sizeof targets);
  std::vector<double> want(n, 0.0);
  for (int i = 0; i < n; ++i) {
    if (targets[i] < 0) continue;
    double z = 0.0;
    for (int j = 0; j < V; ++j) z += std::exp(double(logits[i * V + j]));
    want[i] = std::log(z) - logits[i * V + targets[i]];
  }

  // grad_scale 0: losses only, logits untouched.
  const std::vector<float> l0 = snapshot(logits);
  poison(losses);
  ops_.cross_entropy(losses, logits, tg, n, V, V, 0.0f);
  expect_close("cross_entropy loss", losses.f(), want);
  EXPECT_EQ(snapshot(logits), l0);

  // grad_scale != 0: losses again, logits replaced by gs * d loss / d logits.
  Buf grad(ops_, DType::f32, n * V);
  ops_.copy(grad, logits);
  poison(losses);
  ops_.cross_entropy(losses, grad, tg, n, V, V, gs);
  expect_close("cross_entropy loss (fused)", losses.f(), want);
  for (int j = 0; j < V; ++j) EXPECT_EQ(grad[1 * V + j], 0.0f) << "ignored row has a gradient";

  // Large logits must not overflow: the row max is subtracted before exp.
  const float big[3] = {1000.0f, 0.0f, -1000.0f};
  Buf bl(ops_, DType::f32, 3), one(ops_, DType::f32, 1), t1(ops_, DType::i32, 1);
  std::memcpy(bl.f(), big, sizeof big);
  t1.i()[0] = 1;
  ops_.cross_entropy(one, bl, t1, 1, 3, 3, 1.0f);
  EXPECT_FLOAT_EQ(one[0], 1000.0f);
  EXPECT_FLOAT_EQ(bl[0], 1.0f);
  EXPECT_FLOAT_EQ(bl[1], -1.0f);
  EXPECT_EQ(bl[2], 0.0f);

  tg.i()[0] = V;
  EXPECT_THROW(ops_.cross_entropy(losses, logits, tg, n, V, V, 0.0f), Error);
}

// Rows of Vp logits whose last Vp - V columns are vocabulary padding: the loss
// and the real columns' gradient are those of the unpadded rows, whatever the
// padding holds (here logits larger than any real one), and the padding's
// gradient is zero, so the padded embedding rows never move.
TEST_F(CpuOpsTest, CrossEntropyIgnoresVocabularyPadding) {
  const int n = 5, V = 11, Vp = 16;
  const float gs = 0.5f;
  Buf plain(ops_, DType::f32, n * V), padded(ops_, DType::f32, n * Vp);
  Buf lp(ops_, DType::f32, n), lq(ops_, DType::f32, n), tg(ops_, DType::i32, n);
  fill(plain, -3.0f, 3.0f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < Vp; ++j) padded[i * Vp + j] = j < V ? plain[i * V + j] : 50.0f + j;
  const int32_t targets[n] = {0, 10, -1, 3, 7};
  std::memcpy(tg.i(), targets, sizeof targets);
  ops_.cross_entropy(lp, plain, tg, n, V, V, gs);
  ops_.cross_entropy(lq, padded, tg, n, V, Vp, gs);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(lq[i], lp[i]) << "row " << i;
    for (int j = 0; j < V; ++j) EXPECT_EQ(padded[i * Vp + j], plain[i * V + j]) << i << "," << j;
    for (int j = V; j < Vp; ++j) EXPECT_EQ(padded[i * Vp + j], 0.0f) << "padding " << i << "," << j;
  }
  EXPECT_THROW(ops_.cross_entropy(lq, padded, tg, n, V, V - 1, gs), Error);
}

// --logit-softcap and --z-loss (HeadLoss): the losses are those of the
// formula written out here, lse - y[t] + z lse^2 over y = c tanh(z / c), and
// the gradient written over the logits is its finite difference, with
// respect to the raw logits. Both terms off: the plain op, bit for bit.
TEST_F(CpuOpsTest, CrossEntropySoftcapAndZLoss) {
  const int n = 5, V = 9, Vp = 16;
  const float gs = 0.3f;
  const int32_t targets[n] = {2, -1, 8, 0, 5};
  Buf logits(ops_, DType::f32, n * Vp), losses(ops_, DType::f32, n), tg(ops_, DType::i32, n);
  fill(logits, -5.0f, 5.0f);  // past the cap of 3 below: the tanh bends
  std::memcpy(tg.i(), targets, sizeof targets);
  const std::vector<float> raw = snapshot(logits);
  const HeadLoss extras[] = {{3.0f, 0.0f}, {0.0f, 0.05f}, {3.0f, 0.05f}};
  for (const HeadLoss& e : extras) {
    SCOPED_TRACE(::testing::Message() << "softcap " << e.softcap << " z_loss " << e.z_loss);
    // Row i's loss from logits x, the formula as the options state it.
    auto row_loss = [&](const float* x, int i) {
      if (targets[i] < 0) return 0.0;
      std::vector<double> y(V);
      double z = 0.0;
      for (int j = 0; j < V; ++j) {
        const double v = x[i * Vp + j];
        y[j] = e.softcap > 0 ? e.softcap * std::tanh(v / e.softcap) : v;
        z += std::exp(y[j]);
      }
      return std::log(z) - y[targets[i]] + e.z_loss * std::log(z) * std::log(z);
    };
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = row_loss(raw.data(), i);
    std::copy(raw.begin(), raw.end(), logits.f());
    poison(losses);
    ops_.cross_entropy(losses, logits, tg, n, V, Vp, 0.0f, e);
    expect_close("cross_entropy loss (extra)", losses.f(), want);

    Buf grad(ops_, DType::f32, n * Vp);
    std::copy(raw.begin(), raw.end(), grad.f());
    poison(losses);
    ops_.cross_entropy(losses, grad, tg, n, V, Vp, gs, e);
    expect_close("cross_entropy loss (extra, fused)", losses.f(), want);
    auto total = [&] {
      double l = 0.0;
      for (int i = 0; i < n; ++i) l += gs * row_loss(logits.f(), i);
      return l;
    };
    std::copy(raw.begin(), raw.end(), logits.f());
    expect_grad("cross_entropy dlogits (extra)", grad_check(total, logits.f(), grad.f(), n * Vp));
    for (int j = V; j < Vp; ++j) EXPECT_EQ(grad[j], 0.0f) << "padding " << j;
  }

  // Both off: bitwise the call without them.
  Buf a(ops_, DType::f32, n * Vp), b(ops_, DType::f32, n * Vp), la(ops_, DType::f32, n),
      lb(ops_, DType::f32, n);
  std::copy(raw.begin(), raw.end(), a.f());
  std::copy(raw.begin(), raw.end(), b.f());
  ops_.cross_entropy(la, a, tg, n, V, Vp, gs);
  ops_.cross_entropy(lb, b, tg, n, V, Vp, gs, HeadLoss{0.0f, 0.0f});
  EXPECT_EQ(snapshot(la), snapshot(lb));
  EXPECT_EQ(snapshot(a), snapshot(b));

  // A cap keeps huge logits finite; a negative or infinite term is refused.
  const float big[3] = {1e30f, 0.0f, -1e30f};
  Buf bl(ops_, DType::f32, 3), one(ops_, DType::f32, 1), t1(ops_, DType::i32, 1);
  std::memcpy(bl.f(), big, sizeof big);
  t1.i()[0] = 1;
  ops_.cross_entropy(one, bl, t1, 1, 3, 3, 1.0f, {2.0f, 0.0f});
  EXPECT_NEAR(one[0], std::log(std::exp(2.0) + 1 + std::exp(-2.0)), 1e-6);
  EXPECT_EQ(bl[0], 0.0f);  // the cap is flat there: no gradient reaches the raw logit
  EXPECT_THROW(ops_.cross_entropy(one, bl, t1, 1, 3, 3, 1.0f, {-1.0f, 0.0f}), Error);
  EXPECT_THROW(ops_.cross_entropy(one, bl, t1, 1, 3, 3, 1.0f, {0.0f, INFINITY}), Error);
}

// ---- optimizer and engine -----------------------------------------------------------

TEST(Bf16, RoundToNearestEven) {
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  auto from = [](uint32_t u) { return std::bit_cast<float>(u); };
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.5f), 0xC020);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties go to the even 1.0.
  EXPECT_EQ(f32_to_bf16(from(0x3F808000)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between mantissas 1 and 2: ties go to the even 2.
  EXPECT_EQ(f32_to_bf16(from(0x3F818000)), 0x3F82);
  // Just above and below halfway round to nearest.
  EXPECT_EQ(f32_to_bf16(from(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(from(0x3F807FFF)), 0x3F80);
  // Rounding carries into the exponent; the largest floats round up to inf.
  EXPECT_EQ(f32_to_bf16(from(0x3FFFFFFF)), 0x4000);
  EXPECT_EQ(f32_to_bf16(from(0x7F7FFFFF)), 0x7F80);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xFF80);
  // NaN stays NaN even when only low mantissa bits are set.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from(0x7F800001)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(kNaN))));
  EXPECT_EQ(bits(bf16_to_f32(0x3F81)), 0x3F810000u);
}

TEST_F(CpuOpsTest, CastRoundTrip) {
  const float vals[] = {1.0f,        -3.0f,  0.15625f,  1.00390625f /* 1 + 2^-8: tie */,
                        3.14159265f, 1e-20f, -65504.0f, 0.0f};
  const int n = sizeof vals / sizeof vals[0];
  const float want[n] = {
      1.0f, -3.0f, 0.15625f, 1.0f, 3.140625f, bf16_to_f32(f32_to_bf16(1e-20f)), -65536.0f, 0.0f};
  Buf src(ops_, DType::f32, n), half(ops_, DType::bf16, n), back(ops_, DType::f32, n),
      half2(ops_, DType::bf16, n);
  std::memcpy(src.f(), vals, sizeof vals);
  poison(back);
  ops_.cast(half, src);
  ops_.cast(back, half);
  for (int i = 0; i < n; ++i) EXPECT_EQ(back[i], want[i]) << "value " << vals[i];
  EXPECT_NEAR(back[5], 1e-20, 1e-20 / 128);  // bf16 keeps 8 significant bits
  // bf16 -> bf16 and f32 -> f32 are plain copies.
  ops_.cast(half2, half);
  EXPECT_EQ(std::memcmp(half.t().data, half2.t().data, half.t().bytes()), 0);
  Buf copy(ops_, DType::f32, n);
  ops_.cast(copy, src);
  EXPECT_EQ(snapshot(copy), snapshot(src));
  Buf shorter(ops_, DType::bf16, n - 1);
  EXPECT_THROW(ops_.cast(shorter, src), Error);
}

TEST_F(CpuOpsTest, AccumulateAndSumSquares) {
  const int64_t n = 50;
  Buf dst(ops_, DType::f32, n), src(ops_, DType::f32, n), h(ops_, DType::bf16, n);
  fill(dst);
  fill(src);
  const std::vector<float> d0 = snapshot(dst);
  ops_.accumulate(dst, src, -0.5f);
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(dst[i], d0[i] - 0.5f * src[i]);
  ops_.cast(h, src);
  const std::vector<float> d1 = snapshot(dst);
  ops_.accumulate(dst, h, 2.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float hs = bf16_to_f32(static_cast<uint16_t*>(h.t().data)[i]);
    EXPECT_FLOAT_EQ(dst[i], d1[i] + 2.0f * hs);
  }

  const float known[] = {3.0f, -4.0f, 0.5f};
  Buf k(ops_, DType::f32, 3);
  std::memcpy(k.f(), known, sizeof known);
  EXPECT_EQ(ops_.sum_squares(k), 25.25);
  double want = 0.0;
  for (int64_t i = 0; i < n; ++i) want += double(dst[i]) * dst[i];
  EXPECT_NEAR(ops_.sum_squares(dst), want, 1e-12 * want);
  Buf empty(ops_, DType::f32, 0);
  EXPECT_EQ(ops_.sum_squares(empty), 0.0);
  // The per-unit form the gradient norm uses: one f32 result per tensor.
  Buf each(ops_, DType::f32, 3);
  poison(each);
  ops_.sum_squares_each(each, {k, empty, dst});
  EXPECT_EQ(each[0], 25.25f);
  EXPECT_EQ(each[1], 0.0f);
  EXPECT_EQ(each[2], float(want));
}

TEST_F(CpuOpsTest, AdamWTwoStepsByHand) {
  // One parameter, worked by hand: lr 0.1, betas (0.9, 0.999), eps 1e-8, weight
  // decay 0.1, grad_scale 2 (so the raw gradients 0.5 and 0.25 act as 1 and 0.5).
  //  step 1: p = 1 * (1 - 0.01) = 0.99; m = 0.1; v = 0.001;
  //          m^ = 0.1 / 0.1 = 1; v^ = 0.001 / 0.001 = 1; p = 0.99 - 0.1 / (1 + 1e-8)
  //  step 2: p = 0.890000001 * 0.99; m = 0.09 + 0.05 = 0.14; v = 0.000999 + 0.00025;
  //          m^ = 0.14 / 0.19; v^ = 0.001249 / 0.001999;
  //          p = 0.88110000099 - 0.1 * 0.7368421053 / (0.7904507660 + 1e-8)
  const double want_p[2] = {0.890000001, 0.7878820382881611};
  const double want_m[2] = {0.1, 0.14};
  const double want_v[2] = {0.001, 0.001249};
  Buf p(ops_, DType::f32, 1), g(ops_, DType::f32, 1), m(ops_, DType::f32, 1),
      v(ops_, DType::f32, 1);
  p[0] = 1.0f;
  ops_.zero(m);
  ops_.zero(v);
  const float grads[2] = {0.5f, 0.25f};
  for (int step = 1; step <= 2; ++step) {
    g[0] = grads[step - 1];
    ops_.adamw(p, g, m, v, {}, {{0, 1, 0.1f}}, {0.1f, 0.9f, 0.999f, 1e-8f, 2.0f, step}, false);
    // The op gets f32 hyperparameters: 1 - 0.999f is 0.001 * (1 - 1.3e-5), which
    // moves v by that much (and cancels in the bias-corrected step); everything
    // else is off by f32 rounding only.
    EXPECT_NEAR(p[0], want_p[step - 1], 1e-6) << "step " << step;
    EXPECT_NEAR(m[0], want_m[step - 1], 1e-6) << "step " << step;
    EXPECT_NEAR(v[0], want_v[step - 1], 2e-5 * want_v[step - 1]) << "step " << step;
  }
  EXPECT_EQ(g[0], 0.25f) << "adamw must not modify the gradient";

  // Many elements, three steps, against the update written out in double with
  // the same f32 hyperparameters.
  const int64_t n = 20;
  const float lr = 3e-3f, b1 = 0.8f, b2 = 0.95f, eps = 1e-6f, wd = 0.05f, gs = 0.5f;
  Buf P(ops_, DType::f32, n), G(ops_, DType::f32, n), Mo(ops_, DType::f32, n),
      Vo(ops_, DType::f32, n);
  fill(P);
  ops_.zero(Mo);
  ops_.zero(Vo);
  std::vector<double> rp(P.f(), P.f() + n), rm(n, 0.0), rv(n, 0.0);
  for (int step = 1; step <= 3; ++step) {
    fill(G);
    ops_.adamw(P, G, Mo, Vo, {}, {{0, n, wd}}, {lr, b1, b2, eps, gs, step}, false);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(G[i]) * gs;
      rm[i] = b1 * rm[i] + (1 - double(b1)) * gi;
      rv[i] = b2 * rv[i] + (1 - double(b2)) * gi * gi;
      rp[i] *= 1 - double(lr) * wd;
      rp[i] -= lr * (rm[i] / (1 - std::pow(double(b1), step))) /
               (std::sqrt(rv[i] / (1 - std::pow(double(b2), step))) + eps);
    }
  }
  expect_close("adamw param", P.f(), rp);
  expect_close("adamw exp_avg", Mo.f(), rm);
  expect_close("adamw exp_avg_sq", Vo.f(), rv, kFwdTol, 1e-6);

  // Zero weight decay and a zero gradient leave the parameter where it is.
  p[0] = 0.75f;
  g[0] = 0.0f;
  ops_.zero(m);
  ops_.zero(v);
  ops_.adamw(p, g, m, v, {}, {{0, 1, 0.0f}}, {0.1f, 0.9f, 0.999f, 1e-8f, 1.0f, 1}, false);
  EXPECT_EQ(p[0], 0.75f);
  EXPECT_THROW(
      ops_.adamw(p, g, m, v, {}, {{0, 1, 0.0f}}, {0.1f, 0.9f, 0.999f, 1e-8f, 1.0f, 0}, false),
      Error);
}

// The engine's call: one shard, spans with their own decay and gaps between
// them (padding), the bf16 all-gather copy and the cleared gradient in the
// same op. Each span must equal AdamW on that span alone.
TEST_F(CpuOpsTest, AdamWOverSpansWritesTheCopyAndClears) {
  const int64_t n = 40;
  const std::vector<AdamWSpan> spans = {{2, 10, 0.1f}, {12, 6, 0.0f}, {24, 13, 0.1f}};
  const AdamWHyper h{3e-3f, 0.8f, 0.95f, 1e-6f, 0.5f, 2};
  Buf p(ops_, DType::f32, n), g(ops_, DType::f32, n), m(ops_, DType::f32, n),
      v(ops_, DType::f32, n), send(ops_, DType::bf16, n);
  fill(p);
  fill(g);
  fill(m, -0.1f, 0.1f);
  fill(v, 0.0f, 0.01f);
  const std::vector<float> p0 = snapshot(p), g0 = snapshot(g), m0 = snapshot(m), v0 = snapshot(v);
  ops_.adamw(p, g, m, v, send, spans, h, true);
  for (const AdamWSpan& sp : spans) {
    Buf q(ops_, DType::f32, sp.count), gq(ops_, DType::f32, sp.count),
        mq(ops_, DType::f32, sp.count), vq(ops_, DType::f32, sp.count);
    std::copy_n(p0.begin() + sp.begin, sp.count, q.f());
    std::copy_n(g0.begin() + sp.begin, sp.count, gq.f());
    std::copy_n(m0.begin() + sp.begin, sp.count, mq.f());
    std::copy_n(v0.begin() + sp.begin, sp.count, vq.f());
    ops_.adamw(q, gq, mq, vq, {}, {{0, sp.count, sp.weight_decay}}, h, false);
    for (int64_t i = 0; i < sp.count; ++i) {
      EXPECT_EQ(p[sp.begin + i], q[i]) << "span at " << sp.begin << ", element " << i;
      EXPECT_EQ(m[sp.begin + i], mq[i]);
      EXPECT_EQ(v[sp.begin + i], vq[i]);
      EXPECT_EQ(gq[i], g0[size_t(sp.begin + i)]) << "clear_grad false must keep the gradient";
    }
  }
  for (int64_t i : {0, 1, 18, 23, 37, 39}) {  // in no span: untouched
    EXPECT_EQ(p[i], p0[size_t(i)]) << i;
    EXPECT_EQ(m[i], m0[size_t(i)]) << i;
    EXPECT_EQ(v[i], v0[size_t(i)]) << i;
  }
  const auto* s16 = static_cast<const uint16_t*>(send.t().data);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(s16[i], f32_to_bf16(p[i])) << "send copy at " << i;
    EXPECT_EQ(g[i], 0.0f) << "gradient at " << i;
  }
  EXPECT_NE(p[2], p0[2]) << "a span element must move";
  // Overlapping or unsorted spans are a caller bug.
  EXPECT_THROW(ops_.adamw(p, g, m, v, {}, {{4, 4, 0.0f}, {6, 4, 0.0f}}, h, false), Error);
  EXPECT_THROW(ops_.adamw(p, g, m, v, {}, {{30, 20, 0.0f}}, h, false), Error);
}

}  // namespace
}  // namespace fsdp
