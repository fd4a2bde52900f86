// The learning rate of each step: a linear warmup to the peak, then one of
// three shapes down to min_lr at the last step.
//   cosine  half a cosine over every step after the warmup;
//   linear  a straight line over every step after the warmup;
//   wsd     warmup-stable-decay: the peak until the last decay_fraction of
//           the run, then a straight line to min_lr (as in MiniCPM and
//           modded-nanogpt: the stable phase can run on, and any stretch
//           of it can end with its own decay).
#pragma once

#include <algorithm>
#include <cmath>

namespace fsdp {

enum class LrShape { cosine, wsd, linear };

struct LrSchedule {
  float lr = 1e-3f;      // the peak
  float min_lr = 1e-4f;  // at the last step (fsdptrain: a tenth of --lr unless given)
  int warmup_steps = 10;
  LrShape shape = LrShape::cosine;
  float decay_fraction = 0.2f;  // wsd: the share of all steps that decays

  bool operator==(const LrSchedule&) const = default;
};

// The rate of `step` (from 0) in a run of `total_steps`.
inline float lr_at(int step, int total_steps, const LrSchedule& s) {
  const int warmup = s.warmup_steps;
  if (step < warmup) return s.lr * float(step + 1) / float(warmup);
  if (s.shape == LrShape::wsd) {
    // The decay's steps end at the last step, which gets min_lr; it starts
    // no earlier than the warmup's end.
    const int decay = std::max(1, int(std::lround(double(s.decay_fraction) * total_steps)));
    const int start = std::max(warmup, total_steps - decay);
    if (step < start) return s.lr;
    const double progress =
        std::min(1.0, double(step - start + 1) / std::max(1, total_steps - start));
    return float(s.lr + (double(s.min_lr) - s.lr) * progress);
  }
  const int decay_steps = std::max(1, total_steps - warmup - 1);
  const double progress = std::min(1.0, double(step - warmup) / decay_steps);
  if (s.shape == LrShape::linear) return float(s.lr + (double(s.min_lr) - s.lr) * progress);
  return float(s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace fsdp
