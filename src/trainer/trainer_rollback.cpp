// What the run does with a diverged step (src/policy/divergence.h says which steps
// are): refuse it and end, or go back to the newest checkpoint and skip the
// data that led there. Every rank judged the same global loss and norm, so
// every rank takes the same branch and no collective is left waiting.
#include <algorithm>
#include <cstdio>

#include "src/trainer/trainer.h"

namespace fsdp {

std::vector<std::pair<std::string, std::string>> DivergedStep::record() const {
  return {{"step", std::to_string(step + 1)},
          {"loss", json_number(loss)},
          {"grad_norm", json_number(norms.total)},
          {"diverged", "true"},
          {"reason", json_string(why)},
          {"rerun_loss", json_number(rerun_loss)},
          {"rerun_grad_norm", json_number(rerun_norm)}};
}

int64_t Trainer::roll_back_or_stop(const DivergedStep& bad, TrainSummary& summary) {
  const DivergenceOptions& d = o_.divergence;
  if (d.action == OnDivergence::stop || pos_.rollbacks >= d.max_rollbacks)
    refuse_diverged_step(bad);
  const int step = bad.step;
  engine_->discard_gradients();
  // The bad step's batch was read: the data order continues after it.
  const int64_t skip_to = loader_->state().consumed;
  RunPosition back = checkpointer_->roll_back(step, skip_to);
  // The run's count, not the checkpoint's: a rollback before any save since
  // the last one still counts. The budget's count and clock go on too: they
  // are StepBudget's, which the next save records.
  back.rollbacks = pos_.rollbacks + 1;
  back.initialised_from = pos_.initialised_from;
  back.initialised_step = pos_.initialised_step;
  pos_ = back;
  spikes_.restore(pos_.loss_history);
  // The steps undone are no longer this process's (it began at step `first`),
  // nor their times a budget's plan.
  const int64_t first = step - int64_t(summary.train_loss.size());
  const size_t kept = size_t(std::max<int64_t>(0, pos_.step - first));
  summary.train_loss.resize(std::min(summary.train_loss.size(), kept));
  budget_->forget_steps_after(kept);
  const std::vector<int64_t>& skipped = pos_.skipped_sequences;
  const int64_t from = skipped[skipped.size() - 2], to = skipped.back();
  char range[64];
  std::snprintf(range, sizeof range, "[%lld, %lld]", (long long)from, (long long)to);
  auto record = bad.record();
  record.insert(record.end(), {{"rollback_to_step", std::to_string(pos_.step)},
                               {"skipped_sequences", range},
                               {"rollbacks", std::to_string(pos_.rollbacks)}});
  metrics_.write(record);
  if (lead_) {
    std::printf(
        "step %5d/%s | loss %.4f | norm %.3f | diverged: %s (so did its rerun); rolled back to "
        "step %lld ('%s'), skipping sequences [%lld, %lld) (rollback %d of at most %d)\n",
        step + 1, budget_->steps_text().c_str(), bad.loss, bad.norms.total, bad.why.c_str(),
        (long long)pos_.step, pos_.resumed_from.c_str(), (long long)from, (long long)to,
        pos_.rollbacks, d.max_rollbacks);
    std::fflush(stdout);
  }
  return pos_.step;
}

[[noreturn]] void Trainer::refuse_diverged_step(const DivergedStep& bad) {
  const GradientNorms& n = bad.norms;
  metrics_.write(bad.record());
  std::string units;
  for (const std::string& name : n.nonfinite_units(*model_))
    units += (units.empty() ? "" : ", ") + name;
  const DivergenceOptions& d = o_.divergence;
  std::string tried;
  if (d.action == OnDivergence::rollback)
    tried = pos_.rollbacks == 0 ? "; --max-rollbacks 0 allows no rollback"
                                : "; " + std::to_string(pos_.rollbacks) +
                                      " rollback(s) did not help (--max-rollbacks " +
                                      std::to_string(d.max_rollbacks) + ")";
  throw_agreed_error("training diverged at step ", bad.step + 1, ": loss ", bad.loss,
                     ", gradient norm ", n.total, " (", bad.why,
                     units.empty() ? "" : "; non-finite gradients in " + units,
                     "; its rerun from the same state did the same: the data or the numerics, "
                     "not a device fault)",
                     tried,
                     "; the step was not applied and nothing of it was saved. Lower --lr or raise "
                     "--warmup-steps",
                     d.action == OnDivergence::stop
                         ? "; --on-divergence rollback would go back to the newest checkpoint and "
                           "skip the data since"
                         : "",
                     "; --debug stops at the first unit whose output or gradient holds NaN/Inf");
}

}  // namespace fsdp
