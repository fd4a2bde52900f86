// The engine's schedule and footprint: prefetches are issued before the
// compute they hide behind, gradients match an unsharded model, and per-rank
// model state shrinks as 1/N.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "comm/process_groups.h"
#include "model/params.h"
#include "shard/memory_plan.h"
#include "tests/model/full_weights.h"
#include "tests/shard/engine_harness.h"

namespace fsdp {
namespace {

using testing::EngineRun;

int index_of(const std::vector<std::string>& trace, const std::string& event, int from = 0) {
  auto it = std::find(trace.begin() + from, trace.end(), event);
  return it == trace.end() ? -1 : int(it - trace.begin());
}

TEST(FsdpSchedule, PrefetchIsIssuedBeforeTheCurrentUnitComputes) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  EngineOptions eo;
  eo.record_trace = true;
  eo.direct_when_unsharded = false;  // one rank would compute in place, gathering nothing
  EngineRun run(testing::engine_test_config(), *g.shard, nullptr, g.world->rank(), g.world->size(),
                1, 8, 1, eo);
  run.step(0, *g.world);
  const auto& tr = run.engine.trace();
  const int U = run.engine.num_units();
  const int bwd_start = index_of(tr, "backward " + std::to_string(U - 1));
  ASSERT_GT(bwd_start, 0);
  for (int u = 0; u + 1 < U; ++u) {
    // Forward: unit u+1's all-gather is in flight while u computes.
    const int gather_next = index_of(tr, "gather " + std::to_string(u + 1));
    const int compute = index_of(tr, "forward " + std::to_string(u));
    ASSERT_GE(gather_next, 0);
    EXPECT_LT(gather_next, compute) << "forward of unit " << u;
  }
  for (int u = U - 2; u >= 1; --u) {
    // Backward: blocks were resharded after forward, so u-1 is re-gathered
    // while u computes (unit 0 stays gathered for the tied head).
    const int compute = index_of(tr, "backward " + std::to_string(u), bwd_start);
    const int gather_prev = index_of(tr, "gather " + std::to_string(u - 1), bwd_start);
    if (u - 1 == 0) continue;
    ASSERT_GE(gather_prev, 0) << "unit " << u - 1 << " was not re-gathered";
    EXPECT_LT(gather_prev, compute) << "backward of unit " << u;
    // And its gradients leave (reduce-scatter) right after it computes.
    EXPECT_EQ(tr[size_t(compute) + 1], "reduce " + std::to_string(u));
  }
}

// Hybrid sharding: on the step's last micro-batch each unit's all-reduce
// across replicas starts as soon as its reduce-scatter has landed, under the
// backward of the units before it; earlier micro-batches issue none.
TEST(FsdpSchedule, ReplicaAllReduceOverlapsTheLastBackward) {
  ProcessGroups g = make_process_groups(Backend::mpi, 1);
  if (g.world->size() < 2) GTEST_SKIP() << "needs 2+ ranks for replicas";
  EngineOptions eo;
  eo.record_trace = true;
  const int accum = 2;
  EngineRun run(testing::engine_test_config(), *g.shard, g.replicate.get(), g.world->rank(),
                g.world->size(), 1, 8, accum, eo);
  run.step(0, *g.world);
  const auto& tr = run.engine.trace();
  const int U = run.engine.num_units();
  const int second = index_of(tr, "forward 0", index_of(tr, "forward 0") + 1);  // the last one
  ASSERT_GT(second, 0);
  EXPECT_EQ(index_of(tr, "replica " + std::to_string(U - 1)),
            index_of(tr, "replica " + std::to_string(U - 1), second))
      << "a replica all-reduce was issued during a micro-batch that is not the last";
  const int head_reduce = index_of(tr, "replica " + std::to_string(U - 1), second);
  const int first_backward = index_of(tr, "backward 0", second);
  ASSERT_GE(head_reduce, 0);
  EXPECT_LT(head_reduce, first_backward) << "the head's all-reduce waited for the whole backward";
  const int block_reduce = index_of(tr, "replica " + std::to_string(U - 2), second);
  EXPECT_LT(block_reduce, first_backward) << "the last block's all-reduce waited";
  for (int u = 0; u < U; ++u)
    EXPECT_GE(index_of(tr, "replica " + std::to_string(u), second), 0) << "unit " << u;
}

// Gradient shards after one micro-batch equal the gradient of an unsharded
// model over the same global batch: this checks the engine's own arithmetic
// (padding, reduce-scatter, accumulation, averaging), which the rank-count
// equivalence tests cannot see because both sides use the engine.
TEST(FsdpSchedule, GradientShardsEqualTheUnshardedGradient) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig cfg = testing::engine_test_config();
  const int B = 2, T = 8, accum = 2, world = g.world->size(), rank = g.world->rank();
  EngineRun run(cfg, *g.shard, nullptr, rank, world, B, T, accum);
  const double G = double(B) * accum * world;

  std::vector<int32_t> in(size_t(B) * T), tgt(in.size());
  auto fill = [&](int64_t first_seq, int rows) {
    for (int b = 0; b < rows; ++b)
      for (int t = 0; t < T; ++t) {
        in[size_t(b) * T + t] = testing::synthetic_token(0, first_seq + b, t, cfg.vocab_size);
        tgt[size_t(b) * T + t] = testing::synthetic_token(0, first_seq + b, t + 1, cfg.vocab_size);
      }
  };
  for (int m = 0; m < accum; ++m) {
    fill((int64_t(m) * world + rank) * B, B);
    run.model.set_batch(in.data(), tgt.data(), float(1.0 / (G * T)));
    run.engine.forward_backward();
  }

  // The unsharded reference sees every sequence of the global batch.
  CpuOps ops;
  Transformer ref(cfg, ops, B, T);
  testing::FullWeights w(ref.units(), EngineOptions{}.seed);
  for (int64_t first = 0; first < int64_t(G); first += B) {
    fill(first, B);
    ref.set_batch(in.data(), tgt.data(), float(1.0 / (G * T)));
    for (int u = 0; u < ref.num_units(); ++u) ref.forward(u, w, true);
    for (int u = ref.num_units() - 1; u >= 0; --u) ref.backward(u, w);
  }
  for (int u = 0; u < run.engine.num_units(); ++u) {
    const UnitLayout& l = run.engine.layout(u);
    const float* shard = run.engine.grad_shard(u).f32();
    double num = 0, den = 0;
    for (int64_t i = 0; i < l.shard; ++i) {
      const int64_t flat = int64_t(rank) * l.shard + i;
      const double want = flat < l.numel ? w.unit_grads(u)[size_t(flat)] : 0.0;  // padding: 0
      num += (shard[i] - want) * (shard[i] - want);
      den += want * want;
    }
    EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), 1e-5) << "unit " << u;
  }
}

// --debug names the first unit whose output is not finite. Every rank holds
// the same gathered weights, so every rank throws at the same unit.
TEST(FsdpDebug, FirstNonFiniteUnitIsNamed) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  EngineOptions eo;
  eo.check_finite = true;
  EngineRun run(testing::engine_test_config(), *g.shard, nullptr, g.world->rank(), g.world->size(),
                1, 8, 1, eo);
  run.step(0, *g.world);  // healthy weights: no complaint
  // Poison one element of block 1 (unit 2) on the rank that owns it.
  const UnitLayout& l = run.engine.layout(2);
  if (g.shard->rank() == 0) run.engine.master(2).f32()[0] = std::nanf("");
  (void)l;
  run.engine.refresh_send_buffers();
  try {
    run.step(1, *g.world);
    ADD_FAILURE() << "a NaN weight went unnoticed";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("forward of unit 'blocks.1'"), std::string::npos) << m;
    EXPECT_NE(m.find("step 2, micro-batch 0"), std::string::npos) << m;
  }
}

TEST(FsdpMemory, PlannedModelStateShrinksAsOneOverN) {
  const ModelConfig c = model_preset("gpt-350m");
  // gpt-350m in bf16 on micro-batches of 8 x 1024, sharded n ways.
  auto plan = [&](int n, EngineOptions engine = {}) {
    return plan_memory(c, {n, DType::bf16, 8, 1024, Recompute::none, false, engine});
  };
  const MemoryPlan one = plan(1);
  // fp32 master + grads + two moments = 16 bytes per parameter, plus the bf16
  // copy that the all-gather sends: 18 bytes per parameter on one rank.
  EXPECT_NEAR(double(one.persistent()) / num_params(c), 18.0, 0.01);
  // One rank computes in place: no gather or gradient buffers at all.
  EXPECT_EQ(one.buffers(), 0);
  // ... unless the collective path is kept (--single-rank-direct false): then
  // the same buffers as two ranks, whose gradient buffers add half a unit
  // less for the reduce-scatter output.
  const MemoryPlan kept = plan(1, {.direct_when_unsharded = false});
  EXPECT_EQ(kept.persistent(), one.persistent());
  EXPECT_GT(kept.gather_buffers, 0);
  const MemoryPlan two = plan(2);
  for (int n : {2, 4, 8, 32}) {
    const MemoryPlan p = plan(n);
    std::printf(
        "[ plan ] gpt-350m, %2d ranks, bf16, B=8 T=1024 (MiB): params %.1f grads %.1f "
        "adamw %.1f send %.1f | gather %.1f grad-buffers %.1f | activations %.1f\n",
        n, p.master / 1048576.0, p.grads / 1048576.0, p.moments / 1048576.0,
        p.send_copy / 1048576.0, p.gather_buffers / 1048576.0, p.grad_buffers / 1048576.0,
        p.activations / 1048576.0);
    const double ratio = double(p.persistent()) / double(one.persistent());
    EXPECT_NEAR(ratio * n, 1.0, 1e-3) << n << " ranks";
    // Buffers hold full units, so they do not shrink (padding to N equal
    // shards adds at most a few alignment blocks); they stay four units' worth.
    EXPECT_LE(p.gather_buffers, two.gather_buffers + 4 * n * kShardAlign * 2);
    EXPECT_GE(p.gather_buffers, two.gather_buffers);
    EXPECT_EQ(p.activations, one.activations);
  }
  // Keeping weights after forward costs every unit's buffer.
  const MemoryPlan keep = plan(32, {.reshard_after_forward = false});
  EXPECT_GT(keep.gather_buffers, 3 * plan(32).gather_buffers);
}

// A one-block model leaves the second block slot unused: nothing is
// allocated for it, and a step runs (it once dereferenced the slot's absent
// unit).
TEST(FsdpMemory, OneBlockModelLeavesASlotEmpty) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layer = 1;
  for (bool fp8 : {false, true}) {
    EngineRun run(cfg, *g.shard, nullptr, g.world->rank(), g.world->size(), 2, 16, 1, {}, fp8);
    const MemoryPlan p =
        plan_memory(cfg, {.shard_size = g.shard->size(), .batch = 2, .seq_len = 16, .fp8 = fp8});
    EXPECT_EQ(run.engine.persistent_bytes(), p.persistent()) << fp8;
    EXPECT_EQ(run.engine.buffer_bytes(), p.buffers()) << fp8;
    const double first = run.step(0, *g.world, 1e-2f);
    EXPECT_LT(run.step(0, *g.world, 1e-2f), first) << fp8;  // the same batch again: learned
  }
}

TEST(FsdpMemory, MeasuredMatchesThePlanAndShrinks) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig cfg = model_preset("tiny");
  EngineRun run(cfg, *g.shard, nullptr, g.world->rank(), g.world->size(), 2, 16, 1);
  const MemoryPlan p = plan_memory(cfg, {.shard_size = g.shard->size(), .batch = 2, .seq_len = 16});
  EXPECT_EQ(run.engine.persistent_bytes(), p.persistent());
  EXPECT_EQ(run.engine.buffer_bytes(), p.buffers());
  EXPECT_EQ(run.model.activation_bytes(), p.activations);
  const double per_param = double(run.engine.persistent_bytes()) / num_params(cfg);
  // 16 bytes per parameter split N ways, plus at most one alignment block per unit.
  const int n = g.shard->size();
  EXPECT_GE(per_param, 16.0 / n);
  EXPECT_LE(per_param, 16.0 / n * 1.05 + 16.0 * kShardAlign * (cfg.n_layer + 2) / num_params(cfg));
  // The collective path kept on one rank (--single-rank-direct false) is planned too.
  EngineOptions eo;
  eo.direct_when_unsharded = false;
  EngineRun kept(cfg, *g.shard, nullptr, g.world->rank(), g.world->size(), 2, 16, 1, eo);
  EXPECT_EQ(kept.engine.buffer_bytes(),
            plan_memory(cfg, {.shard_size = n, .batch = 2, .seq_len = 16, .engine = eo}).buffers());
  EXPECT_GT(kept.engine.buffer_bytes(), 0);
}

// --eval-only's engine (issue 65): a forward-only model's engine holds the
// weights and one forward's activations, no gradients, moments or their
// buffers, exactly as its plan says; its losses are bitwise a training
// model's forward on the same weights; the training entry points refuse.
TEST(FsdpMemory, ForwardOnlyHoldsTheWeightsAlone) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig cfg = testing::engine_test_config();
  const int n = g.shard->size(), rank = g.world->rank(), size = g.world->size();
  for (bool fp8 : {false, true})
    for (bool direct : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "fp8 " << fp8 << " direct " << direct);
      EngineOptions eo;
      eo.direct_when_unsharded = direct;
      EngineRun train(cfg, *g.shard, nullptr, rank, size, 2, 16, 1, eo, fp8);
      EngineRun eval(cfg, *g.shard, nullptr, rank, size, 2, 16, 1, eo, fp8, ModelUse::forward_only);
      const PlanSettings ps{.shard_size = n, .batch = 2, .seq_len = 16, .fp8 = fp8, .engine = eo};
      PlanSettings eval_ps = ps;
      eval_ps.use = ModelUse::forward_only;
      const MemoryPlan p = plan_memory(cfg, eval_ps), t = plan_memory(cfg, ps);
      EXPECT_EQ(eval.engine.persistent_bytes(), p.persistent());
      EXPECT_EQ(eval.engine.buffer_bytes(), p.buffers());
      EXPECT_EQ(eval.model.activation_bytes(), p.activations);
      EXPECT_EQ(p.grads + p.moments + p.grad_buffers + p.optimizer_buffers, 0);
      EXPECT_EQ(p.persistent(), t.persistent() - t.grads - t.moments);
      EXPECT_EQ(p.gather_buffers, t.gather_buffers);
      EXPECT_LT(p.activations, t.activations);
      EXPECT_FALSE(eval.engine.trains());
      EXPECT_EQ(eval.engine.exp_avg(1).numel, 0);
      for (int s = 0; s < 3; ++s)
        EXPECT_EQ(eval.forward_only(s, *g.world), train.forward_only(s, *g.world)) << s;
      EXPECT_THROW(eval.engine.forward_backward(), Error);
      EXPECT_THROW(eval.engine.measure_gradients(), Error);
      EXPECT_THROW(eval.engine.discard_gradients(), Error);
    }
}

}  // namespace
}  // namespace fsdp
