// The run's step count, and the part of a run that --time-budget adds to fix
// it (src/policy/time_budget.h holds the plan's arithmetic): the clock over
// every process of the run, the steps and validations it times, the plan
// after the timed warmup steps, wsd's second plan late in the stable phase,
// and how the final validation's end met the budget. Without a budget the
// count is --steps and the rest does nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "src/options/options.h"
#include "src/policy/time_budget.h"
#include "src/trainer/checkpointing.h"
#include "src/trainer/metrics.h"

namespace fsdp {

class StepBudget {
 public:
  // `world` agrees the plans over every rank; `created` is the run's start,
  // from which its set-up counts against the budget.
  StepBudget(const Options& o, Communicator& world, MetricsLog& metrics, bool lead,
             std::chrono::steady_clock::time_point created);

  // The count and the seconds used of the position the run starts from: a
  // checkpoint's (its count stays, so the schedule goes on unchanged), or a
  // fresh run's (--steps, or 0 until the timed steps fix it).
  void start(const RunPosition& pos, bool eval_only);

  bool active() const { return budget_s() > 0; }
  int steps() const { return steps_; }  // 0 until a budget fixes it
  std::string steps_text() const;       // "?" until then
  // How long the warm-up repeats its pass before the first timed step
  // (budget_settle_seconds): 0 unless a plan is still to be made.
  double settle_seconds() const;
  // Whether a validation is timed before the first step, for the plan.
  bool times_validation_first() const { return active() && steps_ == 0; }

  // --seq-warmup-steps or --batch-warmup-steps under a budget: by step, the
  // seconds a step of the warm-up takes less than a full one (at --seq-len's
  // context, of --grad-accum micro-batches; Trainer's warm-up measures
  // them). The steps timed are counted as full ones (their time plus their
  // saving), and a plan counts each step still to come at its own cost.
  void set_step_savings(std::vector<double> saved_s) { saved_s_ = std::move(saved_s); }
  // Step `step`'s host seconds, every step this process ran (a diverged one
  // included: it took the time all the same); `after_first` is false for the
  // process's first, which builds plans and caches.
  void time_step(int step, double host_s, bool after_first);
  void time_validation(double seconds) { eval_s_ = seconds; }
  // After applied step `done`: until the count is fixed, the step just timed
  // is a plan's, and the plan is made once there are enough of them; then
  // wsd's second plan at its step. Collective when it plans.
  void after_step(int done);
  // At the last step, after its validation: when that ended against the
  // budget, on the slowest rank's clock. Collective; nothing without a budget.
  void report_end();
  // A rollback to `kept` of this process's steps: the steps undone are no
  // longer timed for the plan.
  void forget_steps_after(size_t kept);

  // Seconds the run has used, over every process that ran it.
  double used_s() const;
  // What a save records of it: the count it fixed and the seconds used.
  void record(RunPosition& pos) const;

 private:
  double budget_s() const { return o_.run.time_budget.seconds; }
  // What a plan after `done` steps starts from; every rank fixes the same
  // count, from the slowest rank's times.
  BudgetInputs inputs(int done, double step_s);
  void fix_count(const BudgetInputs& in, int64_t steps, double end_s, int replanned_from);
  void plan(int done);
  void replan(int done);

  const Options& o_;
  Communicator& world_;
  MetricsLog& metrics_;
  bool lead_;
  std::chrono::steady_clock::time_point created_;
  int steps_ = 0;
  double used_before_s_ = 0;  // by the processes before this one
  // The steps timed for the first plan; the last step's host seconds; every
  // step of this process but its first, for wsd's second plan; the last
  // validation's seconds.
  std::vector<double> probe_step_s_;
  double last_step_s_ = 0;
  double run_step_s_ = 0;
  int64_t run_steps_ = 0;
  double eval_s_ = 0;
  std::vector<double> saved_s_;  // set_step_savings
};

}  // namespace fsdp
