#include "shard/memory_plan.h"

#include <algorithm>

#include "common/error.h"
#include "model/transformer.h"
#include "shard/muon.h"

namespace fsdp {

SlotPlan plan_slots(const std::vector<UnitLayout>& layouts, bool reshard) {
  const int U = int(layouts.size());
  SlotPlan p;
  for (int u = 0; u < U; ++u) {
    const int s = !reshard ? u : u == 0 ? 0 : u == U - 1 ? 1 : 2 + u % 2;
    p.slot_of_unit.push_back(s);
    if (int(p.slot_elems.size()) <= s) p.slot_elems.resize(size_t(s) + 1, 0);
    p.slot_elems[s] = std::max(p.slot_elems[s], layouts[u].padded);
    p.segment_elems.resize(p.slot_elems.size());
    auto& seg = p.segment_elems[s];
    const auto& mine = layouts[u].segments;
    if (seg.size() < mine.size()) seg.resize(mine.size(), 0);
    for (size_t g = 0; g < mine.size(); ++g) seg[g] = std::max(seg[g], mine[g].padded);
  }
  return p;
}

// Every block has the same layout, so one block's stands for all n_layer:
// the plan costs the same for 2 layers or 100000, and the memory check can
// run it before anything sized by the model exists. The engine's per-unit
// slots (plan_slots) give the same figures; tests/shard compares them.
MemoryPlan plan_memory(const ModelConfig& c, const PlanSettings& s) {
  const int shard_size = s.shard_size;
  const DType compute = s.compute;
  const bool fp8 = s.fp8, reshard = s.engine.reshard_after_forward;
  const ModelLayout model = model_layout(c);
  const std::vector<UnitSpec> units{model.embed, model.block, model.head};
  std::vector<UnitLayout> layouts;
  for (const auto& u : units)
    layouts.push_back(make_layout(u, shard_size, fp8 && s.engine.fp8_gather));
  const int64_t blocks = model.n_layer;
  const int64_t times[3] = {1, blocks, 1};
  MemoryPlan m;
  const int64_t es = int64_t(dtype_size(compute)), rs = int64_t(dtype_size(s.engine.reduce_dtype));
  const int64_t trains = s.use == ModelUse::train ? 1 : 0;
  // The bytes of one element of a segment's send copy and gather buffer: FP8
  // codes, the compute dtype, or none for the send copy when that is f32 (the
  // master itself is sent).
  auto gather_size = [&](const Segment& g) { return g.fp8 ? int64_t(1) : es; };
  auto send_size = [&](const Segment& g) { return g.fp8 ? 1 : compute == DType::f32 ? 0 : es; };
  for (int u = 0; u < 3; ++u) {
    const int64_t shard = times[u] * layouts[u].shard;
    m.master += 4 * shard;
    m.grads += trains * 4 * shard;
    m.moments += trains * 8 * shard;
    for (const Segment& g : layouts[u].segments) m.send_copy += times[u] * send_size(g) * g.shard;
    // and an f32 amax and inverse scale (in its own slot) per FP8-gathered
    // matrix: a parameter, or a packed run of them (FsdpEngine::fp8_index)
    const auto& params = units[size_t(u)].params;
    for (size_t p = 0; p < params.size(); ++p)
      if (layouts[u].segments[size_t(layouts[u].segment_of[p])].fp8 && !params[p].packed)
        m.send_copy += times[u] * 4 * (1 + kFp8ScaleSlot);
  }
  // Buffers: resharding keeps the embedding's and head's own and two that
  // blocks alternate in (one for a single block); without it, one per unit.
  // A single rank needs none: the engine computes in its shards
  // (EngineOptions::direct_when_unsharded).
  const bool direct = s.engine.direct_when_unsharded && shard_size == 1;
  const int64_t block_slots = direct ? 0 : reshard ? std::min<int64_t>(blocks, 2) : blocks;
  const int64_t edge_slots = direct ? 0 : 1;
  const int64_t slots[3] = {edge_slots, block_slots, edge_slots};
  for (int u = 0; u < 3; ++u) {
    const int64_t n = layouts[u].padded;
    for (const Segment& g : layouts[u].segments)
      m.gather_buffers += slots[u] * gather_size(g) * g.padded;
    // full gradients + reduce-scatter output, in the reduce dtype
    m.grad_buffers += trains * slots[u] * rs * (n + n / shard_size);
  }
  if (s.optimizer == OptimizerKind::muon && trains)
    m.optimizer_buffers = 4 * muon_buffer_elems(units, layouts, shard_size, s.normuon);
  // Activations are at most linear in the tokens of a micro-batch (the
  // logits hold one head chunk); an absurd --batch-size x --seq-len
  // saturates instead of overflowing, so the memory check still refuses it
  // with a number.
  const int64_t per_token =
      Transformer::activation_bytes_for(c, 1, 1, compute, s.recompute, fp8, 0, s.use);
  if (static_cast<long double>(per_token) * s.batch * s.seq_len >= kPlanSaturation)
    m.activations = kPlanSaturation;
  else
    m.activations = Transformer::activation_bytes_for(c, s.batch, s.seq_len, compute, s.recompute,
                                                      fp8, 0, s.use);
  return m;
}

}  // namespace fsdp
