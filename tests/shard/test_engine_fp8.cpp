// The FP8 weight all-gather (EngineOptions::fp8_gather): each rank casts its
// slice of a block linear to E4M3 with a scale agreed over the shard group,
// and the gather moves those codes. The codes must be exactly what casting
// the whole f32 weight gives, so training is bit for bit the run in which
// the model casts the gathered weight itself.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "comm/process_groups.h"
#include "shard/memory_plan.h"
#include "tests/shard/engine_harness.h"

namespace fsdp {
namespace {

using testing::EngineRun;

constexpr int kB = 2, kT = 12, kAccum = 2;

EngineOptions casting_gathered_weights() {
  EngineOptions eo;
  eo.fp8_gather = false;
  return eo;
}

TEST(FsdpFp8Gather, TrainsBitForBitAsCastingTheGatheredWeight) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig c = testing::engine_test_config();
  const int rank = g.world->rank(), world = g.world->size();
  EngineRun cast(c, *g.shard, nullptr, rank, world, kB, kT, kAccum, casting_gathered_weights(),
                 true);
  EngineRun gathered(c, *g.shard, nullptr, rank, world, kB, kT, kAccum, {}, true);
  EngineRun fp32(c, *g.shard, nullptr, rank, world, kB, kT, kAccum);
  ASSERT_FALSE(cast.engine.fp8_gather());
  ASSERT_TRUE(gathered.engine.fp8_gather());
  ASSERT_FALSE(fp32.engine.fp8_gather());
  // No clipping: the gradient norm sums each rank's shard in layout order,
  // and the segmented layout's order differs, so a clipped step would differ
  // in the last bit (and then everywhere).
  OptimizerConfig adam = EngineRun::adam();
  adam.adamw.grad_clip = 0;
  for (int s = 0; s < 8; ++s) {
    for (EngineRun* r : {&cast, &gathered, &fp32}) {
      r->forward_backward(s, *g.world);
      r->engine.step(adam, 1e-2f);
    }
  }
  EXPECT_EQ(gathered.losses, cast.losses);
  for (int u = 0; u < cast.engine.num_units(); ++u) {
    // The layouts differ (segments), so compare parameter by parameter.
    const auto a = gathered.full_master(u, *g.shard), b = cast.full_master(u, *g.shard);
    const UnitLayout &la = gathered.engine.layout(u), &lb = cast.engine.layout(u);
    for (size_t p = 0; p < la.offsets.size(); ++p)
      for (int64_t i = 0; i < la.sizes[p]; ++i)
        ASSERT_EQ(a[size_t(la.offsets[p] + i)], b[size_t(lb.offsets[p] + i)])
            << "unit " << u << " parameter " << p << " element " << i;
  }
  EXPECT_LT(gathered.losses.back(), gathered.losses.front() - 0.05) << "training did not move";
  EXPECT_NE(gathered.losses, fp32.losses) << "the FP8 path did not run";
}

// After a step, with weights kept gathered: each linear's codes and scale are
// the whole f32 master cast at once (the reference quantize_fp8), on every
// rank, whatever slice of it the rank holds; a packed run (Wq|Wk|Wv, W1|W3) is one
// matrix, cast with one scale, and each of its parameters reads its part.
TEST(FsdpFp8Gather, CodesAreTheWholeWeightCastWithOneScale) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig c = testing::engine_test_config();
  EngineOptions keep;
  keep.reshard_after_forward = false;
  EngineRun run(c, *g.shard, nullptr, g.world->rank(), g.world->size(), kB, kT, 1, keep, true);
  for (int s = 0; s < 3; ++s) run.step(s, *g.world, 1e-2f);
  run.engine.forward_only();  // leaves every unit gathered
  const auto units = model_units(c);
  int checked = 0;
  for (int u = 0; u < run.engine.num_units(); ++u) {
    const auto full = run.full_master(u, *g.shard);
    const UnitLayout& l = run.engine.layout(u);
    const auto& params = units[size_t(u)].params;
    for (int p = 0; p < int(params.size()); ++p) {
      if (!params[size_t(p)].fp8) {
        EXPECT_EQ(run.engine.weight_fp8(u, p).codes.numel, 0);
        EXPECT_NO_THROW(run.engine.weight(u, p));
        continue;
      }
      EXPECT_THROW(run.engine.weight(u, p), Error);  // no compute-dtype copy exists
      if (params[size_t(p)].packed) continue;        // checked with the first of its run
      int count = 1;
      while (p + count < int(params.size()) && params[size_t(p + count)].packed) ++count;
      const std::string name = params[size_t(p)].name + "+" + std::to_string(count - 1);
      const Fp8Tensor got = run.engine.weight_fp8(u, p, count);
      const int64_t n = l.offsets[p + count - 1] + l.sizes[p + count - 1] - l.offsets[p];
      ASSERT_EQ(got.codes.numel, n) << name;
      std::vector<float> w(full.begin() + l.offsets[p], full.begin() + l.offsets[p] + n);
      std::vector<uint8_t> want(w.size());
      float want_scale = 0;
      run.ops.quantize_fp8(Tensor{want.data(), DType::u8, n}, Tensor{&want_scale, DType::f32, 1},
                           Tensor{w.data(), DType::f32, n}, Fp8::e4m3);
      EXPECT_EQ(std::memcmp(got.codes.data, want.data(), want.size()), 0) << name;
      EXPECT_EQ(got.scale_inv.f32()[0], want_scale) << name;
      EXPECT_NE(want_scale, 1.0f);
      for (int q = p; q < p + count; ++q) {  // each parameter of the run: its part, the same scale
        const Fp8Tensor part = run.engine.weight_fp8(u, q);
        EXPECT_EQ(part.codes.numel, l.stored[q]) << params[size_t(q)].name;
        EXPECT_EQ(static_cast<uint8_t*>(part.codes.data),
                  static_cast<uint8_t*>(got.codes.data) + (l.offsets[q] - l.offsets[p]))
            << params[size_t(q)].name;
        EXPECT_EQ(part.scale_inv.data, got.scale_inv.data) << params[size_t(q)].name;
      }
      ++checked;
    }
  }
  // Per block: q|k|v, o, W1|W3, W2.
  EXPECT_EQ(checked, 4 * c.n_layer);
  // A run that is not packed, or that leaves its segment, is refused.
  EXPECT_THROW(run.engine.weight_fp8(1, 6, 2), Error);  // wo, mlp_norm
  EXPECT_THROW(run.engine.weight_fp8(1, 1, 4), Error);  // wq, wk, wv, q_norm
  EXPECT_THROW(run.engine.weight_fp8(1, 9, 2), Error);  // w3, w2: one segment, w2 not packed
}

// Passes every call through, noting each all-gather's element type and count.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(Communicator& inner) : inner_(inner) {}
  std::map<DType, int64_t> gathered;  // elements per rank, by type

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* backend_name() const override { return inner_.backend_name(); }
  void progress() override { inner_.progress(); }

 private:
  WorkHandle do_all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    gathered[dtype] += int64_t(count);
    return inner_.all_gather(send, recv, count, dtype);
  }
  WorkHandle do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                               ReduceOp op) override {
    return inner_.reduce_scatter(send, recv, count, dtype, op);
  }
  WorkHandle do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
    return inner_.all_reduce(buf, count, dtype, op);
  }
  WorkHandle do_broadcast(void* buf, size_t count, DType dtype, int root) override {
    return inner_.broadcast(buf, count, dtype, root);
  }
  WorkHandle do_barrier() override { return inner_.barrier(); }
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    return inner_.split(color, key);
  }

  Communicator& inner_;
};

// One micro-batch: each gather of a block sends its linears as 1-byte codes
// and only its gains in the compute dtype; the embedding and head as before.
TEST(FsdpFp8Gather, GathersMoveCodesForTheLinears) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  if (g.shard->size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  const ModelConfig c = testing::engine_test_config();
  RecordingCommunicator rec(*g.shard);
  EngineOptions eo;
  eo.record_trace = true;
  EngineRun run(c, rec, nullptr, g.world->rank(), g.world->size(), kB, kT, 1, eo, true);
  run.forward_backward(0, *g.world);
  std::map<DType, int64_t> want;
  int block_gathers = 0;
  for (const std::string& e : run.engine.trace()) {
    if (e.rfind("gather ", 0) != 0) continue;
    const int u = std::stoi(e.substr(7));
    for (const Segment& s : run.engine.layout(u).segments)
      want[s.fp8 ? DType::u8 : DType::f32] += s.shard;
    block_gathers += u > 0 && u <= c.n_layer;
  }
  EXPECT_EQ(block_gathers, 2 * c.n_layer);  // forward, and again for backward
  EXPECT_EQ(rec.gathered, want);
  // The linears are most of a block: most of what moves is codes.
  EXPECT_GT(rec.gathered[DType::u8], 2 * rec.gathered[DType::f32]);
}

TEST(FsdpFp8Gather, MeasuredMatchesThePlan) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig cfg = model_preset("tiny");
  const int n = g.shard->size();
  for (bool direct : {true, false}) {
    EngineOptions eo;
    eo.direct_when_unsharded = direct;
    EngineRun run(cfg, *g.shard, nullptr, g.world->rank(), g.world->size(), 2, 16, 1, eo, true);
    const MemoryPlan p =
        plan_memory(cfg, {.shard_size = n, .batch = 2, .seq_len = 16, .fp8 = true, .engine = eo});
    EXPECT_EQ(run.engine.persistent_bytes(), p.persistent()) << direct;
    EXPECT_EQ(run.engine.buffer_bytes(), p.buffers()) << direct;
    EXPECT_EQ(run.model.activation_bytes(), p.activations) << direct;
  }
}

// gpt-350m in bf16 on 8 ranks: a block's send copy and gather buffer take
// half of bf16's bytes (its gains stay bf16); the embedding's do not change.
TEST(FsdpFp8Gather, PlanHalvesTheBlocksGatheredBytes) {
  auto plan = [](int layers, bool fp8) {
    ModelConfig c = model_preset("gpt-350m");
    c.n_layer = layers;
    // Without resharding every block has its own buffer, so they count.
    return plan_memory(c, {.shard_size = 8,
                           .compute = DType::bf16,
                           .batch = 8,
                           .seq_len = 1024,
                           .fp8 = fp8,
                           .engine = {.reshard_after_forward = false}});
  };
  auto blocks = [&](bool fp8, int64_t MemoryPlan::*part) {
    return double(plan(24, fp8).*part - plan(12, fp8).*part);  // 12 blocks' worth
  };
  for (auto part : {&MemoryPlan::send_copy, &MemoryPlan::gather_buffers}) {
    const double ratio = blocks(true, part) / blocks(false, part);
    EXPECT_GT(ratio, 0.5);
    EXPECT_LT(ratio, 0.501);
    EXPECT_EQ(plan(24, true).*part - blocks(true, part) * 2,
              plan(24, false).*part - blocks(false, part) * 2);
  }
  EXPECT_EQ(plan(24, true).master, plan(24, false).master);
  EXPECT_EQ(plan(24, true).moments, plan(24, false).moments);
}

}  // namespace
}  // namespace fsdp
