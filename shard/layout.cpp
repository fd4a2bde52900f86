#include "shard/layout.h"

#include <algorithm>

namespace fsdp {

UnitLayout make_layout(const UnitSpec& unit, int ranks) {
  UnitLayout l;
  for (const auto& p : unit.params) {
    l.offsets.push_back(l.numel);
    l.sizes.push_back(p.numel());
    l.numel += p.numel();
  }
  const int64_t per_rank = (l.numel + ranks - 1) / ranks;
  l.shard = (per_rank + kShardAlign - 1) / kShardAlign * kShardAlign;
  l.padded = l.shard * ranks;
  return l;
}

Overlap shard_overlap(const UnitLayout& l, int param, int rank) {
  const int64_t lo = std::max(l.offsets[param], int64_t(rank) * l.shard);
  const int64_t hi = std::min(l.offsets[param] + l.sizes[param], int64_t(rank + 1) * l.shard);
  return hi > lo ? Overlap{lo, hi - lo} : Overlap{};
}

}  // namespace fsdp
