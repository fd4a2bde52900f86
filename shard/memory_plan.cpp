#include "shard/memory_plan.h"

#include <algorithm>

#include "model/transformer.h"

namespace fsdp {

SlotPlan plan_slots(const std::vector<UnitLayout>& layouts, bool reshard) {
  const int U = int(layouts.size());
  SlotPlan p;
  for (int u = 0; u < U; ++u) {
    const int s = !reshard ? u : u == 0 ? 0 : u == U - 1 ? 1 : 2 + u % 2;
    p.slot_of_unit.push_back(s);
    if (int(p.slot_elems.size()) <= s) p.slot_elems.resize(size_t(s) + 1, 0);
    p.slot_elems[s] = std::max(p.slot_elems[s], layouts[u].padded);
  }
  return p;
}

MemoryPlan plan_memory(const ModelConfig& c, int shard_size, DType compute, bool reshard, int batch,
                       int seq_len, Recompute recompute, DType reduce) {
  std::vector<UnitLayout> layouts;
  for (const auto& u : model_units(c)) layouts.push_back(make_layout(u, shard_size));
  MemoryPlan m;
  for (const auto& l : layouts) {
    m.master += 4 * l.shard;
    m.grads += 4 * l.shard;
    m.moments += 8 * l.shard;
    if (compute != DType::f32) m.send_copy += int64_t(dtype_size(compute)) * l.shard;
  }
  const int64_t es = int64_t(dtype_size(compute));
  for (int64_t n : plan_slots(layouts, reshard).slot_elems) {
    m.gather_buffers += es * n;
    // full gradients + reduce-scatter output, in the reduce dtype
    m.grad_buffers += int64_t(dtype_size(reduce)) * (n + n / shard_size);
  }
  m.activations = Transformer::activation_bytes_for(c, batch, seq_len, compute, recompute);
  return m;
}

}  // namespace fsdp
