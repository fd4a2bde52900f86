// An unsharded UnitAccess on the device: every unit's weights and gradients in
// the backend's compute dtype, initialised from the same host values as
// tests/model/full_weights.h (rounded to bf16), for whole-model parity tests
// and the single-GPU benchmark.
#pragma once

#include <vector>

#include "model/ops.h"
#include "model/params.h"
#include "model/unit_access.h"

namespace fsdp::test {

class DeviceWeights final : public UnitAccess {
 public:
  // host_weights[u] holds unit u's flat f32 values (e.g. FullWeights'
  // unit_weights); they are converted to the backend's compute dtype.
  // Gradients are in that dtype too, or in f32 as the engine's buffers are
  // (f32_grads).
  DeviceWeights(Ops& ops, const std::vector<UnitSpec>& units,
                const std::vector<std::vector<float>>& host_weights, bool f32_grads = false)
      : ops_(ops), units_(units) {
    const DType ct = ops.compute_dtype();
    for (size_t u = 0; u < units.size(); ++u) {
      const int64_t n = units[u].numel();
      Tensor staging = ops.alloc(DType::f32, n);
      ops.to_device(staging, host_weights[u].data());
      w_.push_back(ops.alloc(ct, n));
      ops.cast(w_.back(), staging);
      ops.free(staging);
      g_.push_back(ops.alloc(f32_grads ? DType::f32 : ct, n));
      ops.zero(g_.back());
    }
  }
  ~DeviceWeights() override {
    for (Tensor t : w_) ops_.free(t);
    for (Tensor t : g_) ops_.free(t);
  }
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  using UnitAccess::grad;
  using UnitAccess::weight;
  Tensor weight(int unit, int param, int count) override { return view(w_, unit, param, count); }
  Tensor grad(int unit, int param, int count) override { return view(g_, unit, param, count); }
  Tensor unit_grads(int u) const { return g_[u]; }
  void zero_grads() {
    for (Tensor t : g_) ops_.zero(t);
  }

 private:
  Tensor view(const std::vector<Tensor>& v, int unit, int param, int count) const {
    const UnitSpec& u = units_[unit];
    return v[unit].slice(u.offset_of(param), u.span_numel(param, count));
  }
  Ops& ops_;
  std::vector<UnitSpec> units_;
  std::vector<Tensor> w_, g_;
};

}  // namespace fsdp::test
