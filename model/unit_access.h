// How the model reaches weights and gradient buffers while a unit computes.
// The FSDP engine implements it; the model never learns that the weights were
// sharded and gathered, only that they are there while it needs them.
#pragma once

#include "model/tensor.h"

namespace fsdp {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The full (gathered) parameter `param` of `unit`, in the compute dtype.
  virtual Tensor weight(int unit, int param) = 0;
  // The unit's full gradient buffer for that parameter; backward adds into it.
  virtual Tensor grad(int unit, int param) = 0;
};

}  // namespace fsdp
