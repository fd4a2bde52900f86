#include "shard/layout.h"

#include <algorithm>

namespace fsdp {

UnitLayout make_layout(const UnitSpec& unit, int ranks) {
  UnitLayout l;
  for (int p = 0; p < int(unit.params.size()); ++p) {
    l.offsets.push_back(unit.offset_of(p));
    l.sizes.push_back(unit.params[p].numel());
    l.stored.push_back(unit.params[p].stored_numel());
  }
  l.numel = unit.numel();
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
