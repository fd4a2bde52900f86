// How the model reaches weights and gradient buffers while a unit computes.
// The FSDP engine implements it; the model never learns that the weights were
// sharded and gathered, only that they are there while it needs them.
//
// `count` > 1 asks for a run of parameters that ParamSpec::packed keeps end
// to end, as one tensor: Wq|Wk|Wv as one [q_dim + 2 kv_dim, d_model] matrix
// (and its gradient, and its FP8 codes with the one scale they share), so the
// model runs them as one GEMM.
#pragma once

#include "model/ops.h"

namespace fsdp {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The full (gathered) parameter `param` of `unit`, in the compute dtype.
  virtual Tensor weight(int unit, int param, int count) = 0;
  // A block linear's weight as E4M3 codes with their inverse scale, when the
  // provider holds it so (the engine's FP8 all-gather, --precision fp8);
  // empty codes otherwise, and then weight() has it. A parameter offered as
  // codes has no weight() in the compute dtype.
  virtual Fp8Tensor weight_fp8(int unit, int param, int count) {
    (void)unit;
    (void)param;
    (void)count;
    return {};
  }
  // The unit's full gradient buffer for that parameter; backward adds into it.
  virtual Tensor grad(int unit, int param, int count) = 0;

  // One parameter.
  Tensor weight(int unit, int param) { return weight(unit, param, 1); }
  Fp8Tensor weight_fp8(int unit, int param) { return weight_fp8(unit, param, 1); }
  Tensor grad(int unit, int param) { return grad(unit, param, 1); }
};

}  // namespace fsdp
