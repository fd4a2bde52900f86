// Every CUDA op against the fp32 CPU reference on fresh random inputs. Both
// backends get the same bf16-representable inputs; outputs are poisoned with
// NaN first, and a non-finite element fails whatever the norm says.
//
// Tolerances (relative L2 error ||gpu - cpu|| / ||cpu||):
//  - kRound = 4e-3: elementwise ops with bf16 outputs and fp32 math. Rounding
//    one value to bf16 costs up to 2^-9 = 2e-3 relative, about 1.1e-3 in L2.
//  - kGemm = 5e-3: cuBLASLt rounds the fp32 accumulator once; its summation
//    order differs from OpenBLAS by ~1e-6.
//  - kAttn = 1e-2: cuDNN rounds the probabilities to bf16 before the P.V
//    product (flash attention does), and backward chains several bf16
//    intermediates; 1e-2 is the loose end of the 1e-3..1e-2 band.
//  - kF32 = 1e-4: fp32 outputs (rstd, lse, losses): fp32 arithmetic with fast
//    exponentials against the reference's double.
//  - AdamW, cast and accumulate are fp32 in and out: 1e-6 or exact.
// A real bug (wrong transpose, head mapping, sign, missing term) gives errors
// of order 1e-1 or more.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "tests/model/cuda/cuda_test_util.h"

namespace fsdp {
namespace {

using test::download;
using test::expect_rel;
using test::poison;
using test::Pool;
using test::random_bf16;

constexpr double kRound = 4e-3, kGemm = 5e-3, kAttn = 1e-2, kF32 = 1e-4;
constexpr DType BF = DType::bf16, F32 = DType::f32;

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FSDP_SKIP_WITHOUT_GPU();
    gpu_ = std::make_unique<CudaOps>();
    g_ = std::make_unique<Pool>(*gpu_);
    c_ = std::make_unique<Pool>(cpu_);
  }
  void TearDown() override {
    g_.reset();
    c_.reset();
    if (gpu_) gpu_->synchronize();
  }
  std::vector<float> rnd(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    return random_bf16(rng_, n, lo, hi);
  }
  std::vector<float> cpu_out(Tensor t) { return download(cpu_, t); }
  std::vector<float> gpu_out(Tensor t) { return download(*gpu_, t); }

  CpuOps cpu_;
  std::unique_ptr<CudaOps> gpu_;
  std::unique_ptr<Pool> g_, c_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(CudaOpsTest, MemoryRoundTrip) {
  EXPECT_EQ(gpu_->compute_dtype(), BF);
  const auto h = rnd(1001);
  Tensor a = g_->make(F32, h), b = g_->make(F32, 1001);
  poison(*gpu_, b);
  gpu_->copy(b, a);
  EXPECT_EQ(gpu_out(b), h);
  gpu_->zero(b);
  for (float x : gpu_out(b)) EXPECT_EQ(x, 0.0f);
  EXPECT_THROW(gpu_->copy(g_->make(BF, 1001), a), Error);
  EXPECT_EQ(gpu_->alloc(F32, 0).numel, 0);
}

TEST_F(CudaOpsTest, Embedding) {
  for (int C : {64, 1024, 36}) {  // 36: the unvectorised path
    const int V = 97, n = 300;
    std::uniform_int_distribution<int> pick(0, 9);  // few distinct tokens: many repeats
    std::vector<int32_t> tok(n);
    for (auto& t : tok) t = pick(rng_) * 7;
    const auto w = rnd(int64_t(V) * C), d = rnd(int64_t(n) * C), dw0 = rnd(int64_t(V) * C);
    Tensor cw = c_->make(F32, w), cout = c_->make(F32, int64_t(n) * C), ctok = c_->tokens(tok);
    Tensor gw = g_->make(BF, w), gout = g_->make(BF, int64_t(n) * C), gtok = g_->tokens(tok);
    poison(*gpu_, gout);
    cpu_.embedding(cout, ctok, cw, n, C);
    gpu_->embedding(gout, gtok, gw, n, C);
    EXPECT_EQ(gpu_out(gout), cpu_out(cout)) << "a gather is exact";

    Tensor cd = c_->make(F32, d), gd = g_->make(BF, d);
    for (DType dt : {BF, F32}) {
      Tensor cdw = c_->make(F32, dw0), gdw = g_->make(dt, dw0);
      cpu_.embedding_backward(cdw, cd, ctok, n, C);
      gpu_->embedding_backward(gdw, gd, gtok, n, C);
      expect_rel(dt == BF ? "embedding dwte (bf16, +=)" : "embedding dwte (f32, +=)", gpu_out(gdw),
                 cpu_out(cdw), dt == BF ? kRound : 1e-6);
    }
  }
  std::vector<int32_t> bad = {0, 5, 97};
  Tensor out = g_->make(BF, 3 * 64);
  gpu_->embedding(out, g_->tokens(bad), g_->make(BF, rnd(97 * 64)), 3, 64);
  EXPECT_THROW(gpu_->synchronize(), Error) << "an out-of-vocabulary token is reported";
}

TEST_F(CudaOpsTest, RmsNorm) {
  struct Case {
    int rows, dim;
  };
  for (Case k : {Case{300, 64}, Case{64, 1024}, Case{1000, 16}, Case{50, 40}}) {
    const int64_t n = int64_t(k.rows) * k.dim;
    const auto x = rnd(n, -2.0f, 2.0f), g = rnd(k.dim, 0.5f, 1.5f), dy = rnd(n);
    const auto dx0 = rnd(n), dg0 = rnd(k.dim);
    Tensor cx = c_->make(F32, x), cg = c_->make(F32, g), cy = c_->make(F32, n),
           cr = c_->make(F32, k.rows);
    Tensor gx = g_->make(BF, x), gg = g_->make(BF, g), gy = g_->make(BF, n),
           gr = g_->make(F32, k.rows);
    poison(*gpu_, gy);
    poison(*gpu_, gr);
    cpu_.rmsnorm(cy, cr, cx, cg, k.rows, k.dim, 1e-5f);
    gpu_->rmsnorm(gy, gr, gx, gg, k.rows, k.dim, 1e-5f);
    expect_rel("rmsnorm y", gpu_out(gy), cpu_out(cy), kRound);
    expect_rel("rmsnorm rstd (f32)", gpu_out(gr), cpu_out(cr), kF32);

    // Backward from the CPU's rstd on both sides, so only backward is judged.
    const auto rstd = cpu_out(cr);
    gpu_->to_device(gr, rstd.data());
    for (bool acc : {false, true}) {
      Tensor cdy = c_->make(F32, dy), cdx = c_->make(F32, dx0), cdg = c_->make(F32, dg0);
      Tensor gdy = g_->make(BF, dy), gdx = g_->make(BF, dx0), gdg = g_->make(BF, dg0);
      if (!acc) poison(*gpu_, gdx);
      cpu_.rmsnorm_backward(cdx, cdg, cdy, cx, cg, cr, k.rows, k.dim, acc);
      gpu_->rmsnorm_backward(gdx, gdg, gdy, gx, gg, gr, k.rows, k.dim, acc);
      expect_rel(acc ? "rmsnorm dx (+=)" : "rmsnorm dx", gpu_out(gdx), cpu_out(cdx), kRound);
      expect_rel("rmsnorm dg (bf16, +=)", gpu_out(gdg), cpu_out(cdg), kRound);
    }
    // dx may alias dy.
    Tensor cdy = c_->make(F32, dy), cdg = c_->make(F32, dg0);
    Tensor gdy = g_->make(BF, dy), gdg = g_->make(F32, dg0);
    cpu_.rmsnorm_backward(cdy, cdg, cdy, cx, cg, cr, k.rows, k.dim, false);
    gpu_->rmsnorm_backward(gdy, gdg, gdy, gx, gg, gr, k.rows, k.dim, false);
    expect_rel("rmsnorm dx aliasing dy", gpu_out(gdy), cpu_out(cdy), kRound);
    expect_rel("rmsnorm dg (f32, +=)", gpu_out(gdg), cpu_out(cdg), 1e-3);
  }
}

TEST_F(CudaOpsTest, Linear) {
  struct Case {
    int M, N, K;
  };
  for (Case s : {Case{256, 192, 128}, Case{100, 72, 40}, Case{512, 1024, 2816}}) {
    const int M = s.M, N = s.N, K = s.K;
    const auto x = rnd(int64_t(M) * K), w = rnd(int64_t(N) * K), dy = rnd(int64_t(M) * N);
    const auto dx0 = rnd(int64_t(M) * K), dw0 = rnd(int64_t(N) * K);
    Tensor cx = c_->make(F32, x), cw = c_->make(F32, w), cy = c_->make(F32, int64_t(M) * N);
    Tensor gx = g_->make(BF, x), gw = g_->make(BF, w), gy = g_->make(BF, int64_t(M) * N);
    poison(*gpu_, gy);
    cpu_.linear(cy, cx, cw, M, N, K);
    gpu_->linear(gy, gx, gw, M, N, K);
    expect_rel("linear y", gpu_out(gy), cpu_out(cy), kGemm);
    for (bool acc : {false, true}) {
      for (DType dwt : {BF, F32}) {
        Tensor cdy = c_->make(F32, dy), cdx = c_->make(F32, dx0), cdw = c_->make(F32, dw0);
        Tensor gdy = g_->make(BF, dy), gdx = g_->make(BF, dx0), gdw = g_->make(dwt, dw0);
        if (!acc) poison(*gpu_, gdx);
        cpu_.linear_backward(cdx, cdw, cdy, cx, cw, M, N, K, acc);
        gpu_->linear_backward(gdx, gdw, gdy, gx, gw, M, N, K, acc);
        expect_rel(acc ? "linear dx (+=)" : "linear dx", gpu_out(gdx), cpu_out(cdx), kGemm);
        expect_rel(dwt == BF ? "linear dw (bf16, +=)" : "linear dw (f32, +=)", gpu_out(gdw),
                   cpu_out(cdw), kGemm);
      }
    }
    // Empty dx skips the input gradient.
    Tensor cdw = c_->make(F32, dw0), gdw = g_->make(BF, dw0);
    cpu_.linear_backward(Tensor{}, cdw, c_->make(F32, dy), cx, cw, M, N, K, false);
    gpu_->linear_backward(Tensor{nullptr, BF, 0}, gdw, g_->make(BF, dy), gx, gw, M, N, K, false);
    expect_rel("linear dw, dx skipped", gpu_out(gdw), cpu_out(cdw), kGemm);
  }
  // A weight that is a slice at an odd offset of a flat unit (only 2-byte aligned).
  const int M = 64, N = 48, K = 32;
  const auto x = rnd(M * K), flat = rnd(1 + N * K);
  Tensor gflat = g_->make(BF, flat), cflat = c_->make(F32, flat);
  Tensor gy = g_->make(BF, M * N), cy = c_->make(F32, M * N);
  gpu_->linear(gy, g_->make(BF, x), gflat.slice(1, N * K), M, N, K);
  cpu_.linear(cy, c_->make(F32, x), cflat.slice(1, N * K), M, N, K);
  expect_rel("linear y, misaligned weight", gpu_out(gy), cpu_out(cy), kGemm);
}

TEST_F(CudaOpsTest, Rope) {
  for (int hd : {64, 16, 12}) {  // 12: the unvectorised path
    const int B = 2, T = 40, H = 3;
    const int64_t n = int64_t(B) * T * H * hd;
    const auto x = rnd(n);
    Tensor cx = c_->make(F32, x), gx = g_->make(BF, x);
    cpu_.rope(cx, B, T, H, hd, 10000.0f);
    gpu_->rope(gx, B, T, H, hd, 10000.0f);
    expect_rel("rope", gpu_out(gx), cpu_out(cx), kRound);
    cpu_.rope_backward(cx, B, T, H, hd, 10000.0f);
    gpu_->rope_backward(gx, B, T, H, hd, 10000.0f);
    expect_rel("rope then rope_backward", gpu_out(gx), x, kRound);
    expect_rel("rope_backward", gpu_out(gx), cpu_out(cx), kRound);
  }
}

TEST_F(CudaOpsTest, Attention) {
  struct Case {
    int B, T, H, Hkv, hd;
  };
  for (Case s : {Case{2, 128, 4, 2, 64}, Case{1, 64, 4, 4, 16}, Case{2, 96, 8, 2, 128}}) {
    const int64_t nq = int64_t(s.B) * s.T * s.H * s.hd, nkv = int64_t(s.B) * s.T * s.Hkv * s.hd;
    const int64_t nl = int64_t(s.B) * s.H * s.T;
    const auto q = rnd(nq, -2.0f, 2.0f), k = rnd(nkv, -2.0f, 2.0f), v = rnd(nkv), dout = rnd(nq);
    Tensor cq = c_->make(F32, q), ck = c_->make(F32, k), cv = c_->make(F32, v);
    Tensor co = c_->make(F32, nq), cl = c_->make(F32, nl);
    Tensor gq = g_->make(BF, q), gk = g_->make(BF, k), gv = g_->make(BF, v);
    Tensor go = g_->make(BF, nq), gl = g_->make(F32, nl);
    poison(*gpu_, go);
    poison(*gpu_, gl);
    cpu_.attention(co, cl, cq, ck, cv, s.B, s.T, s.H, s.Hkv, s.hd);
    gpu_->attention(go, gl, gq, gk, gv, s.B, s.T, s.H, s.Hkv, s.hd);
    expect_rel("attention out", gpu_out(go), cpu_out(co), kAttn);
    expect_rel("attention lse (f32)", gpu_out(gl), cpu_out(cl), kF32);

    // Backward from the same forward on both sides: the GPU's bf16 out and
    // its lse, given to the CPU as well.
    const auto o = gpu_out(go), lse = gpu_out(gl);
    cpu_.to_device(co, o.data());
    cpu_.to_device(cl, lse.data());
    Tensor cdo = c_->make(F32, dout), gdo = g_->make(BF, dout);
    Tensor cdq = c_->make(F32, nq), cdk = c_->make(F32, nkv), cdv = c_->make(F32, nkv);
    Tensor gdq = g_->make(BF, nq), gdk = g_->make(BF, nkv), gdv = g_->make(BF, nkv);
    for (Tensor t : {gdq, gdk, gdv}) poison(*gpu_, t);
    cpu_.attention_backward(cdq, cdk, cdv, cdo, co, cl, cq, ck, cv, s.B, s.T, s.H, s.Hkv, s.hd);
    gpu_->attention_backward(gdq, gdk, gdv, gdo, go, gl, gq, gk, gv, s.B, s.T, s.H, s.Hkv, s.hd);
    expect_rel("attention dq", gpu_out(gdq), cpu_out(cdq), kAttn);
    expect_rel("attention dk", gpu_out(gdk), cpu_out(cdk), kAttn);
    expect_rel("attention dv", gpu_out(gdv), cpu_out(cdv), kAttn);
  }
}

TEST_F(CudaOpsTest, SwigluAndAdd) {
  for (int64_t n : {int64_t(4096), int64_t(1003)}) {
    const auto a = rnd(n, -4.0f, 4.0f), b = rnd(n), ds = rnd(n);
    Tensor ca = c_->make(F32, a), cb = c_->make(F32, b), cs = c_->make(F32, n);
    Tensor ga = g_->make(BF, a), gb = g_->make(BF, b), gs = g_->make(BF, n);
    poison(*gpu_, gs);
    cpu_.swiglu(cs, ca, cb, n);
    gpu_->swiglu(gs, ga, gb, n);
    expect_rel("swiglu", gpu_out(gs), cpu_out(cs), kRound);
    Tensor cds = c_->make(F32, ds), cda = c_->make(F32, n), cdb = c_->make(F32, n);
    Tensor gds = g_->make(BF, ds), gda = g_->make(BF, n), gdb = g_->make(BF, n);
    poison(*gpu_, gda);
    poison(*gpu_, gdb);
    cpu_.swiglu_backward(cda, cdb, cds, ca, cb, n);
    gpu_->swiglu_backward(gda, gdb, gds, ga, gb, n);
    expect_rel("swiglu da", gpu_out(gda), cpu_out(cda), kRound);
    expect_rel("swiglu db", gpu_out(gdb), cpu_out(cdb), kRound);
    // In place, as the model calls it: y aliases a.
    cpu_.add(ca, ca, cb, n);
    gpu_->add(ga, ga, gb, n);
    expect_rel("add (in place)", gpu_out(ga), cpu_out(ca), kRound);
    // Odd offsets take the unvectorised path.
    Tensor gy = g_->make(BF, n), cy = c_->make(F32, n);
    gpu_->add(gy.slice(1, n - 1), ga.slice(1, n - 1), gb.slice(1, n - 1), n - 1);
    cpu_.add(cy.slice(1, n - 1), ca.slice(1, n - 1), cb.slice(1, n - 1), n - 1);
    auto gyo = gpu_out(gy), cyo = cpu_out(cy);
    expect_rel("add (misaligned)", {gyo.begin() + 1, gyo.end()}, {cyo.begin() + 1, cyo.end()},
               kRound);
  }
}

TEST_F(CudaOpsTest, CrossEntropy) {
  // (V, Vp): unpadded, and a vocabulary padded as ModelConfig::padded_vocab
  // pads it (50257 -> 50304), whose padding columns must not count.
  for (auto [V, Vp] : {std::pair{50304, 50304}, std::pair{1003, 1003}, std::pair{50257, 50304},
                       std::pair{1003, 1024}}) {
    const int n = 37;
    std::uniform_int_distribution<int> pick(0, V - 1);
    std::vector<int32_t> tg(n);
    for (auto& t : tg) t = pick(rng_);
    tg[3] = -1;  // ignored
    tg[20] = -100;
    const auto logits = rnd(int64_t(n) * Vp, -6.0f, 6.0f);
    for (float scale : {0.0f, 1.0f / 64}) {
      Tensor cl = c_->make(F32, logits), gl = g_->make(BF, logits);
      Tensor closs = c_->make(F32, n), gloss = g_->make(F32, n);
      poison(*gpu_, gloss);
      cpu_.cross_entropy(closs, cl, c_->tokens(tg), n, V, Vp, scale);
      gpu_->cross_entropy(gloss, gl, g_->tokens(tg), n, V, Vp, scale);
      const auto gls = gpu_out(gloss);
      expect_rel("cross_entropy losses (f32)", gls, cpu_out(closs), kF32);
      EXPECT_EQ(gls[3], 0.0f);
      EXPECT_EQ(gls[20], 0.0f);
      if (scale == 0.0f) {
        EXPECT_EQ(gpu_out(gl), logits) << "no gradient asked, logits untouched";
      } else {
        expect_rel("cross_entropy dlogits (in place)", gpu_out(gl), cpu_out(cl), kRound);
      }
    }
  }
}

TEST_F(CudaOpsTest, CastAccumulateSumSquaresAdamW) {
  const int64_t n = 100003;
  const auto x = rnd(n, -3.0f, 3.0f);
  std::vector<float> xf(x);  // not bf16-representable values too
  for (auto& v : xf) v *= 1.0001f;
  Tensor gf = g_->make(F32, xf), gb = g_->make(BF, n), gback = g_->make(F32, n);
  gpu_->cast(gb, gf);
  gpu_->cast(gback, gb);
  const auto back = gpu_out(gback);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], test::round_bf16(xf[i])) << i;

  const auto acc0 = rnd(n);
  for (DType st : {BF, F32}) {
    Tensor cd = c_->make(F32, acc0), gd = g_->make(F32, acc0);
    cpu_.accumulate(cd, c_->make(F32, x), 0.5f);
    gpu_->accumulate(gd, g_->make(st, x), 0.5f);
    expect_rel("accumulate", gpu_out(gd), cpu_out(cd), 1e-6);
  }

  const double want = cpu_.sum_squares(c_->make(F32, xf));
  const double got = gpu_->sum_squares(gf);
  EXPECT_NEAR(got, want, 1e-9 * want);
  EXPECT_EQ(gpu_->sum_squares(gf), got) << "sum_squares is reproducible";

  const auto p = rnd(n), g = rnd(n), m = rnd(n, -0.1f, 0.1f), v = rnd(n, 0.0f, 0.01f);
  Tensor cp = c_->make(F32, p), cg = c_->make(F32, g), cm = c_->make(F32, m), cv = c_->make(F32, v);
  Tensor gp = g_->make(F32, p), gg = g_->make(F32, g), gm = g_->make(F32, m), gv = g_->make(F32, v);
  for (int step = 1; step <= 3; ++step) {
    cpu_.adamw(cp, cg, cm, cv, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step);
    gpu_->adamw(gp, gg, gm, gv, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step);
  }
  expect_rel("adamw param", gpu_out(gp), cpu_out(cp), 1e-6);
  expect_rel("adamw exp_avg", gpu_out(gm), cpu_out(cm), 1e-6);
  expect_rel("adamw exp_avg_sq", gpu_out(gv), cpu_out(cv), 1e-6);
}

TEST(CudaOpsNoGpu, SkipsOrConstructs) {
  // Documents the contract CTest relies on: without a GPU every suite here
  // skips instead of failing.
  if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  CudaOps ops;
  EXPECT_NE(ops.stream(), nullptr);
}

}  // namespace
}  // namespace fsdp
