// How the model reaches weights and gradient buffers while a unit computes.
// The FSDP engine implements it; the model never learns that the weights were
// sharded and gathered, only that they are there while it needs them.
#pragma once

#include "model/ops.h"

namespace fsdp {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The full (gathered) parameter `param` of `unit`, in the compute dtype.
  virtual Tensor weight(int unit, int param) = 0;
  // A block linear's weight as E4M3 codes with their inverse scale, when the
  // provider holds it so (the engine's FP8 all-gather, --precision fp8);
  // empty codes otherwise, and then weight() has it. A parameter offered as
  // codes has no weight() in the compute dtype.
  virtual Fp8Tensor weight_fp8(int unit, int param) {
    (void)unit;
    (void)param;
    return {};
  }
  // The unit's full gradient buffer for that parameter; backward adds into it.
  virtual Tensor grad(int unit, int param) = 0;
};

}  // namespace fsdp
