// OpProfiler must be invisible to the results (same bits as the bare
// backend) and must account for every op call the model makes through the
// front door, each under its op and shape, only while enabled; a backend's
// calls to itself (CPU norm_rope's rmsnorm and rope) are not ops of the model.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "model/cpu/cpu_ops.h"
#include "model/op_profiler.h"
#include "model/transformer.h"
#include "tests/model/full_weights.h"

namespace fsdp {
namespace {

// One forward and backward; returns the loss sum, leaves gradients in w.
double step(Ops& ops, const ModelConfig& c, testing::FullWeights& w, int B, int T) {
  Transformer m(c, ops, B, T);
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  std::mt19937 rng(5);
  for (auto& x : in) x = int32_t(rng() % c.vocab_size);
  for (auto& x : tgt) x = int32_t(rng() % c.vocab_size);
  m.set_batch(in.data(), tgt.data(), 1.0f);
  for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, true);
  for (int u = m.num_units() - 1; u >= 0; --u) m.backward(u, w);
  return m.loss_sum();
}

TEST(OpProfiler, SameResultsAndEveryCallCounted) {
  const ModelConfig c = testing::small_model_config();
  const int B = 2, T = 8;
  CpuOps bare;
  testing::FullWeights w0(model_units(c), 9), w1(model_units(c), 9);
  const double want = step(bare, c, w0, B, T);

  CpuOps ops;
  OpProfiler prof(ops);
  prof.set_enabled(true);
  prof.count_step();
  const double got = step(ops, c, w1, B, T);
  EXPECT_EQ(got, want);  // bit for bit: the hook only watches
  for (int u = 0; u < int(model_units(c).size()); ++u)
    EXPECT_EQ(w1.unit_grads(u), w0.unit_grads(u));

  std::map<std::string, OpProfiler::Row> by_key;
  for (const auto& r : prof.rows()) by_key[r.key] = r;
  const int M = B * T, L = c.n_layer;
  // Per block forward: q|k|v as one, o, w1|w3 as one, w2 (4 GEMMs), o and w2
  // with the residual add in the epilogue; the head adds one.
  ASSERT_TRUE(by_key.count("linear 16x32x16"));  // wq|wk|wv: q_dim 16 + 2 kv_dim 8
  EXPECT_EQ(by_key["linear 16x32x16"].calls, L);
  EXPECT_EQ(by_key.count("linear 16x16x16") + by_key.count("linear 16x8x16"), 0u);
  EXPECT_EQ(by_key["linear_add 16x16x16"].calls, L);  // wo + residual
  EXPECT_EQ(by_key["linear 16x48x16"].calls, L);      // w1|w3: 2 d_ff 24
  EXPECT_EQ(by_key.count("linear 16x24x16"), 0u);
  EXPECT_EQ(by_key["swiglu 16x24"].calls, L);
  EXPECT_EQ(by_key["swiglu_backward 16x24"].calls, L);
  EXPECT_EQ(by_key["linear_add 16x16x24"].calls, L);  // w2 + residual
  EXPECT_EQ(by_key.count("linear 16x16x24"), 0u);
  EXPECT_EQ(by_key.count("add 256"), 0u);  // no separate residual adds left
  EXPECT_DOUBLE_EQ(by_key["linear 16x48x16"].flops, L * 2.0 * M * 48 * 16);
  EXPECT_DOUBLE_EQ(by_key["linear_add 16x16x24"].flops, L * 2.0 * M * 16 * 24);
  EXPECT_EQ(by_key["attention 2x8x4x2x4"].calls, L);
  EXPECT_EQ(by_key["attention_backward 2x8x4x2x4"].calls, L);
  // QK-norm and RoPE fused: M rows of n_head (q) or n_kv_head (k) heads of 4.
  EXPECT_EQ(by_key["norm_rope 16x4x4"].calls, L);
  EXPECT_EQ(by_key["norm_rope 16x2x4"].calls, L);
  EXPECT_EQ(by_key["norm_rope_backward 16x4x4"].calls, L);
  EXPECT_EQ(by_key["norm_rope_backward 16x2x4"].calls, L);
  EXPECT_EQ(by_key.count("rmsnorm 64x4") + by_key.count("rope 16x4x4"), 0u);
  EXPECT_EQ(by_key["rmsnorm 16x16"].calls, 2 * L + 1);
  EXPECT_EQ(by_key["embedding 16x16"].calls, 1);
  int64_t calls = 0;
  for (const auto& [k, r] : by_key) {
    calls += r.calls;
    EXPECT_GE(r.seconds, 0) << k;
    EXPECT_GT(r.flops + r.bytes, 0) << k;  // every row has a rate
  }
  const std::string table = prof.report(0);
  EXPECT_NE(table.find("op profile (cpu, 1 steps)"), std::string::npos) << table;
  EXPECT_NE(table.find("TFLOP/s  linear 16x48x16"), std::string::npos) << table;
  // One line per row, plus the two header lines.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), int64_t(by_key.size()) + 2) << table;
  // Folding every row under 100% still leaves each op's largest, and the fold.
  std::set<std::string> names;
  for (const auto& [k, r] : by_key) names.insert(k.substr(0, k.find(' ')));
  ASSERT_LT(names.size(), by_key.size());  // some op has several shapes to fold
  const std::string folded = prof.report(1.0);
  EXPECT_EQ(std::count(folded.begin(), folded.end(), '\n'), int64_t(names.size()) + 3) << folded;
  for (const std::string& op : names)
    EXPECT_NE(folded.find("  " + op + " "), std::string::npos) << op;

  // Disabled: calls pass through untimed.
  prof.set_enabled(false);
  step(ops, c, w1, B, T);
  int64_t after = 0;
  for (const auto& r : prof.rows()) after += r.calls;
  EXPECT_EQ(after, calls);
}

// Marks the caller holds stay valid across the profiler's own, and clearing
// settles the profiler's spans before the backend recycles them.
TEST(OpProfiler, ClearMarksKeepsCollectedTimes) {
  CpuOps ops;
  OpProfiler prof(ops);
  prof.set_enabled(true);
  Tensor t = ops.alloc(DType::f32, 1 << 16);
  const int a = ops.mark();
  ops.zero(t);
  ops.zero(t);
  const int b = ops.mark();
  EXPECT_GE(ops.seconds(a, b), 0);
  ops.clear_marks();
  ops.zero(t);
  const auto rows = prof.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key, "zero 65536");
  EXPECT_EQ(rows[0].calls, 3);
  EXPECT_DOUBLE_EQ(rows[0].bytes, 3.0 * 4 * 65536);
  ops.free(t);
}

// The profiler unhooks itself when it goes: the Ops outlives it safely.
TEST(OpProfiler, UnhooksWhenDestroyed) {
  CpuOps ops;
  Tensor t = ops.alloc(DType::f32, 8);
  {
    OpProfiler prof(ops);
    prof.set_enabled(true);
    ops.zero(t);
    EXPECT_EQ(prof.rows().size(), 1u);
  }
  ops.zero(t);  // would touch the destroyed profiler if it were still hooked
  ops.clear_marks();
  ops.free(t);
}

}  // namespace
}  // namespace fsdp
