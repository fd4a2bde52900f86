// What each rank holds, computed from shapes alone, so the plan for a 350M
// model on 32 ranks can be printed (and tested) on a laptop. The engine
// allocates by the same slot plan, so its measured figures match.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/tensor.h"
#include "model/transformer.h"
#include "shard/engine_options.h"
#include "shard/layout.h"
#include "shard/optimizer_config.h"

namespace fsdp {

// Which gather/gradient buffer ("slot") each unit uses. With resharding the
// embedding and head keep their own and blocks alternate between two, so the
// next block can be gathered while the current one computes; without it
// every unit keeps its own (more memory, no re-gather for backward).
struct SlotPlan {
  std::vector<int> slot_of_unit;
  std::vector<int64_t> slot_elems;  // the largest padded unit mapped to each slot
  // Per slot and segment (UnitLayout::segments), the largest padded segment.
  std::vector<std::vector<int64_t>> segment_elems;
};
SlotPlan plan_slots(const std::vector<UnitLayout>& layouts, bool reshard_after_forward);

struct MemoryPlan {
  int64_t master = 0, grads = 0, moments = 0, send_copy = 0;  // persistent, sharded
  int64_t gather_buffers = 0, grad_buffers = 0;               // transient, full units
  int64_t optimizer_buffers = 0;  // Muon's exchange of whole matrices (shard/muon.h)
  int64_t activations = 0;
  int64_t persistent() const { return master + grads + moments + send_copy; }
  int64_t buffers() const { return gather_buffers + grad_buffers + optimizer_buffers; }
  int64_t total() const { return persistent() + buffers() + activations; }
};

// Activations beyond this are reported as this (4 EiB, more than any device):
// the parameter part is bounded by validate_model(), the activations grow
// with batch x seq_len, which no model field bounds.
inline constexpr int64_t kPlanSaturation = int64_t{1} << 62;

// What the plan depends on besides the model's shapes.
struct PlanSettings {
  int shard_size = 1;  // ranks the model state is split over
  DType compute = DType::f32;
  int batch = 1, seq_len = 1;  // a micro-batch
  Recompute recompute = Recompute::none;
  bool fp8 = false;  // the block linears run on FP8 codes (Transformer's fp8)
  // Read: reshard_after_forward, reduce_dtype, direct_when_unsharded (one
  // rank then has no gather or gradient buffers) and fp8_gather (with fp8,
  // the block linears are gathered as their codes). "= {}" lets a designated
  // initialiser leave it out without GCC's -Wmissing-field-initializers.
  EngineOptions engine = {};
  OptimizerKind optimizer = OptimizerKind::adamw;
  bool normuon = false;  // under muon, NorMuon's row statistics (MuonConfig::normuon)
  // forward_only (--eval-only): the weights, their send copies and gather
  // buffers, and a forward's activations; no gradients, moments or their
  // buffers (FsdpEngine holds none for such a model).
  ModelUse use = ModelUse::train;
};

// Per-rank bytes of the model `c` under `s`. Costs the same for any n_layer.
MemoryPlan plan_memory(const ModelConfig& c, const PlanSettings& s);

}  // namespace fsdp
