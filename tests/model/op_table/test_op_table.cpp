// The op table's own checks on the CPU reference alone, so they run on every
// machine, GPU or not: names are unique (GoogleTest needs that); every case
// binds, runs forward and backward, and writes every output it checks
// (outputs start as NaN, so a size mismatch between an output and what the
// op writes shows up here); and the gradient mode: every backward against
// central differences of its forward. The GPU half of each case runs the same
// bind lambda, in test_cuda_ops and bench_cuda_ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/cpu/cpu_ops.h"
#include "tests/model/gradcheck.h"
#include "tests/model/op_table/op_table.h"

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

// Whether a case declares no grads (binding it to find out is cheap).
bool oc_has_no_grads(const OpCase& oc) {
  CpuOps cpu;
  Pool pool(cpu);
  Env env(cpu, pool, 42, /*reference=*/true);
  return oc.bind(env).grads.empty();
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

// ---- gradient mode --------------------------------------------------------------
//
// Tolerance: the loss sum(weight . out) is read from fp32 outputs, so it
// carries rounding noise of ~1e-7 relative; with grad_check's 1e-2 relative
// step that noise is ~1e-5 of a derivative of order 1, and the central
// difference's truncation error is ~h^2 ~ 1e-4. Measured worst errors are
// printed per case (a few 1e-3 at most); kGradTol = 1e-2 leaves room for that
// while a real backward bug (a missing term, wrong sign, wrong head mapping)
// is an error of order 1e-1..1; OpTable.GradientModeCatchesAWrongBackward
// shows a 5% error in one gradient is caught.
constexpr double kGradTol = 1e-2;

// Finite differences cost two forwards per probed coordinate, so the mode
// runs on cases whose forward is cheap; every op with gradients has at least
// one such case (OpTable.EveryBackwardHasItsGradientChecked).
bool cheap_enough(const OpCase& c) {
  return c.fwd_flops <= 1e8 && c.fwd_bytes <= 1e7;
}

struct GradReport {
  std::string what;
  GradCheckResult r;
};

// One case's gradients on the reference ops: each grad's analytic dx (after
// forward and backward, less what was there when it is added) against
// central differences of L = sum(weight . out), with every x put back before
// each forward.
std::vector<GradReport> check_gradients(Ops& cpu, const OpCase& oc) {
  Pool pool(cpu);
  Env env(cpu, pool, 42, /*reference=*/true);
  const Bound b = oc.bind(env);
  std::vector<std::vector<float>> xs, before, weights;
  for (const Bound::Grad& g : b.grads) {
    xs.push_back(download(cpu, g.x));
    before.push_back(g.added ? download(cpu, g.dx) : std::vector<float>{});
  }
  for (const Bound::Term& t : b.loss)
    weights.push_back(t.weight.numel > 0 ? download(cpu, t.weight) : std::vector<float>{});
  b.fwd();
  if (b.bwd) b.bwd();
  std::vector<std::vector<float>> analytic;
  for (size_t k = 0; k < b.grads.size(); ++k) {
    std::vector<float> a = download(cpu, b.grads[k].dx);
    FSDP_CHECK(a.size() == xs[k].size(), oc.name(), ": ", b.grads[k].what, " is not x's size");
    for (size_t i = 0; i < before[k].size(); ++i) a[i] -= before[k][i];
    analytic.push_back(std::move(a));
  }
  auto loss = [&] {
    for (size_t k = 0; k < b.grads.size(); ++k) upload(cpu, b.grads[k].x, xs[k]);
    b.fwd();
    double sum = 0.0;
    for (size_t t = 0; t < b.loss.size(); ++t) {
      const std::vector<float> y = download(cpu, b.loss[t].out);
      for (size_t i = 0; i < y.size(); ++i)
        sum += double(y[i]) * (weights[t].empty() ? double(b.loss[t].scale) : weights[t][i]);
    }
    return sum;
  };
  GradCheckOptions opt;
  opt.max_coords = 24;
  std::vector<GradReport> out;
  for (size_t k = 0; k < b.grads.size(); ++k)
    out.push_back({b.grads[k].what,
                   grad_check(loss, xs[k].data(), analytic[k].data(), int64_t(xs[k].size()), opt)});
  return out;
}

// The checker itself: a 5% error in one coordinate is caught, and the
// parameters come back as they were.
TEST(GradCheck, DetectsWrongGradient) {
  // loss = sum_i c_i x_i^2, gradient 2 c_i x_i.
  std::vector<float> x = {0.3f, -1.2f, 0.7f, 2.0f, -0.5f};
  const std::vector<double> c = {1.0, 0.5, -2.0, 0.25, 3.0};
  auto loss = [&] {
    double s = 0.0;
    for (size_t i = 0; i < x.size(); ++i) s += c[i] * double(x[i]) * x[i];
    return s;
  };
  std::vector<float> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) g[i] = float(2.0 * c[i] * x[i]);
  const std::vector<float> x0 = x;
  EXPECT_LT(grad_check(loss, x.data(), g.data(), int64_t(x.size())).worst_rel_err, 1e-3);
  EXPECT_EQ(x, x0) << "grad_check must restore the parameters";
  g[2] *= 1.05f;
  const GradCheckResult bad = grad_check(loss, x.data(), g.data(), int64_t(x.size()));
  EXPECT_GT(bad.worst_rel_err, kGradTol);
  EXPECT_EQ(bad.worst_index, 2);
}

TEST(OpTable, BackwardsMatchFiniteDifferences) {
  CpuOps cpu;
  int cases = 0;
  for (const OpCase& oc : op_cases()) {
    if (!cheap_enough(oc) || oc_has_no_grads(oc)) continue;
    SCOPED_TRACE(oc.name());
    for (const GradReport& g : check_gradients(cpu, oc)) {
      std::printf("  [gradient] %-60s %-7s worst rel err %.2e over %d coords\n", oc.name().c_str(),
                  g.what.c_str(), g.r.worst_rel_err, g.r.checked);
      EXPECT_LT(g.r.worst_rel_err, kGradTol) << g.what << ": " << g.r.describe();
      EXPECT_GT(g.r.checked, 0) << g.what;
    }
    ++cases;
  }
  EXPECT_GE(cases, 20);  // a floor: the mode did not come out empty
}

TEST(OpTable, EveryBackwardHasItsGradientChecked) {
  std::map<std::string, int> checked;  // op -> cases the gradient mode runs
  for (const OpCase& oc : op_cases()) {
    SCOPED_TRACE(oc.name());
    CpuOps cpu;
    Pool pool(cpu);
    Env env(cpu, pool, 42, /*reference=*/true);
    const Bound b = oc.bind(env);
    // A backward either declares what it differentiates or says why not.
    if (b.bwd) {
      EXPECT_NE(b.grads.empty(), b.no_gradient.empty()) << "grads or no_gradient";
    }
    EXPECT_EQ(b.grads.empty(), b.loss.empty()) << "grads need a loss, and a loss grads";
    if (!b.grads.empty()) checked[oc.op] += cheap_enough(oc);
  }
  for (const auto& [op, n] : checked)
    EXPECT_GT(n, 0) << op << " has gradients but no case small enough for the gradient mode";
  EXPECT_GE(checked.size(), 8u);
}

// A backward 5% off in one term must fail the mode: linear's dw scaled.
class WrongLinearBackward : public CpuOps {
 protected:
  void do_linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N, int K,
                          bool accumulate_dx) override {
    std::vector<float> dw0 = download(*this, dw);
    CpuOps::do_linear_backward(dx, dw, dy, x, w, M, N, K, accumulate_dx);
    std::vector<float> dw1 = download(*this, dw);
    for (size_t i = 0; i < dw1.size(); ++i) dw1[i] = dw0[i] + 1.05f * (dw1[i] - dw0[i]);
    upload(*this, dw, dw1);
  }
};

TEST(OpTable, GradientModeCatchesAWrongBackward) {
  int judged = 0;
  for (const OpCase& oc : op_cases()) {
    if (oc.op != "linear" || !cheap_enough(oc) || oc_has_no_grads(oc)) continue;
    CpuOps right;
    WrongLinearBackward wrong;
    for (const GradReport& g : check_gradients(right, oc)) EXPECT_LT(g.r.worst_rel_err, kGradTol);
    for (const GradReport& g : check_gradients(wrong, oc)) {
      if (g.what == "dw") {
        EXPECT_GT(g.r.worst_rel_err, kGradTol) << oc.name();
      } else {
        EXPECT_LT(g.r.worst_rel_err, kGradTol) << oc.name();
      }
    }
    ++judged;
  }
  EXPECT_GT(judged, 0);
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
