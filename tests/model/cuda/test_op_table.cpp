// The op table's own checks on the CPU reference alone, so they run on every
// machine, GPU or not: names are unique (GoogleTest needs that), and every
// case binds, runs forward and backward, and writes every output it checks
// (outputs start as NaN, so a size mismatch between an output and what the
// op writes shows up here). The GPU half of each case runs the same bind
// lambda, in test_cuda_ops and bench_cuda_ops.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/cpu/cpu_ops.h"
#include "tests/model/cuda/op_cases.h"

namespace fsdp::test {
namespace {

void expect_written(Ops& cpu, const std::string& name, const std::vector<Check>& checks) {
  for (const Check& c : checks) {
    SCOPED_TRACE(name + ": " + c.what);
    if (c.scalar) {
      EXPECT_TRUE(std::isfinite(c.scalar()));
      continue;
    }
    ASSERT_GT(c.t.numel, 0);
    if (!c.want.empty()) {
      EXPECT_EQ(int64_t(c.want.size()), c.t.numel);
    }
    int64_t bad = 0;
    for (float x : download(cpu, c.t)) bad += !std::isfinite(x);
    EXPECT_EQ(bad, 0) << "elements the reference left unwritten (NaN) or made non-finite";
    EXPECT_GE(c.tol.rel, 0.0);
    EXPECT_NE(c.tol.why, nullptr);
  }
}

void run_on_reference(const std::vector<OpCase>& cases) {
  for (const OpCase& oc : cases) {
    SCOPED_TRACE(oc.name());
    CpuOps cpu;
    Pool pool(cpu);
    Env env(cpu, pool, 42, /*reference=*/true);
    const Bound b = oc.bind(env);
    ASSERT_TRUE(bool(b.fwd));
    EXPECT_FALSE(b.fwd_checks.empty()) << "a case that checks nothing";
    EXPECT_TRUE(b.bwd || b.bwd_checks.empty());
    EXPECT_TRUE(b.bwd || (b.from_ref.empty() && b.from_dev.empty()));
    EXPECT_EQ(oc.bwd_flops + oc.bwd_bytes > 0, bool(b.bwd)) << "backward's work is stated";
    b.fwd();
    expect_written(cpu, oc.name(), b.fwd_checks);
    if (b.bwd) {
      EXPECT_FALSE(b.bwd_checks.empty());
      b.bwd();
      expect_written(cpu, oc.name(), b.bwd_checks);
    }
  }
}

// The parity protocol of test_cuda_ops with the reference on both sides:
// bound twice with one seed, a case must draw the same inputs and give the
// same numbers bitwise (the CPU is deterministic), which exercises the
// protocol, the pairing of checks and the hand-over of forward results.
TEST(OpTable, ReferenceAgainstItselfIsBitwiseEqual) {
  for (const OpCase& oc : op_cases()) {
    SCOPED_TRACE(oc.name());
    CpuOps a, b;
    Pool pa(a), pb(b);
    Env ea(a, pa, 7, /*reference=*/true), eb(b, pb, 7, /*reference=*/true);
    const Bound ra = oc.bind(ea), rb = oc.bind(eb);
    int compared = 0;
    run_parity(ra, rb, a, b, [&](const std::vector<Check>& x, const std::vector<Check>& y) {
      ASSERT_EQ(x.size(), y.size());
      for (size_t i = 0; i < x.size(); ++i) {
        SCOPED_TRACE(y[i].what);
        if (y[i].scalar) {
          EXPECT_EQ(y[i].scalar(), x[i].scalar());
        } else {
          const auto got = download(b, y[i].t), want = download(a, x[i].t);
          EXPECT_TRUE(got == want) << "the same seed gave different numbers";
        }
        ++compared;
      }
    });
    EXPECT_GT(compared, 0);
  }
}

TEST(OpTable, NamesAreUniqueAndDescribed) {
  std::set<std::string> names;
  for (const OpCase& c : op_cases()) {
    EXPECT_TRUE(names.insert(c.name()).second) << "duplicate case " << c.name();
    EXPECT_FALSE(c.op.empty() || c.shape.empty() || c.dtypes.empty()) << c.name();
    EXPECT_GT(c.fwd_flops + c.fwd_bytes, 0) << c.name() << ": forward's work is stated";
  }
  EXPECT_GE(names.size(), 50u);  // a floor: the table did not come out empty
}

TEST(OpTable, EveryCaseRunsOnTheReference) {
  run_on_reference(op_cases());
}

TEST(OpTable, ModelShapeCasesRunOnTheReferenceAtTinyShapes) {
  run_on_reference(model_op_cases(model_preset("tiny"), 2, 16));
}

}  // namespace
}  // namespace fsdp::test
