// A cadence: whether `done` steps end a period of `n` steps (0: no period).
// Each periodic part of a run (--eval-every, --sample-every,
// --checkpoint-every, --log-every) is decided with it by the component that
// owns that part, so the training loop names the components, not periods.
#pragma once

namespace fsdp {

inline bool every(int n, int done) {
  return n > 0 && done % n == 0;
}

}  // namespace fsdp
