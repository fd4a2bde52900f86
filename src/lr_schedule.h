// Linear warmup to the peak, then cosine decay to min_lr at the last step.
#pragma once

#include <algorithm>
#include <cmath>

namespace fsdp {

inline float lr_at(int step, int total_steps, int warmup, float lr, float min_lr) {
  if (step < warmup) return lr * float(step + 1) / float(warmup);
  const int decay_steps = std::max(1, total_steps - warmup - 1);
  const double progress = std::min(1.0, double(step - warmup) / decay_steps);
  return float(min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace fsdp
