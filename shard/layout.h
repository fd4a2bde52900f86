// Flat per-unit layout: a unit's parameters end to end, padded so each of the
// shard group's ranks owns an equal, aligned slice.
//
// A unit is one segment, or two under FP8 weight gathering: the block
// linears' weights (ParamSpec::fp8), gathered as 1-byte E4M3 codes, and the
// rest (norm gains), gathered in the compute dtype. A collective moves one
// element type, so each segment is sharded on its own: the gathered unit is
// segment after segment, and a rank's shard is its slice of each, in order.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"

namespace fsdp {

// Shard sizes are multiples of this many elements, so every rank's slice of a
// bf16 or f32 buffer starts 64-byte aligned when the buffer does.
constexpr int64_t kShardAlign = 32;

struct Segment {
  int64_t begin = 0;   // first element in the gathered unit
  int64_t numel = 0;   // its parameters, alignment gaps included
  int64_t shard = 0;   // elements per rank
  int64_t padded = 0;  // shard * ranks
  int64_t local = 0;   // where a rank's slice of it starts in that rank's shard
  bool fp8 = false;    // gathered as FP8 codes
};

struct UnitLayout {
  int64_t numel = 0;              // the gathered unit, up to the end of the last segment's data
  int64_t padded = 0;             // the gathered unit: every segment's padded size
  int64_t shard = 0;              // elements per rank: every segment's shard
  std::vector<Segment> segments;  // in gathered (and shard) order
  std::vector<int64_t> offsets;   // each parameter's start in the gathered unit (aligned)
  std::vector<int64_t> sizes;     // logical elements: what is initialised, updated, saved
  std::vector<int64_t> stored;    // with padding rows: what the model sees
  std::vector<int> segment_of;    // each parameter's segment
};

// fp8_split: the unit's fp8 parameters form a segment of their own (first),
// when it has any; otherwise, and by default, one segment in spec order.
UnitLayout make_layout(const UnitSpec& unit, int ranks, bool fp8_split = false);

// The part of parameter p (or of the run of `count` parameters from p, which
// must share a segment: a packed matrix) that falls in rank's shard.
struct Overlap {
  int64_t begin = 0, count = 0;  // element range in the gathered unit; count 0 if none
  int64_t local = 0;             // where it starts in the rank's shard
};
Overlap shard_overlap(const UnitLayout& l, int param, int rank, int count = 1);

}  // namespace fsdp
