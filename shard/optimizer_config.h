// The optimizer's hyperparameters, written once: the option table's defaults
// (src/option_table.cpp) are these, and the engine's step takes them as they
// are. The learning rate comes per step from the schedule (src/lr_schedule.h).
#pragma once

namespace fsdp {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // matrices only
  float grad_clip = 1.0f;     // global L2 norm; 0 disables

  bool operator==(const AdamWConfig&) const = default;
};

}  // namespace fsdp
