// The flat unit layout (shard/layout.h): every element of every parameter
// belongs to exactly one rank's shard, at the place shard_overlap says, for
// one segment and for the FP8 split into two.
#include <gtest/gtest.h>

#include <vector>

#include "shard/layout.h"
#include "tests/shard/engine_harness.h"  // engine_test_config: uneven shapes

namespace fsdp {
namespace {

// Each parameter element, by gathered position, owned once; the shard
// positions shard_overlap gives are disjoint and inside the shard, and both
// the gathered and the local position lie in the parameter's segment.
void expect_partition(const UnitSpec& unit, const UnitLayout& l, int ranks) {
  std::vector<int> owner(size_t(l.padded), 0);
  for (int r = 0; r < ranks; ++r) {
    std::vector<int> used(size_t(l.shard), 0);
    for (int p = 0; p < int(unit.params.size()); ++p) {
      const Overlap o = shard_overlap(l, p, r);
      if (o.count == 0) continue;
      const Segment& g = l.segments[size_t(l.segment_of[p])];
      EXPECT_GE(o.begin, g.begin + int64_t(r) * g.shard) << unit.params[p].name;
      EXPECT_LE(o.begin + o.count, g.begin + int64_t(r + 1) * g.shard) << unit.params[p].name;
      EXPECT_EQ(o.local - g.local, o.begin - g.begin - int64_t(r) * g.shard);
      for (int64_t i = 0; i < o.count; ++i) {
        ++owner[size_t(o.begin + i)];
        ++used[size_t(o.local + i)];
      }
    }
    for (int64_t i = 0; i < l.shard; ++i) ASSERT_LE(used[size_t(i)], 1) << "rank " << r;
  }
  for (int p = 0; p < int(unit.params.size()); ++p)
    for (int64_t i = 0; i < l.sizes[p]; ++i)
      ASSERT_EQ(owner[size_t(l.offsets[p] + i)], 1) << unit.params[p].name << " element " << i;
}

TEST(UnitLayout, OneSegmentIsTheSpecOrder) {
  for (const UnitSpec& u : model_units(testing::engine_test_config()))
    for (int ranks : {1, 3, 4}) {
      const UnitLayout l = make_layout(u, ranks);
      ASSERT_EQ(l.segments.size(), 1u);
      EXPECT_EQ(l.numel, u.numel());
      for (int p = 0; p < int(u.params.size()); ++p) EXPECT_EQ(l.offsets[p], u.offset_of(p));
      EXPECT_EQ(l.shard * ranks, l.padded);
      EXPECT_EQ(l.shard % kShardAlign, 0);
      expect_partition(u, l, ranks);
    }
}

TEST(UnitLayout, Fp8SplitPutsTheLinearsFirst) {
  const auto units = model_units(testing::engine_test_config());
  for (int ranks : {1, 2, 3, 4}) {
    for (const UnitSpec& u : units) {
      SCOPED_TRACE(u.name + ", " + std::to_string(ranks) + " ranks");
      const UnitLayout l = make_layout(u, ranks, true);
      bool has_fp8 = false;
      for (const auto& p : u.params) has_fp8 |= p.fp8;
      // Blocks: linears, then gains; the embedding and head have no linear.
      ASSERT_EQ(l.segments.size(), has_fp8 ? 2u : 1u);
      EXPECT_EQ(l.segments[0].fp8, has_fp8);
      int64_t shard = 0, padded = 0;
      for (const Segment& g : l.segments) {
        EXPECT_EQ(g.begin, padded);
        EXPECT_EQ(g.local, shard);
        EXPECT_EQ(g.shard % kShardAlign, 0);
        EXPECT_EQ(g.shard * ranks, g.padded);
        EXPECT_GE(g.padded, g.numel);
        shard += g.shard;
        padded += g.padded;
      }
      EXPECT_EQ(l.shard, shard);
      EXPECT_EQ(l.padded, padded);
      for (int p = 0; p < int(u.params.size()); ++p) {
        const Segment& g = l.segments[size_t(l.segment_of[p])];
        EXPECT_EQ(g.fp8, u.params[p].fp8) << u.params[p].name;
        if (u.params[p].packed)  // continues the matrix before it, in the same segment
          EXPECT_EQ(l.offsets[p], l.offsets[p - 1] + l.stored[p - 1]) << u.params[p].name;
        else
          EXPECT_EQ((l.offsets[p] - g.begin) % kParamAlign, 0) << u.params[p].name;
        EXPECT_LE(l.offsets[p] + l.stored[p], g.begin + g.numel) << u.params[p].name;
      }
      expect_partition(u, l, ranks);
    }
  }
  // The linears of a block are its matrices, and only they.
  for (const auto& p : units[1].params) EXPECT_EQ(p.fp8, p.shape.size() == 2) << p.name;
}

}  // namespace
}  // namespace fsdp
