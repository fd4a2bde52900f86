#include "src/policy/time_budget.h"

#include <algorithm>

namespace fsdp {

BudgetPlan plan_budget_steps(const BudgetInputs& in) {
  const int64_t done = in.steps_done;
  const double step = std::max(in.step_s, 1e-9);
  const double limit = in.budget_s * (1 - kBudgetReserve);
  // Validations still to come in a run of n steps: each multiple of
  // --eval-every from `done` on (the plan is made before step done's own
  // validation), and the final one where the last step is not one of them.
  auto evals = [&](int64_t n) -> int64_t {
    if (in.eval_s <= 0) return 0;
    const int64_t e = in.eval_every;
    const int64_t periodic = e > 0 ? n / e - std::max<int64_t>(done - 1, 0) / e : 0;
    return periodic + (e == 0 || n % e != 0 ? 1 : 0);
  };
  // saved[i]: what steps done .. done+i-1 take less than full ones.
  std::vector<double> saved{0.0};
  for (int64_t t = done; t < int64_t(in.step_saving_s.size()); ++t)
    saved.push_back(saved.back() + in.step_saving_s[size_t(t)]);
  auto end_of = [&](int64_t n) {
    const double less = saved[size_t(std::min<int64_t>(n - done, int64_t(saved.size()) - 1))];
    return in.used_s + double(n - done) * step - less + double(evals(n)) * in.eval_s;
  };
  // The step count is an int in the schedule; far beyond any real run.
  const int64_t most = in.max_steps > 0 ? in.max_steps : int64_t(1) << 30;
  const double per_step = step + (in.eval_every > 0 ? in.eval_s / in.eval_every : 0);
  const double room = (limit - in.used_s - in.eval_s + saved.back()) / per_step;
  int64_t n = done + 1 + int64_t(std::clamp(room, 0.0, double(most)));
  n = std::clamp(n, done + 1, std::max(most, done + 1));
  // The estimate above spreads the validations evenly; step to the exact count.
  while (n > done + 1 && end_of(n) > limit) --n;
  while (n < most && end_of(n + 1) <= limit) ++n;
  BudgetPlan p;
  p.steps = n;
  p.end_s = end_of(n);
  p.fits = end_of(n) <= limit;
  p.capped = n == most && in.max_steps > 0 && end_of(n + 1) <= limit;
  return p;
}

double probe_step_seconds(std::vector<double> t) {
  if (t.size() > 1) t.erase(t.begin());
  if (t.size() > 2) t.erase(std::max_element(t.begin(), t.end()));
  if (t.empty()) return 0;
  double sum = 0;
  for (double s : t) sum += s;
  return sum / double(t.size());
}

int64_t budget_replan_step(int64_t total, const LrSchedule& s) {
  if (s.shape != LrShape::wsd) return 0;
  const auto at = int64_t(kBudgetReplanAt * double(wsd_decay_start(total, s)));
  return at > budget_probe_steps(s) ? at : 0;
}

ReplanRange budget_replan_range(int64_t done, const LrSchedule& s) {
  // Both functions of the count only grow with it (by 0 or 1 a step).
  ReplanRange r{done + 1, done + 1};
  while (wsd_decay_start(r.least, s) < done) ++r.least;
  r.most = r.least;
  while (budget_replan_step(r.most + 1, s) <= done) ++r.most;
  return r;
}

}  // namespace fsdp
