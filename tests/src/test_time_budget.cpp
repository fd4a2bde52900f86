// --time-budget: durations read and print as a user writes them, the plan
// takes the most steps whose simulated run ends within the budget, and the
// options around it (--steps as a cap, the warmup it needs) are checked.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "src/options.h"
#include "src/time_budget.h"

namespace fsdp {
namespace {

double seconds_of(const std::string& text) {
  Duration d{-1};
  const std::string rule = parse_value(text, d);
  EXPECT_EQ(rule, "") << text;
  return d.seconds;
}

std::string rule_of(const std::string& text) {
  Duration d;
  return parse_value(text, d);
}

TEST(Duration, ReadsUnitsAndClockTimes) {
  EXPECT_EQ(seconds_of("90m"), 5400);
  EXPECT_EQ(seconds_of("1.5h"), 5400);
  EXPECT_EQ(seconds_of("5400s"), 5400);
  EXPECT_EQ(seconds_of("1:30:00"), 5400);
  EXPECT_EQ(seconds_of("2:05"), 125);
  EXPECT_EQ(seconds_of("0.25s"), 0.25);
  EXPECT_EQ(seconds_of(""), 0);  // off
  EXPECT_EQ(seconds_of("0"), 0);
}

TEST(Duration, RefusesWhatIsNotATime) {
  // A bare number is refused: Slurm reads 90 as minutes.
  for (const char* bad : {"90", "m", "90x", "-5m", "5 m", "1:60:00", "1:5:00", "1:2:3:4", ":30",
                          "infh", "nanm", "0m", "1e30h"})
    EXPECT_NE(rule_of(bad), "") << bad;
  EXPECT_NE(rule_of("90").find("needs its unit"), std::string::npos);
  EXPECT_NE(rule_of("400d").find("duration"), std::string::npos);
  EXPECT_NE(rule_of("9000h").find("at most a year"), std::string::npos);
}

TEST(Duration, PrintsTheShortestExactFormAndReadsItBack) {
  EXPECT_EQ(format_value(Duration{5400}), "90m");
  EXPECT_EQ(format_value(Duration{7200}), "2h");
  EXPECT_EQ(format_value(Duration{125}), "125s");
  EXPECT_EQ(format_value(Duration{0}), "");
  for (double s : {0.1, 1.0 / 3, 59.5, 61.0, 3599.0, 3600.0, 86400.0 * 365}) {
    Duration back;
    ASSERT_EQ(parse_value(format_value(Duration{s}), back), "") << s;
    EXPECT_EQ(back.seconds, s) << format_value(Duration{s});
  }
}

// The plan's rule, by walking a run step by step: the most steps after
// `done` whose steps and validations (every --eval-every, and the final one)
// end within the budget less its reserve.
int64_t simulated_steps(const BudgetInputs& in) {
  const double limit = in.budget_s * (1 - kBudgetReserve);
  const int64_t cap = in.max_steps > 0 ? in.max_steps : int64_t(1) << 30;
  double t = in.used_s;
  int64_t best = in.steps_done + 1;  // one step is always taken
  for (int64_t n = in.steps_done + 1; n <= cap; ++n) {
    t += in.step_s;
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
    const BudgetPlan p = plan_budget_steps(in);
    ASSERT_EQ(p.steps, simulated_steps(in))
        << "budget " << in.budget_s << " used " << in.used_s << " done " << in.steps_done
        << " step " << in.step_s << " eval " << in.eval_s << " every " << in.eval_every << " cap "
        << in.max_steps;
  }
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

Options parsed(std::vector<std::string> args) {
  args.insert(args.begin(), {"fsdptrain", "--train-data", "x.h5"});
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return *parse_options(int(argv.size()), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parsed(std::move(args));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TimeBudgetOptions, StepsBecomeACapThatDefaultsToNone) {
  EXPECT_EQ(parsed({"--time-budget", "90m"}).run.steps, 0);
  EXPECT_EQ(parsed({"--time-budget", "90m"}).run.time_budget.seconds, 5400);
  EXPECT_EQ(parsed({"--time-budget", "90m", "--steps", "4000"}).run.steps, 4000);
  EXPECT_EQ(parsed({}).run.steps, 100);  // no budget: the default count
  // --stop-at-step has no count to stay under without a cap.
  EXPECT_EQ(parsed({"--time-budget", "1h", "--checkpoint-dir", "c", "--stop-at-step", "500"})
                .run.stop_at_step,
            500);
  EXPECT_NE(error_of({"--steps", "0"}).find("--steps: '0' is invalid"), std::string::npos);
}

TEST(TimeBudgetOptions, RefusedWhereItCannotPlan) {
  EXPECT_NE(error_of({"--time-budget", "1h", "--warmup-steps", "0"}).find("--warmup-steps"),
            std::string::npos);
  EXPECT_NE(error_of({"--time-budget", "90"}).find("--time-budget: '90' is invalid"),
            std::string::npos);
}

}  // namespace
}  // namespace fsdp
