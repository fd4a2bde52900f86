// What a diverged step is, and what the run does about one (--on-divergence).
//
// A step diverged when its loss or gradient norm is not finite, or when its
// loss is more than --spike-factor times the median loss of the last
// --spike-window applied steps. The median, not the mean, so that one odd
// batch among them moves the bar little; and only once the window is full,
// so the fast fall of the first steps (each loss below the median of the
// ones before) is never judged against too few.
//
// Defaults, from measured runs (bench/results/spike_factor_cpu_2026-11-26.txt,
// bench/divergence/spike_ratio.py): in the H100 and H200 time-to-loss runs
// (gpt-350m, 16K tokens a step, AdamW and Muon) no step's loss came above
// 1.27 times the median of the 16 to 64 before it, nor above 1.16 in the CPU
// demo (512 tokens a step), while a run that blows up climbs toward
// ln(vocab) and past it: 2 is far from both. Lower it (1.5) to catch smaller
// spikes, at the risk of acting on a hard batch. A window of 64 follows the
// loss as it falls and lets a few odd steps in it move the median little.
//
// stop refuses the step and ends the run (the weights never see it);
// rollback goes back to the newest checkpoint and skips the data from there
// up to and including the bad step (src/trainer/trainer_rollback.cpp), at most
// --max-rollbacks times in a run.
#pragma once

#include <string>
#include <vector>

namespace fsdp {

enum class OnDivergence { stop, rollback };

struct DivergenceOptions {
  OnDivergence action = OnDivergence::stop;
  float spike_factor = 2.0f;  // 0: no spike test, only non-finite values
  int spike_window = 64;      // applied steps the median is taken over
  int max_rollbacks = 3;      // in the whole run, over resumes

  bool operator==(const DivergenceOptions&) const = default;
};

// The losses of the last applied steps, and the judgement of a new one.
// Its history goes into checkpoints, so a resumed run judges its next steps
// exactly as the run it continues would have.
class SpikeDetector {
 public:
  explicit SpikeDetector(const DivergenceOptions& o)
      : factor_(o.spike_factor), window_(o.spike_window) {}

  // Why a step with this loss and gradient norm diverged, in words for an
  // error line and the metrics; "" when it did not.
  std::string judge(double loss, double grad_norm) const;
  // An applied step's loss joins the window (the oldest leaves a full one).
  void accept(double loss);

  const std::vector<double>& history() const { return recent_; }
  // A checkpoint's history; a longer one (saved under a larger window) is cut
  // to its newest values.
  void restore(const std::vector<double>& history);

 private:
  float factor_;
  int window_;
  std::vector<double> recent_;  // oldest first, at most window_
};

// Whether a rerun of a step repeated a value of the first run: equal (NaN
// counts as equal to NaN, Inf to the same Inf), or both finite and within
// `tolerance` of the larger. A finite value and a non-finite one differ.
bool same_rerun_value(double first, double rerun, double tolerance);

// The median of `v` (the mean of the middle two for an even count); 0 for none.
double median_of(std::vector<double> v);

}  // namespace fsdp
