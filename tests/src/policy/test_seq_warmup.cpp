// --seq-warmup-steps' schedule (src/policy/seq_warmup.h): the context grows
// linearly from the start to --seq-len, each step's a divisor of --seq-len,
// never shorter than the start nor shrinking; off, or once over, it is
// --seq-len. (The option's rules are tested in test_options.cpp, the
// trainer's use of it in tests/src/seq_warmup_test.py.)
#include <gtest/gtest.h>

#include <vector>

#include "src/policy/seq_warmup.h"

namespace fsdp {
namespace {

TEST(SeqWarmup, OffIsTheSequenceLength) {
  const SeqWarmup off;
  EXPECT_FALSE(off.on());
  EXPECT_EQ(seq_warmup_context(off, 0, 128), 128);
  EXPECT_TRUE(seq_warmup_contexts(off, 0, 128).empty());
  EXPECT_EQ(seq_warmup_rule(off, 100), "");
}

TEST(SeqWarmup, DoublesAtTheLinearRampsCrossingsForAPowerOfTwo) {
  const SeqWarmup w{.steps = 100, .start = 16};
  // ramp 16 + 112 s / 100 (floored) reaches 32 at step 15, 64 at step 43.
  for (int s = 0; s < 15; ++s) EXPECT_EQ(seq_warmup_context(w, s, 128), 16) << s;
  for (int s = 15; s < 43; ++s) EXPECT_EQ(seq_warmup_context(w, s, 128), 32) << s;
  for (int s = 43; s < 100; ++s) EXPECT_EQ(seq_warmup_context(w, s, 128), 64) << s;
  for (int s : {100, 101, 5000}) EXPECT_EQ(seq_warmup_context(w, s, 128), 128) << s;
  EXPECT_EQ(seq_warmup_contexts(w, 0, 128), (std::vector<int>{16, 32, 64}));
  EXPECT_EQ(seq_warmup_contexts(w, 50, 128), (std::vector<int>{64}));  // resumed later
  EXPECT_TRUE(seq_warmup_contexts(w, 100, 128).empty());
}

TEST(SeqWarmup, EveryContextDividesTheSequenceAndNoneShrinks) {
  for (int T : {48, 96, 100, 1024})
    for (int start : {1, 2, 4, 5, 6}) {
      if (T % start) continue;
      const SeqWarmup w{.steps = 37, .start = start};
      ASSERT_EQ(seq_warmup_rule(w, T), "") << T << " " << start;
      int last = start;
      for (int s = 0; s <= 37; ++s) {
        const int c = seq_warmup_context(w, s, T);
        EXPECT_EQ(T % c, 0) << T << " " << start << " step " << s;
        EXPECT_GE(c, last) << T << " " << start << " step " << s;
        EXPECT_LE(c, start + (T - start) * s / 37) << T << " " << start << " step " << s;
        last = c;
      }
      EXPECT_EQ(seq_warmup_context(w, 0, T), start);
      EXPECT_EQ(last, T);
    }
  // 48 from 6 over 40 steps (the PyTorch parity case's): 16 at step 10, 24 at step 20.
  const SeqWarmup p{.steps = 40, .start = 6};
  EXPECT_EQ(seq_warmup_context(p, 10, 48), 16);
  EXPECT_EQ(seq_warmup_context(p, 20, 48), 24);
  EXPECT_EQ(seq_warmup_context(p, 39, 48), 24);
}

TEST(SeqWarmup, StartsAtAnEighthByDefaultAndMustDivide) {
  const SeqWarmup d{.steps = 10};
  EXPECT_EQ(d.start_for(1024), 128);
  EXPECT_EQ(seq_warmup_context(d, 0, 1024), 128);
  EXPECT_EQ(seq_warmup_rule(d, 1024), "");
  EXPECT_NE(seq_warmup_rule(d, 100), "");  // 12 does not divide 100
  EXPECT_NE(seq_warmup_rule(d, 4), "");    // 0
  EXPECT_NE(seq_warmup_rule(SeqWarmup{.steps = 10, .start = 7}, 48), "");
  EXPECT_NE(seq_warmup_rule(SeqWarmup{.steps = 10, .start = 48}, 48), "");  // not shorter
  EXPECT_EQ(seq_warmup_rule(SeqWarmup{.steps = 10, .start = 25}, 100), "");
}

}  // namespace
}  // namespace fsdp
