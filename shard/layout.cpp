#include "shard/layout.h"

#include <algorithm>

#include "common/error.h"

namespace fsdp {

UnitLayout make_layout(const UnitSpec& unit, int ranks, bool fp8_split) {
  const int P = int(unit.params.size());
  UnitLayout l;
  l.offsets.resize(size_t(P));
  l.segment_of.resize(size_t(P));
  for (const auto& p : unit.params) {
    l.sizes.push_back(p.numel());
    l.stored.push_back(p.stored_numel());
  }
  const bool any_fp8 =
      std::any_of(unit.params.begin(), unit.params.end(), [](const auto& p) { return p.fp8; });
  const bool any_other =
      std::any_of(unit.params.begin(), unit.params.end(), [](const auto& p) { return !p.fp8; });
  std::vector<bool> kinds;  // each segment's fp8 flag, in order
  if (fp8_split && any_fp8) {
    kinds.push_back(true);
    if (any_other) kinds.push_back(false);
  } else {
    kinds.push_back(false);
  }
  for (size_t s = 0; s < kinds.size(); ++s) {
    Segment g;
    g.fp8 = kinds[s];
    g.begin = l.padded;
    g.local = l.shard;
    int64_t end = 0;  // within the segment
    int prev = -1;    // the segment's previous parameter
    for (int p = 0; p < P; ++p) {
      if (kinds.size() > 1 && unit.params[p].fp8 != g.fp8) continue;
      // A packed parameter continues the matrix of the one before it in the
      // spec, so that one must be its neighbour here too.
      FSDP_CHECK(!unit.params[p].packed || prev == p - 1, "unit ", unit.name, ": ",
                 unit.params[p].name, " is packed but not next to ", unit.params[p - 1].name);
      prev = p;
      const int64_t at = param_start(end, unit.params[p]);
      l.offsets[p] = g.begin + at;
      l.segment_of[p] = int(s);
      end = at + l.stored[p];
    }
    g.numel = end;
    const int64_t per_rank = (g.numel + ranks - 1) / ranks;
    g.shard = (per_rank + kShardAlign - 1) / kShardAlign * kShardAlign;
    g.padded = g.shard * ranks;
    l.numel = g.begin + g.numel;
    l.padded += g.padded;
    l.shard += g.shard;
    l.segments.push_back(g);
  }
  return l;
}

Overlap shard_overlap(const UnitLayout& l, int param, int rank, int count) {
  const int last = param + count - 1;
  FSDP_CHECK(count >= 1 && l.segment_of[param] == l.segment_of[last], "parameters ", param, "+",
             count, " span segments");
  const Segment& g = l.segments[size_t(l.segment_of[param])];
  const int64_t first = g.begin + int64_t(rank) * g.shard;  // the rank's slice of the segment
  const int64_t lo = std::max(l.offsets[param], first);
  const int64_t hi = std::min(l.offsets[last] + l.sizes[last], first + g.shard);
  return hi > lo ? Overlap{lo, hi - lo, g.local + (lo - first)} : Overlap{};
}

}  // namespace fsdp
