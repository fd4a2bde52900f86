// --time-budget's plan: the most steps whose run, walked step by step, ends
// within the budget; only warmup steps whose rate ignores the count are timed.
// (Its option values and rules are tested in test_options.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "src/policy/time_budget.h"

namespace fsdp {
namespace {

// The plan's rule, by walking a run step by step: the most steps after
// `done` whose steps and validations (every --eval-every, and the final one)
// end within the budget less its reserve. The plan is made after step done
// and before its validation, when done is a multiple of --eval-every.
int64_t simulated_steps(const BudgetInputs& in) {
  const double limit = in.budget_s * (1 - kBudgetReserve);
  const int64_t cap = in.max_steps > 0 ? in.max_steps : int64_t(1) << 30;
  const int64_t e = in.eval_every;
  double t = in.used_s + (e > 0 && in.steps_done > 0 && in.steps_done % e == 0 ? in.eval_s : 0);
  int64_t best = in.steps_done + 1;  // one step is always taken
  for (int64_t n = in.steps_done + 1; n <= cap; ++n) {
    // step n-1 (from 0), less what a sequence warm-up saves in it
    const size_t at = size_t(n - 1);
    t += in.step_s - (at < in.step_saving_s.size() ? in.step_saving_s[at] : 0);
    const bool periodic = in.eval_every > 0 && n % in.eval_every == 0;
    if (periodic) t += in.eval_s;
    const double end = t + (periodic ? 0 : in.eval_s);  // the final validation
    if (end > limit) break;
    best = n;
  }
  return best;
}

TEST(TimeBudgetPlan, TakesTheMostStepsThatEndWithinTheBudget) {
  // 99 s usable; 9 used; one final validation of 2 s; steps of 1 s.
  BudgetPlan p =
      plan_budget_steps({.budget_s = 100, .used_s = 9, .steps_done = 10, .step_s = 1, .eval_s = 2});
  EXPECT_EQ(p.steps, 98);
  EXPECT_DOUBLE_EQ(p.end_s, 99);
  EXPECT_TRUE(p.fits);
  EXPECT_FALSE(p.capped);
  // --steps caps it, and says so only when the budget had room for more.
  p = plan_budget_steps(
      {.budget_s = 100, .used_s = 9, .steps_done = 10, .step_s = 1, .eval_s = 2, .max_steps = 50});
  EXPECT_EQ(p.steps, 50);
  EXPECT_TRUE(p.capped);
  p = plan_budget_steps(
      {.budget_s = 100, .used_s = 9, .steps_done = 10, .step_s = 1, .eval_s = 2, .max_steps = 98});
  EXPECT_EQ(p.steps, 98);
  EXPECT_FALSE(p.capped);
  // Spent already: one more step, flagged.
  p = plan_budget_steps({.budget_s = 100, .used_s = 120, .steps_done = 10, .step_s = 1});
  EXPECT_EQ(p.steps, 11);
  EXPECT_FALSE(p.fits);
}

// The plan is made after the timed steps and before their last step's own
// validation: with --eval-every 10 and 10 timed steps, that validation is
// still to come (a CPU run of 2026-11-26 planned 30 steps for 100 s and ended
// at 114 s: one 26 s validation too few).
TEST(TimeBudgetPlan, CountsTheValidationThatFollowsThePlan) {
  const BudgetPlan p = plan_budget_steps({.budget_s = 100,
                                          .used_s = 26.6,
                                          .steps_done = 10,
                                          .step_s = 0.032,
                                          .eval_s = 26.22,
                                          .eval_every = 10});
  EXPECT_EQ(p.steps, 20);  // validations at 10 and 20; a 21st step adds a third
  EXPECT_NEAR(p.end_s, 26.6 + 10 * 0.032 + 2 * 26.22, 1e-9);
  EXPECT_TRUE(p.fits);
}

// The step time the plan uses: the timed steps' mean without the first and
// the slowest, so one slow step among them (CPU tiny's second, 30 ms
// against 9) does not shorten the run, while ordinary jitter still counts.
TEST(TimeBudgetPlan, StepTimeLeavesOutTheFirstAndTheSlowest) {
  EXPECT_DOUBLE_EQ(probe_step_seconds({0.5, 0.030, 0.009, 0.009, 0.012, 0.009}), 0.00975);
  EXPECT_DOUBLE_EQ(probe_step_seconds({0.5, 0.010, 0.020}), 0.015);  // two left: both kept
  EXPECT_DOUBLE_EQ(probe_step_seconds({0.25}), 0.25);  // a single step is all there is
  EXPECT_DOUBLE_EQ(probe_step_seconds({}), 0.0);
}

TEST(TimeBudgetPlan, EqualsARunWalkedStepByStep) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 2000; ++i) {
    BudgetInputs in;
    in.budget_s = 10 + 1000 * u(rng);
    in.used_s = in.budget_s * 0.3 * u(rng);
    in.steps_done = int64_t(20 * u(rng));
    in.step_s = 0.01 + 2 * u(rng);
    in.eval_s = i % 4 == 0 ? 0 : 5 * u(rng);
    in.eval_every = i % 3 == 0 ? 0 : 1 + int(40 * u(rng));
    in.max_steps = i % 5 == 0 ? in.steps_done + 1 + int64_t(300 * u(rng)) : 0;
    // --seq-warmup-steps: the first steps cheaper, by up to 90% of a step
    if (i % 2 == 0)
      for (int64_t k = int64_t(400 * u(rng)); k > 0; --k)
        in.step_saving_s.push_back(0.9 * in.step_s * u(rng));
    const BudgetPlan p = plan_budget_steps(in);
    ASSERT_EQ(p.steps, simulated_steps(in))
        << "budget " << in.budget_s << " used " << in.used_s << " done " << in.steps_done
        << " step " << in.step_s << " eval " << in.eval_s << " every " << in.eval_every << " cap "
        << in.max_steps << " warm-up steps " << in.step_saving_s.size();
  }
}

// --seq-warmup-steps: the steps still to come count at their own cost; the
// ones already taken save nothing more.
TEST(TimeBudgetPlan, CountsASequenceWarmupsStepsAtTheirCost) {
  // 99 s usable, 9 used, steps of 1 s; steps 0-29 take 0.5 s less.
  BudgetInputs in{.budget_s = 100, .used_s = 9, .steps_done = 10, .step_s = 1};
  in.step_saving_s.assign(30, 0.5);
  BudgetPlan p = plan_budget_steps(in);
  EXPECT_EQ(p.steps, 110);  // 90 s: 90 full steps, and 10 more in the 20 x 0.5 s saved
  EXPECT_DOUBLE_EQ(p.end_s, 9 + 100 - 10);
  in.steps_done = 30;  // the warm-up is over: every step left is a full one
  in.used_s = 29;
  EXPECT_EQ(plan_budget_steps(in).steps, 30 + 70);
}

TEST(TimeBudgetPlan, StartsFromTheSavedCountOrACapWithinTheTimedSteps) {
  const LrSchedule s{.warmup_steps = 20};             // 10 timed steps
  EXPECT_EQ(budget_steps_at_start(700, 0, s), 700);   // a checkpoint's count stays
  EXPECT_EQ(budget_steps_at_start(700, 50, s), 700);  // even under another cap
  EXPECT_EQ(budget_steps_at_start(0, 0, s), 0);       // planned after the timed steps
  EXPECT_EQ(budget_steps_at_start(0, 50, s), 0);      // a cap beyond them: planned too
  EXPECT_EQ(budget_steps_at_start(0, 10, s), 10);     // a cap within them: nothing to plan
  EXPECT_EQ(budget_steps_at_start(0, 4, s), 4);
}

TEST(TimeBudgetPlan, SettlesTheDeviceTwoSecondsOrAtMostFivePercent) {
  EXPECT_DOUBLE_EQ(budget_settle_seconds(5400), 2.0);  // 1.5 h
  EXPECT_DOUBLE_EQ(budget_settle_seconds(40), 2.0);
  EXPECT_DOUBLE_EQ(budget_settle_seconds(20), 1.0);
  EXPECT_DOUBLE_EQ(budget_settle_seconds(4), 0.2);
}

TEST(TimeBudgetReplan, DecayStartIsTheFirstStepBelowThePeak) {
  for (int warmup : {1, 12, 100})
    for (float f : {0.1f, 0.2f, 0.5f})
      for (int total = warmup + 2; total < 3000; total += 7) {
        const LrSchedule s{.lr = 1,
                           .min_lr = 0.1f,
                           .warmup_steps = warmup,
                           .shape = LrShape::wsd,
                           .decay_fraction = f};
        const int64_t start = wsd_decay_start(total, s);
        if (start > warmup) {
          EXPECT_EQ(lr_at(int(start) - 1, total, s), 1.0f) << total;
        }
        EXPECT_LT(lr_at(int(start), total, s), 1.0f) << total;
      }
}

TEST(TimeBudgetReplan, OnlyWsdPlansAgainAtNinetyPercentOfItsStablePhase) {
  const LrSchedule wsd{.warmup_steps = 12, .shape = LrShape::wsd, .decay_fraction = 0.2f};
  EXPECT_EQ(budget_replan_step(1000, wsd), 720);  // decay from 800
  EXPECT_EQ(budget_replan_step(14, wsd), 0);      // 90% of 12 is within the 10 timed steps
  for (LrShape shape : {LrShape::cosine, LrShape::linear}) {
    LrSchedule other = wsd;
    other.shape = shape;
    EXPECT_EQ(budget_replan_step(1000, other), 0);
  }
}

TEST(TimeBudgetReplan, KeepsTheStepsTakenAndPlansNoThirdTime) {
  for (float f : {0.1f, 0.2f, 0.5f}) {
    const LrSchedule s{
        .lr = 1, .min_lr = 0.1f, .warmup_steps = 12, .shape = LrShape::wsd, .decay_fraction = f};
    for (int64_t total = 40; total < 5000; total += 13) {
      const int64_t done = budget_replan_step(total, s);
      if (done == 0) continue;
      const ReplanRange r = budget_replan_range(done, s);
      // The first plan's count is always allowed; the range is as wide as allowed.
      EXPECT_LE(r.least, total);
      EXPECT_GE(r.most, total);
      EXPECT_GE(wsd_decay_start(r.least, s), done);
      EXPECT_LT(wsd_decay_start(r.least - 1, s), done);
      EXPECT_LE(budget_replan_step(r.most, s), done);
      EXPECT_GT(budget_replan_step(r.most + 1, s), done);
      // Any count in it: the steps taken ran at the peak in it too (a --steps
      // N run), and its own second plan is not still ahead.
      for (int64_t n : {r.least, (r.least + r.most) / 2, r.most}) {
        for (int64_t step = s.warmup_steps; step < done; step += 17)
          EXPECT_EQ(lr_at(int(step), int(n), s), lr_at(int(step), int(total), s));
        EXPECT_LE(budget_replan_step(n, s), done);
      }
    }
  }
  // At 20% decay the second plan can take the count down to about 90%.
  const LrSchedule s{.warmup_steps = 12, .shape = LrShape::wsd, .decay_fraction = 0.2f};
  const ReplanRange r = budget_replan_range(budget_replan_step(10000, s), s);
  EXPECT_EQ(r.least, 9000);
  EXPECT_EQ(r.most, 10001);
}

TEST(TimeBudgetPlan, TimesOnlyWarmupStepsWhoseRateIgnoresTheCount) {
  for (int warmup : {1, 3, 10, 50}) {
    const LrSchedule s{.lr = 1, .min_lr = 0.1f, .warmup_steps = warmup, .shape = LrShape::wsd};
    const int probe = budget_probe_steps(s);
    EXPECT_EQ(probe, std::min(warmup, kMaxBudgetProbeSteps));
    for (LrShape shape : {LrShape::cosine, LrShape::wsd, LrShape::linear}) {
      LrSchedule t = s;
      t.shape = shape;
      for (int step = 0; step < probe; ++step)
        for (int total : {probe + 1, probe + 7, 1000})
          EXPECT_EQ(lr_at(step, total, t), lr_at(step, 1 << 20, t));
    }
  }
}

}  // namespace
}  // namespace fsdp
