// StepBudget (step_budget.h): the count a budget fixes from the timed steps,
// and what it says about the plan, a second plan and the end.
#include "src/trainer/step_budget.h"

#include <algorithm>
#include <cstdio>

#include "src/options/option_values.h"

namespace fsdp {

StepBudget::StepBudget(const Options& o, Communicator& world, MetricsLog& metrics, bool lead,
                       std::chrono::steady_clock::time_point created)
    : o_(o),
      world_(world),
      metrics_(metrics),
      lead_(lead),
      created_(created),
      steps_(o.run.steps) {}

void StepBudget::start(const RunPosition& pos, bool eval_only) {
  steps_ = o_.run.steps;
  if (!active()) return;
  used_before_s_ = pos.budget_used_s;
  if (pos.budget_steps > 0 && lead_ && !eval_only)
    std::printf(
        "fsdptrain: --time-budget: the step count %lld was fixed by the checkpoint's run "
        "(%.1f s used then); it stays, so the schedule goes on unchanged\n",
        (long long)pos.budget_steps, used_before_s_);
  steps_ = int(budget_steps_at_start(pos.budget_steps, o_.run.steps, o_.schedule));
}

std::string StepBudget::steps_text() const {
  return steps_ > 0 ? std::to_string(steps_) : "?";
}

double StepBudget::settle_seconds() const {
  return active() && steps_ == 0 ? budget_settle_seconds(budget_s()) : 0;
}

double StepBudget::used_s() const {
  return used_before_s_ +
         std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count();
}

void StepBudget::record(RunPosition& pos) const {
  pos.budget_used_s = used_s();
  if (active()) pos.budget_steps = steps_;
}

void StepBudget::time_step(int step, double host_s, bool after_first) {
  const double full_s = host_s + (size_t(step) < saved_s_.size() ? saved_s_[size_t(step)] : 0.0);
  last_step_s_ = full_s;
  if (after_first) run_step_s_ += full_s, ++run_steps_;
}

void StepBudget::forget_steps_after(size_t kept) {
  probe_step_s_.resize(std::min(probe_step_s_.size(), kept));
}

BudgetInputs StepBudget::inputs(int done, double step_s) {
  float v[3] = {float(used_s()), float(step_s), float(eval_s_)};
  world_.all_reduce(v, 3, DType::f32, ReduceOp::max)->wait();
  return {.budget_s = budget_s(),
          .used_s = v[0],
          .steps_done = done,
          .step_s = v[1],
          .eval_s = v[2],  // 0 where the run validates nothing
          .eval_every = o_.eval.every,
          .max_steps = o_.run.steps,
          .step_saving_s = saved_s_};
}

// The run's count from now on, saved with the next checkpoint, and its
// metrics record (`replanned_from`: the count wsd's second plan replaced).
void StepBudget::fix_count(const BudgetInputs& in, int64_t steps, double end_s,
                           int replanned_from) {
  steps_ = int(steps);
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
void StepBudget::plan(int done) {
  // The timed steps' mean without the first and the slowest (src/policy/time_budget.h).
  const std::vector<double>& t = probe_step_s_;
  const size_t skip = t.size() > 1 ? 1 : 0;
  const double step_s = probe_step_seconds(t);
  const BudgetInputs in = inputs(done, step_s);
  const BudgetPlan p = plan_budget_steps(in);
  fix_count(in, p.steps, p.end_s, 0);
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

// wsd's second plan (src/policy/time_budget.h): late in the stable phase, from the
// mean of this process's steps, within the counts that keep the steps taken.
void StepBudget::replan(int done) {
  if (run_steps_ == 0) return;  // resumed just before it: nothing timed (same on every rank)
  const BudgetInputs in = inputs(done, run_step_s_ / double(run_steps_));
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
  fix_count(in, n, p.end_s, before);
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

void StepBudget::after_step(int done) {
  if (steps_ == 0) {
    probe_step_s_.push_back(last_step_s_);
    if (done == budget_probe_steps(o_.schedule)) plan(done);
  } else if (active() && done == budget_replan_step(steps_, o_.schedule)) {
    replan(done);
  }
}

void StepBudget::report_end() {
  if (!active()) return;
  float used = float(used_s());
  world_.all_reduce(&used, 1, DType::f32, ReduceOp::max)->wait();
  const double budget = budget_s();
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
