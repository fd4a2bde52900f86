// StepBudget (src/trainer/step_budget.h) on 1 and 2 ranks: the count is
// --steps without a budget; with one it is fixed after the timed warmup
// steps from the slowest rank's times, steps a rollback undid are not timed,
// a resumed run keeps its checkpoint's count, and a save records both; a
// sequence warm-up's steps count at their cost.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "comm/process_groups.h"
#include "src/trainer/step_budget.h"

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

struct Fixture {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  int rank = g.world->rank();
  bool lead = rank == 0;
  std::string path;
  MetricsLog metrics;
  Options o;
  Fixture() {
    if (lead) {
      char name[] = "/tmp/fsdp_step_budget_XXXXXX";
      const int fd = mkstemp(name);
      EXPECT_GE(fd, 0);
      close(fd);
      path = name;
      metrics.open(path);
      metrics.begin(false);
    }
    o.run.steps = 0;
    o.schedule.warmup_steps = 10;
  }
  ~Fixture() {
    if (!path.empty()) std::remove(path.c_str());
  }
  std::string metrics_text() const {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  // A budget made as if the run had started `ago` seconds before.
  StepBudget budget(double ago) {
    const auto created = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(ago));
    return StepBudget(o, *g.world, metrics, lead, created);
  }
  // Rank r's steps take 0.7 + 0.2 r seconds: the plan takes the slowest.
  double step_s() const { return 0.7 + 0.2 * rank; }
  double slowest_step_s() const { return 0.7 + 0.2 * (g.world->size() - 1); }
};

TEST(StepBudget, WithoutABudgetTheCountIsSteps) {
  Fixture f;
  f.o.run.steps = 50;
  StepBudget b = f.budget(0);
  RunPosition pos;
  pos.budget_steps = 7;  // a budgeted checkpoint resumed without --time-budget
  b.start(pos, false);
  EXPECT_FALSE(b.active());
  EXPECT_EQ(b.steps(), 50);
  EXPECT_EQ(b.steps_text(), "50");
  EXPECT_EQ(b.settle_seconds(), 0);
  EXPECT_FALSE(b.times_validation_first());
  b.time_step(9, 1.0, true);
  b.after_step(10);
  b.report_end();
  EXPECT_EQ(b.steps(), 50);
  b.record(pos);
  EXPECT_EQ(pos.budget_steps, 7);  // kept as the checkpoint had it
  if (f.lead) {
    EXPECT_EQ(f.metrics_text(), "");
  }
}

TEST(StepBudget, FixesTheCountAfterTheTimedStepsFromTheSlowestRank) {
  Fixture f;
  f.o.run.time_budget.seconds = 100;
  StepBudget b = f.budget(10);
  b.start(RunPosition{}, false);
  EXPECT_EQ(b.steps(), 0);
  EXPECT_EQ(b.steps_text(), "?");
  EXPECT_TRUE(b.times_validation_first());
  EXPECT_EQ(b.settle_seconds(), budget_settle_seconds(100));
  for (int done = 1; done <= 10; ++done) {
    EXPECT_EQ(b.steps(), 0) << "fixed before the 10 timed steps ended, at " << done;
    b.time_step(done - 1, f.step_s(), done > 1);
    b.after_step(done);
  }
  // About 10 s used; 99 s (1% kept) leave room for 89 s of steps.
  const BudgetPlan want = plan_budget_steps(
      {.budget_s = 100, .used_s = 10, .steps_done = 10, .step_s = f.slowest_step_s()});
  EXPECT_EQ(b.steps(), want.steps);
  EXPECT_EQ(b.steps(), 10 + int(89 / f.slowest_step_s()));
  EXPECT_FALSE(b.times_validation_first());
  EXPECT_EQ(b.settle_seconds(), 0);
  RunPosition pos;
  b.record(pos);
  EXPECT_EQ(pos.budget_steps, b.steps());
  EXPECT_GE(pos.budget_used_s, 10);
  EXPECT_LT(pos.budget_used_s, 20);
  if (f.lead) {
    EXPECT_NE(f.metrics_text().find("\"time_budget_steps\": " + std::to_string(b.steps())),
              std::string::npos)
        << f.metrics_text();
  }
}

TEST(StepBudget, StepsUndoneByARollbackAreNotTimed) {
  Fixture f;
  f.o.run.time_budget.seconds = 100;
  StepBudget b = f.budget(10);
  b.start(RunPosition{}, false);
  for (int done = 1; done <= 5; ++done) {
    b.time_step(done - 1, done <= 2 ? f.step_s() : 5.0, done > 1);  // steps 3-5 slow, then undone
    b.after_step(done);
  }
  b.forget_steps_after(2);
  for (int done = 3; done <= 10; ++done) {
    b.time_step(done - 1, f.step_s(), true);
    b.after_step(done);
  }
  EXPECT_EQ(b.steps(), 10 + int(89 / f.slowest_step_s()));
}

// --seq-warmup-steps: the timed steps, cheaper in the warm-up, count as full
// ones, and the plan counts the warm-up's later steps at their cost.
TEST(StepBudget, ASequenceWarmupsStepsCountAtTheirCost) {
  Fixture f;
  f.o.run.time_budget.seconds = 100;
  StepBudget b = f.budget(10);
  b.start(RunPosition{}, false);
  const std::vector<double> saved(30, 0.3);  // steps 0-29 take 0.3 s less
  b.set_step_savings(saved);
  for (int done = 1; done <= 10; ++done) {
    b.time_step(done - 1, f.step_s() - 0.3, done > 1);
    b.after_step(done);
  }
  BudgetInputs in{.budget_s = 100, .used_s = 10, .steps_done = 10, .step_s = f.slowest_step_s()};
  in.step_saving_s = saved;
  EXPECT_EQ(b.steps(), plan_budget_steps(in).steps);
  // 89 s of full steps and the 20 x 0.3 s steps 10-29 save.
  EXPECT_EQ(b.steps(), 10 + int((89 + 20 * 0.3) / f.slowest_step_s()));
}

TEST(StepBudget, AResumedRunKeepsItsCheckpointsCountAndClock) {
  Fixture f;
  f.o.run.time_budget.seconds = 100;
  StepBudget b = f.budget(0);
  RunPosition pos;
  pos.budget_steps = 300;
  pos.budget_used_s = 40;
  b.start(pos, false);
  EXPECT_EQ(b.steps(), 300);
  EXPECT_EQ(b.settle_seconds(), 0);
  EXPECT_FALSE(b.times_validation_first());
  EXPECT_GE(b.used_s(), 40);
  EXPECT_LT(b.used_s(), 50);
  b.report_end();
  if (f.lead) {
    const std::string m = f.metrics_text();
    EXPECT_NE(m.find("\"time_budget_s\": 100"), std::string::npos) << m;
    EXPECT_NE(m.find("\"time_used_s\": "), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fsdp
