// The attention graphs' descriptions pass cudnn-frontend's own checks for an
// H100 (sm_90), without a GPU: the plain causal graph and the ragged one of
// --document-mask, forward and backward, deterministic or not, at the op
// table's shapes and gpt-350m's. What only a GPU can say (an engine for the
// graph, its numbers) is checks a1 and a2 (bench/cuda/run_gpu_checks.sh).
#include <gtest/gtest.h>

#include <string>

#include "model/cuda/attention.h"

namespace fsdp::cuda {
namespace {

TEST(AttentionGraph, PassesTheFrontendsChecksForAnH100) {
  const AttentionShape shapes[] = {
      {2, 128, 4, 2, 64, 2 * 64},     // packed v
      {2, 128, 4, 2, 64, 8 * 64},     // v inside q|k|v rows
      {8, 1024, 16, 4, 64, 24 * 64},  // gpt-350m
      {1, 64, 16, 8, 128, 4096},      // heads of 128 (Qwen3-0.6B's)
  };
  for (const AttentionShape& s : shapes)
    for (int docs : {0, 5, 8, 64})  // none; 5 run as 8; exactly 8; many
      for (bool backward : {false, true})
        for (bool deterministic : {false, true}) {
          if (docs > s.B * s.T) continue;
          EXPECT_EQ(check_graph(90, s, backward, deterministic, docs), "")
              << "B=" << s.B << " T=" << s.T << " heads " << s.H << "/" << s.Hkv << " v_ld "
              << s.v_ld << " documents " << docs << (backward ? " backward" : " forward")
              << (deterministic ? " deterministic" : "");
        }
}

// The checks can fail: kv heads that do not divide the heads are refused.
TEST(AttentionGraph, TheChecksRefuseABadShape) {
  const AttentionShape s{2, 128, 4, 3, 64, 3 * 64};
  for (int docs : {0, 8}) {
    const std::string e = check_graph(90, s, false, false, docs);
    EXPECT_NE(e.find("group-query attention"), std::string::npos) << docs << ": " << e;
  }
}

}  // namespace
}  // namespace fsdp::cuda
