// The Trainer's side of --time-budget (src/time_budget.h): the clock over
// every process of a run, the plan after the timed warmup steps, wsd's second
// plan late in the stable phase, and how the final validation's end met the
// budget. Kept apart from trainer.cpp, whose Trainer::after_step calls these.
#include <algorithm>
#include <cstdio>

#include "src/option_values.h"
#include "src/time_budget.h"
#include "src/trainer.h"

namespace fsdp {

std::string Trainer::steps_text() const {
  return steps_ > 0 ? std::to_string(steps_) : "?";
}

double Trainer::budget_used_s() const {
  return used_before_s_ +
         std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count();
}

// What a plan after `done` steps starts from; every rank fixes the same
// count, from the slowest rank's times.
BudgetInputs Trainer::budget_inputs(int done, double step_s) {
  float v[3] = {float(budget_used_s()), float(step_s), float(eval_s_)};
  groups_.world->all_reduce(v, 3, DType::f32, ReduceOp::max)->wait();
  return {.budget_s = o_.run.time_budget.seconds,
          .used_s = v[0],
          .steps_done = done,
          .step_s = v[1],
          .eval_s = val_batches_ ? v[2] : 0,
          .eval_every = o_.eval.every,
          .max_steps = o_.run.steps};
}

// The run's count from now on, saved with the next checkpoint, and its
// metrics record (`replanned_from`: the count wsd's second plan replaced).
void Trainer::fix_budget_count(const BudgetInputs& in, int64_t steps, double end_s,
                               int replanned_from) {
  steps_ = int(steps);
  pos_.budget_steps = steps_;
  std::vector<std::pair<std::string, std::string>> r{{"step", std::to_string(in.steps_done)},
                                                     {"time_budget_steps", std::to_string(steps_)}};
  if (replanned_from > 0) r.emplace_back("replanned_from", std::to_string(replanned_from));
  r.insert(r.end(), {{"step_s", json_number(in.step_s)},
                     {"eval_s", json_number(in.eval_s)},
                     {"used_s", json_number(in.used_s)},
                     {"planned_end_s", json_number(end_s)}});
  metrics_.write(r);
}

// After the timed warmup steps: the count that fits the rest of the budget.
void Trainer::plan_time_budget(int done) {
  // The timed steps' mean without the first and the slowest (src/time_budget.h).
  const std::vector<double>& t = probe_step_s_;
  const size_t skip = t.size() > 1 ? 1 : 0;
  const double step_s = probe_step_seconds(t);
  const BudgetInputs in = budget_inputs(done, step_s);
  const BudgetPlan p = plan_budget_steps(in);
  fix_budget_count(in, p.steps, p.end_s, 0);
  if (!lead_) return;
  const Duration& budget = o_.run.time_budget;
  std::printf(
      "fsdptrain: --time-budget %s: %d steps (a step took %.4f s over steps %d-%d%s, a "
      "validation %.2f s; set-up, warm-up and %d step(s) used %.1f s); the final validation "
      "should end at %.1f s (%s), %.1f%% of the budget%s\n",
      format_value(budget).c_str(), steps_, in.step_s, done - int(t.size() - skip) + 1, done,
      t.size() - skip > 2 ? " less the slowest" : "", in.eval_s, done, in.used_s, p.end_s,
      format_duration(p.end_s).c_str(), 100 * p.end_s / budget.seconds,
      p.capped ? " (--steps caps it)" : "");
  if (!p.fits)
    std::fprintf(stderr,
                 "fsdptrain: warning: --time-budget %s is spent before step %d: the run takes "
                 "one more step and ends late; give more time or a smaller model\n",
                 format_value(budget).c_str(), done + 1);
  std::fflush(stdout);
}

// wsd's second plan (src/time_budget.h): late in the stable phase, from the
// mean of this process's steps, within the counts that keep the steps taken.
void Trainer::replan_time_budget(int done) {
  if (run_steps_ == 0) return;  // resumed just before it: nothing timed (same on every rank)
  const BudgetInputs in = budget_inputs(done, run_step_s_ / double(run_steps_));
  const BudgetPlan want = plan_budget_steps(in);
  const ReplanRange range = budget_replan_range(done, o_.schedule);
  const int64_t cap = o_.run.steps > 0 ? std::min<int64_t>(o_.run.steps, range.most) : range.most;
  const int64_t n = std::clamp(want.steps, range.least, std::max(range.least, cap));
  // Where the count was moved into the range, its own end (the same walk,
  // with no budget to stop it short of n).
  BudgetInputs moved = in;
  moved.budget_s = 1e30;
  moved.max_steps = n;
  const BudgetPlan p = n == want.steps ? want : plan_budget_steps(moved);
  const int before = steps_;
  fix_budget_count(in, n, p.end_s, before);
  if (!lead_) return;
  const Duration& budget = o_.run.time_budget;
  std::printf(
      "fsdptrain: --time-budget %s: planned again before the decay, from steps %lld-%d (a step "
      "took %.4f s): %d steps instead of %d; the final validation should end at %.1f s (%s), "
      "%.1f%% of the budget\n",
      format_value(budget).c_str(), (long long)(done - run_steps_ + 1), done, in.step_s, steps_,
      before, p.end_s, format_duration(p.end_s).c_str(), 100 * p.end_s / budget.seconds);
  std::fflush(stdout);
  if (want.steps < range.least)
    std::fprintf(stderr,
                 "fsdptrain: warning: --time-budget %s: the steps ran so much slower than the "
                 "first plan's that %lld would be the count; the decay cannot start before the "
                 "%d steps taken, so the run takes %d and ends late\n",
                 format_value(budget).c_str(), (long long)want.steps, done, steps_);
}

// After applied step `done` (host_s its seconds): until a budget fixes the
// count, the timed steps, and the plan once there are enough of them; then
// wsd's second plan at its step.
void Trainer::budget_after_step(int done, double host_s) {
  if (steps_ == 0) {
    probe_step_s_.push_back(host_s);
    if (done == budget_probe_steps(o_.schedule)) plan_time_budget(done);
  } else if (o_.run.time_budget.seconds > 0 && done == budget_replan_step(steps_, o_.schedule)) {
    replan_time_budget(done);
  }
}

// When the final validation ended against the budget, slowest rank's clock.
void Trainer::report_time_budget(double used_s) {
  float used = float(used_s);
  groups_.world->all_reduce(&used, 1, DType::f32, ReduceOp::max)->wait();
  const double budget = o_.run.time_budget.seconds;
  metrics_.write({{"step", std::to_string(steps_)},
                  {"time_budget_s", json_number(budget)},
                  {"time_used_s", json_number(used)}});
  if (!lead_) return;
  const std::string name = format_value(o_.run.time_budget);
  if (used <= budget)
    std::printf(
        "fsdptrain: --time-budget %s: the final validation ended at %.1f s (%s), %.1f%% of "
        "it\n",
        name.c_str(), double(used), format_duration(used).c_str(), 100 * used / budget);
  else
    std::fprintf(
        stderr,
        "fsdptrain: warning: --time-budget %s: the final validation ended at %.1f s (%s), %.1f s "
        "past it (steps or validations ran slower than timed, or checkpoint saves took "
        "more than the 1%% kept spare)\n",
        name.c_str(), double(used), format_duration(used).c_str(), used - budget);
}

}  // namespace fsdp
