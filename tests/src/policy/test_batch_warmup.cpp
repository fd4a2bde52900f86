// --batch-warmup-steps' schedule (src/policy/batch_warmup.h): the step's
// micro-batches grow linearly from the start to --grad-accum, never
// shrinking nor leaving [start, --grad-accum]; off, or once over, they are
// --grad-accum. (The option's rules are tested in test_options.cpp, the
// loader's reading in tests/data/test_batch_loader.cpp, the trainer's use in
// tests/src/batch_warmup_test.py.)
#include <gtest/gtest.h>

#include "src/policy/batch_warmup.h"

namespace fsdp {
namespace {

TEST(BatchWarmup, OffIsGradAccum) {
  const BatchWarmup off;
  EXPECT_FALSE(off.on());
  for (int s : {0, 1, 1000}) EXPECT_EQ(batch_warmup_micro_batches(off, s, 4), 4);
  EXPECT_EQ(batch_warmup_rule(off, 1), "");
}

TEST(BatchWarmup, GrowsLinearlyFromOneByDefault) {
  const BatchWarmup w{.steps = 8};
  // 1 + 3 s / 8: 1 for steps 0-2, 2 for 3-5, 3 for 6-7, then 4.
  const int want[] = {1, 1, 1, 2, 2, 2, 3, 3, 4, 4};
  for (int s = 0; s < 10; ++s) EXPECT_EQ(batch_warmup_micro_batches(w, s, 4), want[s]) << s;
  EXPECT_EQ(batch_warmup_micro_batches(w, 5000, 4), 4);
}

TEST(BatchWarmup, NeverShrinksAndStaysInRange) {
  for (int accum : {2, 3, 8, 64})
    for (int start : {0, 1, 2, 7})
      for (int steps : {1, 5, 37, 200}) {
        const BatchWarmup w{.steps = steps, .start = start};
        if (!batch_warmup_rule(w, accum).empty()) continue;
        const int first = w.start_micro_batches();
        EXPECT_EQ(batch_warmup_micro_batches(w, 0, accum), first);
        int last = first;
        for (int s = 0; s <= steps; ++s) {
          const int a = batch_warmup_micro_batches(w, s, accum);
          EXPECT_GE(a, last) << accum << " " << start << " " << steps << " step " << s;
          if (s < steps)
            EXPECT_LT(a, accum) << accum << " " << start << " " << steps << " step " << s;
          else
            EXPECT_EQ(a, accum);
          last = a;
        }
      }
}

TEST(BatchWarmup, StartsBelowGradAccum) {
  EXPECT_NE(batch_warmup_rule({.steps = 10}, 1), "");  // one micro-batch cannot grow
  EXPECT_EQ(batch_warmup_rule({.steps = 10}, 2), "");
  EXPECT_EQ(batch_warmup_rule({.steps = 10, .start = 3}, 4), "");
  EXPECT_NE(batch_warmup_rule({.steps = 10, .start = 4}, 4).find("below --grad-accum 4"),
            std::string::npos);
}

}  // namespace
}  // namespace fsdp
