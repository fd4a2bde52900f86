// Every CUDA op against the fp32 CPU reference on fresh random inputs, one
// GoogleTest per case of the op table (tests/model/op_table/op_table.h, which
// also holds the tolerances and their reasons; bench/cuda/bench_ops.cpp times
// the same cases). Both backends get the same bf16-representable inputs;
// outputs are poisoned with NaN first, and a non-finite element fails
// whatever the norm says. One-off checks that are no op case (memory, error
// reporting, reproducibility) are plain tests below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "tests/model/cuda/cuda_test_util.h"
#include "tests/model/op_table/op_table.h"

namespace fsdp::test {

// How GoogleTest prints a case (in failure messages).
void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.op << " " << c.shape << " " << c.variant;
}

namespace {

constexpr DType BF = DType::bf16, F32 = DType::f32;

// One CudaOps for the whole program: cuBLASLt plans and cuDNN graphs are
// built once per shape, as in a run. Every test synchronises before it ends,
// so a kernel-reported error stays with the test that caused it.
// allow_slow_attention, as under --debug: this suite judges numbers, whichever
// engine cuDNN runs; small shapes here (head_dim 16, T = 96) may have no fast
// fused engine, and refusing those is the trainer's policy, not a parity bug.
CudaOps& gpu() {
  static CudaOps* ops = [] {
    CudaOpsOptions o;
    o.allow_slow_attention = true;
    return new CudaOps(o);
  }();  // never destroyed: outlives every test
  return *ops;
}

// ---- the op table -----------------------------------------------------------

// Checks the device's side d against the reference's side r, check by check.
void compare(Ops& cpu, Ops& dev, const std::vector<Check>& r, const std::vector<Check>& d) {
  ASSERT_EQ(r.size(), d.size()) << "the case bound different checks on the two backends";
  for (size_t i = 0; i < d.size(); ++i) {
    const Check& c = d[i];
    SCOPED_TRACE(c.what);
    if (c.scalar) {
      const double got = c.scalar(), want = r[i].scalar();
      const double e = std::abs(got - want) / std::abs(want);
      std::printf("  %-34s rel err %.2e (tol %.2g)\n", c.what.c_str(), e, c.tol.rel);
      EXPECT_TRUE(std::isfinite(got)) << c.what;
      EXPECT_LE(e, c.tol.rel) << c.what << ": " << got << " vs " << want
                              << " (tolerance: " << c.tol.why << ")";
      continue;
    }
    const std::vector<float> got = download(dev, c.t);
    const std::vector<float> want = c.want.empty() ? download(cpu, r[i].t) : c.want;
    if (c.tol.rel == 0.0)
      expect_same(c.what.c_str(), got, want);
    else
      expect_rel(c.what.c_str(), got, want, c.tol.rel, c.tol.why);
  }
}

// One case: bound on both backends from one seed, run, compared check by check.
void parity(const OpCase& oc, CudaOps& dev) {
  // Fresh inputs each run; FSDP_TEST_SEED=<seed from a failure> repeats one.
  const char* fixed = std::getenv("FSDP_TEST_SEED");
  const uint32_t seed = fixed ? uint32_t(std::stoul(fixed)) : std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FSDP_TEST_SEED repeats it)");
  std::printf("%s %s, %s [%s]\n", oc.op.c_str(), oc.shape.c_str(), oc.variant.c_str(),
              oc.dtypes.c_str());
  CpuOps cpu;
  {
    Pool cpool(cpu), gpool(dev);
    Env re(cpu, cpool, seed, /*reference=*/true), de(dev, gpool, seed, /*reference=*/false);
    const Bound r = oc.bind(re), d = oc.bind(de);
    run_parity(r, d, cpu, dev, [&](const std::vector<Check>& rc, const std::vector<Check>& dc) {
      compare(cpu, dev, rc, dc);
    });
    dev.synchronize();  // a kernel-reported error belongs to this case
  }
  dev.synchronize();  // the pool's frees
}

class OpParity : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpParity, MatchesCpuReference) {
  FSDP_SKIP_WITHOUT_GPU();
  parity(GetParam(), gpu());
}

// --debug's attention: cuDNN's deterministic backward is other engines (for
// grouped heads often only the FALLBACK one), so every attention case of the
// table, strided v and dv included, runs again on a CudaOps made as --debug
// makes it.
TEST(DeterministicAttention, MatchesCpuReference) {
  FSDP_SKIP_WITHOUT_GPU();
  static CudaOps* det = [] {
    CudaOpsOptions o;
    o.deterministic = true;
    o.allow_slow_attention = true;
    return new CudaOps(o);
  }();  // never destroyed, as gpu()
  int n = 0;
  for (const OpCase& oc : op_cases()) {
    if (oc.op != "attention") continue;
    SCOPED_TRACE(oc.name());
    parity(oc, *det);
    ++n;
  }
  EXPECT_GE(n, 4);
}

INSTANTIATE_TEST_SUITE_P(Table, OpParity, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& i) { return i.param.name(); });

// ---- one-off checks ---------------------------------------------------------

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FSDP_SKIP_WITHOUT_GPU();
    g_ = std::make_unique<Pool>(gpu());
  }
  void TearDown() override {
    g_.reset();
    if (have_gpu()) gpu().synchronize();
  }
  std::vector<float> rnd(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    return random_bf16(rng_, n, lo, hi);
  }
  std::vector<float> gpu_out(Tensor t) { return download(gpu(), t); }

  std::unique_ptr<Pool> g_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(CudaOpsTest, MemoryRoundTrip) {
  EXPECT_EQ(gpu().compute_dtype(), BF);
  const auto h = rnd(1001);
  Tensor a = g_->make(F32, h), b = g_->make(F32, 1001);
  poison(gpu(), b);
  gpu().copy(b, a);
  EXPECT_EQ(gpu_out(b), h);
  gpu().zero(b);
  for (float x : gpu_out(b)) EXPECT_EQ(x, 0.0f);
  EXPECT_THROW(gpu().copy(g_->make(BF, 1001), a), Error);
  EXPECT_EQ(gpu().alloc(F32, 0).numel, 0);
}

// An out-of-vocabulary id is flagged by the kernel and reported as an Error
// at the next synchronisation, naming what was wrong.
void expect_sync_error(const char* needle) {
  try {
    gpu().synchronize();
    ADD_FAILURE() << "no error reported; expected one about a " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(CudaOpsTest, OutOfVocabularyTokenIsReported) {
  std::vector<int32_t> bad = {0, 5, 97};
  Tensor out = g_->make(BF, 3 * 64);
  gpu().embedding(out, g_->tokens(bad), g_->make(BF, rnd(97 * 64)), 3, 64);
  expect_sync_error("token id");
}

TEST_F(CudaOpsTest, OutOfVocabularyTargetIsReported) {
  // 1003 is a padding column of Vp = 1024: outside the vocabulary, not ignored.
  std::vector<int32_t> bad = {0, 1003, 5};
  Tensor losses = g_->make(F32, 3), logits = g_->make(BF, rnd(3 * 1024));
  gpu().cross_entropy(losses, logits, g_->tokens(bad), 3, 1003, 1024, 1.0f);
  expect_sync_error("target id");
}

TEST_F(CudaOpsTest, SumSquaresIsReproducible) {
  Tensor x = g_->make(F32, rnd(100003, -3.0f, 3.0f));
  const double first = gpu().sum_squares(x);
  EXPECT_EQ(gpu().sum_squares(x), first) << "the same bits every time";
}

TEST(CudaOpsNoGpu, SkipsOrConstructs) {
  // Documents the contract CTest relies on: without a GPU every suite here
  // skips instead of failing.
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  EXPECT_NE(gpu().stream(), nullptr);
}

}  // namespace
}  // namespace fsdp::test
