// --time-budget: a run that ends within a wall-clock budget, as a leaderboard
// of "the lowest validation loss in 1.5 H100-hours" asks.
//
// The step count shapes the learning-rate schedule, so the run cannot simply
// stop when time runs out: its decay must end at its last step. The first
// steps of the warmup do not depend on the count (lr_at's warmup is the same
// for every count), so the run times them, then fixes the count that fits
// what is left of the budget. From then on it is a run of that many steps,
// bitwise equal to one given --steps N. Every checkpoint holds the count and
// the time used, so a resumed run ends where the first would have. wsd's
// stable phase does not depend on the count either, so a wsd run fixes it
// once more late in that phase, from many more steps (budget_replan_step).
//
// A GPU runs its first second or so of work at its boost clock, until the
// power limit pulls the clock down: steps timed then are faster than the
// run's. So a budgeted run repeats the discarded warm-up pass until the
// device has worked for budget_settle_seconds before it times a step.
//
// What the plan counts, all measured in this run: set-up from the Trainer's
// start, the warm-up passes, the timed steps, and one validation (timed before
// the first step) for each that --eval-every asks for plus the final one. It
// keeps kBudgetReserve of the budget free for noise in the step time and for
// checkpoint saves, which it does not time. The budget ends with the final
// validation; the final samples and the final save come after it. Under
// --seq-warmup-steps or --batch-warmup-steps the warm-up's steps are cheaper
// than the rest: the plan counts each at a full step's time less what the
// warm-up measured its context or its fewer micro-batches to save
// (BudgetInputs::step_saving_s), and the steps it times are counted as full
// ones.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "src/policy/lr_schedule.h"

namespace fsdp {

// The share of the budget the plan leaves free.
inline constexpr double kBudgetReserve = 0.01;
// How long a budgeted run's warm-up passes last at least, so that the timed
// steps run at the clock the device keeps. On an H200 at gpt-350m (8 x 1024,
// 37 ms steps) the SM clock held 1980 MHz for about a second, then the
// 700 W power limit held it at 1700-1800 MHz: steps 2-10 took 37.3 ms,
// steps 20-300 38.2 ms, with the weights changing or frozen alike, and a
// 60 s budget planned from steps 2-10 ended 0.7 s late
// (bench/results/h200_2026-11-26b). Short budgets give it at most 5%.
inline double budget_settle_seconds(double budget_s) {
  return std::min(2.0, 0.05 * budget_s);
}

// At most this many warmup steps are timed before the count is fixed.
inline constexpr int kMaxBudgetProbeSteps = 10;

// The steps timed before the count is fixed: the first of the warmup, whose
// learning rate is the same whatever the count (at least one warmup step is
// required with a budget).
inline int budget_probe_steps(const LrSchedule& s) {
  return std::max(1, std::min(kMaxBudgetProbeSteps, s.warmup_steps));
}

// The count a budgeted run starts with: the one its checkpoint fixed
// (`saved`), or --steps where it ends the run within the timed steps (nothing
// is left to plan), else 0: fixed after the timed steps.
inline int64_t budget_steps_at_start(int64_t saved, int max_steps, const LrSchedule& s) {
  if (saved > 0) return saved;
  return max_steps > 0 && max_steps <= budget_probe_steps(s) ? max_steps : 0;
}

// wsd holds the peak rate until its decay, whatever the count, so a wsd run
// fixes its count once more late in the stable phase (at kBudgetReplanAt of
// it), from the mean of every step it has timed by then: the first steps
// cannot tell the clock a GPU keeps for an hour (on an H200 steps 2-10 ran
// 1.6% faster than steps 500-1100 even after the warm-up's 2 s;
// bench/results/h200_2026-11-26b). The new count keeps the steps taken in
// the stable phase (the decay starts after them), and may not move the
// point of this second plan past the step it is made at, so a resumed run
// plans again exactly where the first did, and no run plans a third time.
inline constexpr double kBudgetReplanAt = 0.9;

// The first step of wsd's decay in a run of `total` steps (lr_schedule.h).
inline int64_t wsd_decay_start(int64_t total, const LrSchedule& s) {
  const int64_t decay =
      std::max<int64_t>(1, std::llround(double(s.decay_fraction) * double(total)));
  return std::max<int64_t>(s.warmup_steps, total - decay);
}

// After how many steps a run of `total` plans again (0: never: not wsd, or
// a stable phase too short to reach past the first plan's timed steps).
int64_t budget_replan_step(int64_t total, const LrSchedule& s);

// The counts the second plan may choose after `done` steps: at least the
// fewest whose decay starts at or after `done`, at most the most whose
// second plan comes at or before `done`.
struct ReplanRange {
  int64_t least = 0, most = 0;
};
ReplanRange budget_replan_range(int64_t done, const LrSchedule& s);

struct BudgetInputs {
  double budget_s = 0;     // the whole budget
  double used_s = 0;       // spent so far: set-up, warm-up, the steps and validations done
  int64_t steps_done = 0;  // steps already taken
  double step_s = 0;       // one training step, measured
  double eval_s = 0;       // one validation, measured (0: the run validates nothing)
  int eval_every = 0;      // --eval-every (0: the final validation only)
  int64_t max_steps = 0;   // --steps, a cap (0: none)
  // By step, the seconds step s takes less than step_s, which is a step at
  // --seq-len's context of --grad-accum micro-batches (--seq-warmup-steps,
  // --batch-warmup-steps: src/policy/seq_warmup.h, batch_warmup.h); none past
  // the end.
  std::vector<double> step_saving_s = {};
};

struct BudgetPlan {
  int64_t steps = 0;    // the run's step count
  double end_s = 0;     // when the final validation should end, from the run's start
  bool fits = true;     // false: not even one more step fits; the run takes one and ends late
  bool capped = false;  // --steps stopped it before the budget did
};

// The most steps whose predicted end (training, every validation) stays
// within the budget less its reserve; at least one more than steps_done.
BudgetPlan plan_budget_steps(const BudgetInputs& in);

// One step's time from the timed steps' host times: their mean without the
// first and without the slowest of the rest (where three or more remain).
// A one-off slow step (a buffer allocated at the first update, a page
// fault) would move the plain mean far: on the CPU, tiny's second step
// took 30 ms against 9 ms for the others, and the mean (11.1 ms) ended a
// 20 s budget at 15.6 s. The median drops too much: it leaves out the
// ordinary jitter every later step pays, and ran 0.8 s past 20 s.
double probe_step_seconds(std::vector<double> step_s);

}  // namespace fsdp
