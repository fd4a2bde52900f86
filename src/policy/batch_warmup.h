// --batch-warmup-steps: small-to-large batch warm-up (issue 68; GPT-3's
// batch ramp, Megatron's --rampup-batch-size, DeepSeek-V3's batch schedule).
// Early in training the gradient is large and consistent, so a small batch
// already points the right way and a step of fewer tokens is not wasted;
// the batch grows as the gradient's noise comes to matter. Here the step's
// micro-batches grow: step s runs a(s) of --grad-accum micro-batches of
// --batch-size sequences on every rank, so the micro-batch keeps its shape
// (no new plans or graphs, the same memory) and a step costs about a(s) /
// --grad-accum of a full one. Like Megatron's, the ramp is in whole
// micro-batches; a finer ramp is a smaller --batch-size with a larger
// --grad-accum.
//
// a(s) grows linearly from --batch-warmup-start to --grad-accum over the
// warm-up (rounded down), then stays at --grad-accum. It depends on the step
// alone, so the data loader's reader thread, a resumed run and the PyTorch
// reference (tools/torch_reference.py) compute the same one. The data order
// is unchanged: a step reads the next a(s) micro-batches' positions, so the
// first steps read fewer of them. The learning-rate schedule stays by step.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

struct BatchWarmup {
  int steps = 0;  // 0: off
  int start = 0;  // the first steps' micro-batches (0: 1)

  bool on() const { return steps > 0; }
  int start_micro_batches() const { return start > 0 ? start : 1; }
  bool operator==(const BatchWarmup&) const = default;
};

// Why a warm-up cannot run with `grad_accum` micro-batches a step ("" when
// it can): it starts with at least one and fewer than --grad-accum.
inline std::string batch_warmup_rule(const BatchWarmup& w, int grad_accum) {
  if (!w.on()) return "";
  const int a = w.start_micro_batches();
  if (a >= 1 && a < grad_accum) return "";
  return "the first steps' micro-batches (--batch-warmup-start, 0: 1) must be at least 1 and "
         "below --grad-accum " +
         std::to_string(grad_accum) +
         " (the warm-up grows the step's micro-batches to --grad-accum: raise it, with a smaller "
         "--batch-size for the same global batch)";
}

// The micro-batches of `step` (from 0): start + (grad_accum - start) * step
// / steps (integer division), grad_accum once the warm-up is over.
inline int batch_warmup_micro_batches(const BatchWarmup& w, int64_t step, int grad_accum) {
  if (!w.on() || step >= w.steps) return grad_accum;
  const int start = w.start_micro_batches();
  return int(start + int64_t(grad_accum - start) * step / w.steps);
}

}  // namespace fsdp
