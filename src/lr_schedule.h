// Linear warmup to the peak, then cosine decay to min_lr at the last step.
#pragma once

#include <algorithm>
#include <cmath>

namespace fsdp {

struct LrSchedule {
  float lr = 1e-3f;      // the peak
  float min_lr = 1e-4f;  // at the last step
  int warmup_steps = 10;

  bool operator==(const LrSchedule&) const = default;
};

// The rate of `step` (from 0) in a run of `total_steps`.
inline float lr_at(int step, int total_steps, const LrSchedule& s) {
  const int warmup = s.warmup_steps;
  if (step < warmup) return s.lr * float(step + 1) / float(warmup);
  const int decay_steps = std::max(1, total_steps - warmup - 1);
  const double progress = std::min(1.0, double(step - warmup) / decay_steps);
  return float(s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace fsdp
