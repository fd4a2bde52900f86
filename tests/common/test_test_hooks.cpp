// The test-only hooks (common/test_hooks.h) read as the fault tests rely on:
// a transient fault hits the one step that reads its position, once, on the
// rank (or node) it names; a spike position hits every step that reads it;
// malformed values are refused. The end-to-end behaviour is
// tests/src/rerun_test.py's, rollback_test.py's and time_budget_test.py's.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/test_hooks.h"
#include "tests/common/error_of.h"

namespace fsdp::test_hooks {
namespace {

// Sets an FSDP_TEST_* variable for one scope.
struct Env {
  const char* name;
  Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~Env() { unsetenv(name); }
};

TEST(TestHooks, NoVariableNoFault) {
  StepFaults f(0, 0, "node");
  const StepFault s = f.begin_step(1, 0, 8);
  EXPECT_EQ(s.grad_scale, 1.0f);
  EXPECT_EQ(s.local_loss_scale, 1.0);
  EXPECT_EQ(s.global_loss_scale, 1.0);
}

TEST(TestHooks, TransientFaultHitsOnceOnItsRank) {
  Env e("FSDP_TEST_TRANSIENT_FAULT", "2:20");
  StepFaults other(1, 1, "node"), mine(2, 0, "node");
  EXPECT_EQ(other.begin_step(3, 16, 8).grad_scale, 1.0f);
  EXPECT_EQ(mine.begin_step(2, 8, 8).grad_scale, 1.0f);  // reads 8..15
  const StepFault hit = mine.begin_step(3, 16, 8);       // reads 16..23
  EXPECT_EQ(hit.grad_scale, 10.0f);
  EXPECT_EQ(hit.local_loss_scale, 10.0);
  EXPECT_EQ(hit.global_loss_scale, 1.0);
  EXPECT_EQ(mine.begin_step(3, 16, 8).grad_scale, 1.0f);  // the rerun computes right
}

TEST(TestHooks, GradientOnlyExchangeAndNodeFaults) {
  {
    Env e("FSDP_TEST_TRANSIENT_FAULT", "0:5:grad");
    const StepFault s = StepFaults(0, 0, "n").begin_step(1, 0, 8);
    EXPECT_EQ(s.grad_scale, 1e38f);
    EXPECT_EQ(s.local_loss_scale, 1.0);
  }
  {
    Env e("FSDP_TEST_TRANSIENT_FAULT", "exchange:5");
    const StepFault s = StepFaults(3, 1, "n").begin_step(1, 0, 8);
    EXPECT_EQ(s.grad_scale, 1.0f);
    EXPECT_EQ(s.global_loss_scale, 10.0);
  }
  {
    Env e("FSDP_TEST_TRANSIENT_FAULT", "n2:5");  // the first rank of node n2
    EXPECT_EQ(StepFaults(4, 0, "n2").begin_step(1, 0, 8).grad_scale, 10.0f);
    EXPECT_EQ(StepFaults(5, 1, "n2").begin_step(1, 0, 8).grad_scale, 1.0f);
    EXPECT_EQ(StepFaults(0, 0, "n1").begin_step(1, 0, 8).grad_scale, 1.0f);
  }
}

TEST(TestHooks, SpikeHitsEveryStepThatReadsIt) {
  Env e("FSDP_TEST_SPIKE_POSITION", "12");
  StepFaults f(1, 1, "n");
  EXPECT_EQ(f.begin_step(1, 0, 8).global_loss_scale, 1.0);
  EXPECT_EQ(f.begin_step(2, 8, 8).global_loss_scale, 10.0);
  EXPECT_EQ(f.begin_step(2, 8, 8).global_loss_scale, 10.0);  // a rerun reads it again
}

TEST(TestHooks, MalformedValuesAreRefused) {
  Env e("FSDP_TEST_TRANSIENT_FAULT", "7");
  EXPECT_NE(testing::error_of([] { StepFaults(0, 0, "n"); }).find("WHO:POSITION"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { parse_stall("x:init"); }).find("FSDP_TEST_STALL"),
            std::string::npos);
  EXPECT_EQ(parse_stall("3:7").step, 7);
  EXPECT_TRUE(parse_stall("1:init").at_init);
}

}  // namespace
}  // namespace fsdp::test_hooks
