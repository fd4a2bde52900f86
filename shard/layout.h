// Flat per-unit layout: a unit's parameters end to end, padded so each of the
// shard group's ranks owns an equal, aligned slice [rank*shard, (rank+1)*shard).
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"

namespace fsdp {

// Shard sizes are multiples of this many elements, so every rank's slice of a
// bf16 or f32 buffer starts 64-byte aligned when the buffer does.
constexpr int64_t kShardAlign = 32;

struct UnitLayout {
  int64_t numel = 0;             // the flat unit (UnitSpec::numel, alignment gaps included)
  int64_t padded = 0;            // shard * ranks
  int64_t shard = 0;             // elements per rank
  std::vector<int64_t> offsets;  // each parameter's start in the flat unit (aligned)
  std::vector<int64_t> sizes;    // logical elements: what is initialised, updated, saved
  std::vector<int64_t> stored;   // with padding rows: what the model sees
};

UnitLayout make_layout(const UnitSpec& unit, int ranks);

// The part of parameter p that falls in rank's shard, in flat-unit coordinates.
struct Overlap {
  int64_t begin = 0, count = 0;  // flat-unit element range; count 0 if none
};
Overlap shard_overlap(const UnitLayout& l, int param, int rank);

}  // namespace fsdp
