// An unsharded UnitAccess for tests: every unit's full weights and gradients in
// plain host vectors (the CPU backend computes on host memory).
#pragma once

#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/unit_access.h"

namespace fsdp::testing {

// A model small enough to check exhaustively on the CPU: 2 layers, d_model
// 16, 4 query heads over 2 kv heads, d_ff 24, vocabulary 29, 8 positions.
inline ModelConfig small_model_config() {
  ModelConfig c;
  c.vocab_size = 29;
  c.n_layer = 2;
  c.d_model = 16;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.d_ff = 24;
  c.max_seq_len = 8;
  return c;
}

class FullWeights final : public UnitAccess {
 public:
  FullWeights(const std::vector<UnitSpec>& units, uint64_t seed) : units_(units) {
    for (const auto& u : units) {
      w_.emplace_back(size_t(u.numel()));
      g_.emplace_back(size_t(u.numel()), 0.0f);
      for (int p = 0; p < int(u.params.size()); ++p)
        init_param_slice(u.params[p], seed, 0, u.params[p].numel(),
                         w_.back().data() + u.offset_of(p));
    }
  }
  using UnitAccess::grad;
  using UnitAccess::weight;
  Tensor weight(int unit, int param, int count) override { return view(w_, unit, param, count); }
  Tensor grad(int unit, int param, int count) override { return view(g_, unit, param, count); }
  std::vector<float>& unit_weights(int u) { return w_[u]; }
  std::vector<float>& unit_grads(int u) { return g_[u]; }
  void zero_grads() {
    for (auto& g : g_) std::fill(g.begin(), g.end(), 0.0f);
  }

 private:
  Tensor view(std::vector<std::vector<float>>& v, int unit, int param, int count) {
    const auto& u = units_[unit];
    return {v[unit].data() + u.offset_of(param), DType::f32, u.span_numel(param, count)};
  }
  std::vector<UnitSpec> units_;
  std::vector<std::vector<float>> w_, g_;
};

}  // namespace fsdp::testing
