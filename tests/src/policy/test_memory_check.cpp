// The memory check of set-up (issue 9, case 4): the pure verdict on a plan
// and a free figure, how free host memory is read (a fake /proc and /sys),
// and the plan whose cost no longer grows with n_layer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "model/config.h"
#include "model/cpu/cpu_ops.h"
#include "model/cpu/host_memory.h"
#include "model/params.h"
#include "src/policy/memory_check.h"

namespace fsdp {
namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

constexpr int64_t GiB = int64_t{1} << 30;

MemoryPlan plan_of(int64_t state, int64_t buffers, int64_t activations) {
  MemoryPlan p;
  p.master = state;
  p.gather_buffers = buffers;
  p.activations = activations;
  return p;
}

TEST(MemoryCheck, FitsWithinNinetyPercentOfFree) {
  const MemoryPlan p = plan_of(5 * GiB, 2 * GiB, 2 * GiB);          // 9 GiB
  EXPECT_EQ(memory_shortfall(p, 10 * GiB, "host memory", {}), "");  // exactly 90%
  EXPECT_NE(memory_shortfall(p, 10 * GiB - 16, "host memory", {}), "");
  EXPECT_NE(memory_shortfall(p, 0, "host memory", {}), "");
}

// --batch-size 0: the largest micro-batch whose plan fits, found by bisection.
TEST(MemoryCheck, AutoBatchIsTheLargestThatFits) {
  // 4 GiB of model state and 300 MiB of activations per sequence in 40 GiB
  // free: 36 GiB usable, so (36 - 4) GiB / 300 MiB = 109.2 -> 109 sequences.
  auto plan_for = [](int b) { return plan_of(4 * GiB, 0, int64_t(b) * 300 * (1 << 20)); };
  const int b = largest_batch_that_fits(plan_for, 40 * GiB, {});
  EXPECT_EQ(b, 109);
  EXPECT_EQ(memory_shortfall(plan_for(b), 40 * GiB, "", {}), "");
  EXPECT_NE(memory_shortfall(plan_for(b + 1), 40 * GiB, "", {}), "");
  // Two ranks sharing the memory halve what each may plan.
  MemorySettings shared;
  shared.ranks_sharing = 2;
  EXPECT_EQ(largest_batch_that_fits(plan_for, 40 * GiB, shared), 47);  // (18 - 4) / 0.293
  // Capped, and 0 when not even one sequence fits.
  EXPECT_EQ(largest_batch_that_fits(plan_for, 4096 * GiB, {}), kMaxAutoBatch);
  EXPECT_EQ(largest_batch_that_fits(plan_for, 4 * GiB, {}), 0);
}

TEST(MemoryCheck, MessageGivesBothNumbersAndWhatToChange) {
  MemorySettings s;
  s.shard_size = 2;
  s.world_size = 4;
  s.batch_size = 8;
  const MemoryPlan p = plan_of(6 * GiB, GiB, 3 * GiB);
  const std::string m = memory_shortfall(p, 8 * GiB, "GPU memory", s);
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.rfind("the memory plan needs 10.00 GiB per rank", 0), 0u) << m;
  EXPECT_HAS(m, "GPU memory has 8.00 GiB free");
  EXPECT_HAS(m, "90% (7.20 GiB)");
  EXPECT_HAS(m, "model state 6.00 GiB, sharded 2 ways");
  EXPECT_HAS(m, "activations 3.00 GiB");
  // Model state dominates: sharding advice first, then recomputation.
  EXPECT_HAS(m,
             "use a larger --shard-group-size (now 2 of 4 ranks), more ranks, "
             "--recompute mlp|block, a smaller --batch-size (now 8");
}

TEST(MemoryCheck, ActivationAdviceFirstWhenTheyDominate) {
  MemorySettings s;
  s.recompute = Recompute::mlp;
  const std::string m = memory_shortfall(plan_of(GiB, 0, 20 * GiB), GiB, "host memory", s);
  EXPECT_HAS(m, "use --recompute block, more ranks or a smaller model");
  s.recompute = Recompute::block;
  s.batch_size = 4;
  EXPECT_HAS(memory_shortfall(plan_of(GiB, 0, 20 * GiB), GiB, "host memory", s),
             "use a smaller --batch-size (now 4");
}

// --eval-only recomputes nothing and accumulates no steps: neither is advised.
TEST(MemoryCheck, EvaluationIsNotToldToRecomputeOrAccumulate) {
  MemorySettings s;
  s.batch_size = 8;
  s.trains = false;
  const std::string m = memory_shortfall(plan_of(GiB, 0, 20 * GiB), GiB, "host memory", s);
  EXPECT_HAS(m, "use a smaller --batch-size (now 8), more ranks or a smaller model");
  EXPECT_EQ(m.find("--recompute"), std::string::npos) << m;
  EXPECT_EQ(m.find("--grad-accum"), std::string::npos) << m;
}

TEST(MemoryCheck, RanksOnOneNodeShareItsMemory) {
  MemorySettings s;
  s.ranks_sharing = 4;
  const MemoryPlan p = plan_of(2 * GiB, 0, 0);
  EXPECT_EQ(memory_shortfall(p, 9 * GiB, "host memory", {}), "");
  const std::string m = memory_shortfall(p, 8 * GiB, "host memory", s);
  EXPECT_HAS(m, "2.00 GiB per rank, 8.00 GiB for the 4 ranks that share this node's memory");
  EXPECT_HAS(m, "more ranks");
  // On the host, more ranks on the node share the same memory: only more
  // nodes help.
  s.node_shared = true;
  const std::string host = memory_shortfall(p, 8 * GiB, "host memory", s);
  EXPECT_HAS(host, "ranks on more nodes");
  EXPECT_EQ(host.find("more ranks"), std::string::npos) << host;
}

TEST(MemoryCheck, SaturatedPlanIsRefusedNotOverflowed) {
  ModelConfig c = model_preset("tiny");
  const MemoryPlan p = plan_memory(c, {.batch = 1 << 30, .seq_len = 1 << 30});
  EXPECT_EQ(p.activations, kPlanSaturation);
  EXPECT_GT(p.total(), 0);
  MemorySettings s;
  s.ranks_sharing = 64;
  EXPECT_NE(memory_shortfall(p, int64_t{1} << 62, "host memory", s), "");
}

// ---- free host memory -----------------------------------------------------

TEST(HostMemory, ParsesMemAvailableAndCgroupHeadroom) {
  EXPECT_EQ(meminfo_available_bytes("MemTotal: 100 kB\nMemFree: 5 kB\nMemAvailable:    2048 kB\n"),
            2048 * 1024);
  EXPECT_EQ(meminfo_available_bytes("MemTotal: 100 kB\n"), std::nullopt);
  EXPECT_EQ(meminfo_available_bytes("MemAvailable: lots\n"), std::nullopt);
  EXPECT_EQ(cgroup_headroom_bytes("1000\n", "400\n"), 600);
  EXPECT_EQ(cgroup_headroom_bytes("1000\n", "4000\n"), 0);
  EXPECT_EQ(cgroup_headroom_bytes("max\n", "400\n"), std::nullopt);
  EXPECT_EQ(cgroup_headroom_bytes("9223372036854771712\n", "400\n"), std::nullopt);
  EXPECT_EQ(cgroup_headroom_bytes("", "400"), std::nullopt);
}

class FakeRoot {
 public:
  FakeRoot() {
    root_ = std::filesystem::temp_directory_path() /
            ("fsdp_host_memory_" + std::to_string(::getpid()) + "_" + std::to_string(next_++));
    std::filesystem::create_directories(root_);
  }
  ~FakeRoot() { std::filesystem::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) const {
    const auto path = root_ / rel;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::string str() const { return root_.string(); }

 private:
  static inline int next_ = 0;
  std::filesystem::path root_;
};

TEST(HostMemory, TakesTheLowestOfMemAvailableAndEveryCgroupLevel) {
  {  // cgroup v2: the job's parent limit binds tighter than the step's own
    FakeRoot r;
    r.write("proc/meminfo", "MemAvailable: 10485760 kB\n");  // 10 GiB
    r.write("proc/self/cgroup", "0::/job/step\n");
    r.write("sys/fs/cgroup/job/step/memory.max", "max\n");
    r.write("sys/fs/cgroup/job/step/memory.current", "100\n");
    r.write("sys/fs/cgroup/job/memory.max", std::to_string(3 * GiB) + "\n");
    r.write("sys/fs/cgroup/job/memory.current", std::to_string(GiB) + "\n");
    EXPECT_EQ(host_free_memory_bytes(r.str()), 2 * GiB);
  }
  {  // cgroup v1 (hybrid), the process's path not visible: the root's limit
    FakeRoot r;
    r.write("proc/meminfo", "MemAvailable: 10485760 kB\n");
    r.write("proc/self/cgroup", "4:memory:/not/here\n0::/\n");
    r.write("sys/fs/cgroup/memory/memory.limit_in_bytes", std::to_string(5 * GiB));
    r.write("sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(4 * GiB));
    EXPECT_EQ(host_free_memory_bytes(r.str()), GiB);
  }
  {  // no limit anywhere: MemAvailable
    FakeRoot r;
    r.write("proc/meminfo", "MemAvailable: 1024 kB\n");
    r.write("proc/self/cgroup", "0::/\n");
    r.write("sys/fs/cgroup/memory.max", "max\n");
    r.write("sys/fs/cgroup/memory.current", "5\n");
    EXPECT_EQ(host_free_memory_bytes(r.str()), 1024 * 1024);
  }
  FakeRoot empty;
  EXPECT_THROW(host_free_memory_bytes(empty.str()), Error);
  // This machine: something positive, through the CPU backend.
  EXPECT_GT(CpuOps().free_memory_bytes(), 0);
}

// ---- the plan -------------------------------------------------------------

// The plan as it was computed before: every unit laid out and mapped to the
// engine's slots. plan_memory now lays out one block for all of them.
// fp8: block linears gathered as 1-byte codes, each matrix with an f32 amax
// and inverse scale.
MemoryPlan enumerated_plan(const ModelConfig& c, int n, DType compute, bool reshard, DType reduce,
                           bool fp8) {
  std::vector<UnitLayout> layouts;
  const std::vector<UnitSpec> units = model_units(c);
  for (const auto& u : units) layouts.push_back(make_layout(u, n, fp8));
  MemoryPlan m;
  const int64_t es = dtype_size(compute);
  for (size_t u = 0; u < layouts.size(); ++u) {
    const UnitLayout& l = layouts[u];
    m.master += 4 * l.shard;
    m.grads += 4 * l.shard;
    m.moments += 8 * l.shard;
    for (const Segment& g : l.segments)
      if (g.fp8 || compute != DType::f32) m.send_copy += (g.fp8 ? 1 : es) * g.shard;
    // an amax and a scale slot per matrix: a packed run (q|k|v) is one
    for (size_t p = 0; p < l.segment_of.size(); ++p)
      if (l.segments[size_t(l.segment_of[p])].fp8 && !units[u].params[p].packed)
        m.send_copy += 4 * (1 + kFp8ScaleSlot);
  }
  if (n == 1) return m;  // one rank computes in its shards (no slots)
  const SlotPlan slots = plan_slots(layouts, reshard);
  for (size_t s = 0; s < slots.slot_elems.size(); ++s) {
    const int64_t e = slots.slot_elems[s];
    m.grad_buffers += int64_t(dtype_size(reduce)) * (e + e / n);
    // Units sharing a slot have the same segments.
    const UnitLayout* l = nullptr;
    for (size_t u = 0; u < layouts.size(); ++u)
      if (slots.slot_of_unit[u] == int(s)) l = &layouts[u];
    for (size_t g = 0; g < slots.segment_elems[s].size(); ++g)
      m.gather_buffers += (l->segments[g].fp8 ? 1 : es) * slots.segment_elems[s][g];
  }
  return m;
}

TEST(MemoryPlanShape, OneBlockStandsForAllOfThem) {
  for (bool tied : {true, false}) {
    for (int layers : {1, 2, 3, 5}) {
      ModelConfig c = model_preset("tiny");
      c.vocab_size = 300;
      c.tie_embeddings = tied;
      c.n_layer = layers;
      for (int n : {1, 3, 4}) {
        for (bool reshard : {true, false}) {
          for (auto [compute, fp8] : {std::pair{DType::f32, false},
                                      {DType::bf16, false},
                                      {DType::f32, true},
                                      {DType::bf16, true}}) {
            const MemoryPlan want = enumerated_plan(c, n, compute, reshard, compute, fp8);
            const MemoryPlan got = plan_memory(
                c, {.shard_size = n,
                    .compute = compute,
                    .batch = 2,
                    .seq_len = 16,
                    .fp8 = fp8,
                    .engine = {.reshard_after_forward = reshard, .reduce_dtype = compute}});
            SCOPED_TRACE(testing::Message()
                         << tied << " L=" << layers << " n=" << n << " " << reshard << " "
                         << dtype_size(compute) << " fp8 " << fp8);
            EXPECT_EQ(got.master, want.master);
            EXPECT_EQ(got.grads, want.grads);
            EXPECT_EQ(got.moments, want.moments);
            EXPECT_EQ(got.send_copy, want.send_copy);
            EXPECT_EQ(got.gather_buffers, want.gather_buffers);
            EXPECT_EQ(got.grad_buffers, want.grad_buffers);
          }
        }
      }
    }
  }
}

// Linear in the tokens but for the logits, which hold at most one head chunk
// (Transformer::kHeadRows rows): the saturation bound (tokens times one
// token's bytes) stays an upper bound.
TEST(MemoryPlanShape, ActivationsAreLinearInTokensButTheLogits) {
  const ModelConfig c = model_preset("gpt-125m");
  const int64_t chunk = Transformer::kHeadRows, logit_row = 2 * c.padded_vocab();
  for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block}) {
    const int64_t one = Transformer::activation_bytes_for(c, 1, 1, DType::bf16, r);
    EXPECT_EQ(Transformer::activation_bytes_for(c, 1, int(chunk), DType::bf16, r), chunk * one);
    const int64_t want = 8 * 1024 * one - (8 * 1024 - chunk) * logit_row;
    EXPECT_EQ(Transformer::activation_bytes_for(c, 8, 1024, DType::bf16, r), want);
    EXPECT_EQ(plan_memory(c, {4, DType::bf16, 8, 1024, r}).activations, want);
  }
}

// The issue's two cases: plans in the tens of GiB, computed without
// allocating them (a plan of 100000 layers lays out one).
TEST(MemoryPlanShape, TheIssuesModelsPlanBeyondThisMachine) {
  ModelConfig deep = model_preset("tiny");
  deep.n_layer = 100000;
  EXPECT_GT(plan_memory(deep, {.batch = 8, .seq_len = 64}).total(), 64 * GiB);
  ModelConfig wide = model_preset("tiny");
  wide.d_model = 65536;
  validate_model(wide);
  EXPECT_GT(plan_memory(wide, {.batch = 8, .seq_len = 64}).total(), 64 * GiB);
}

TEST(ModelConfigSizes, AbsurdShapesAreRefusedNamingTheField) {
  const auto refusal = [](ModelConfig c) -> std::string {
    try {
      validate_model(c);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  ModelConfig c = model_preset("tiny");
  c.n_layer = 2000000000;
  c.d_model = 4096;
  c.n_head = 32;
  c.n_kv_head = 8;
  EXPECT_EQ(refusal(c).rfind("--n-layer: value 2000000000 is invalid: the model would have", 0), 0u)
      << refusal(c);
  c = model_preset("tiny");
  c.d_model = 1 << 30;
  EXPECT_EQ(refusal(c).rfind("--d-model: value 1073741824 is invalid", 0), 0u) << refusal(c);
  c = model_preset("tiny");
  c.d_ff = 2000000000;
  c.d_model = 1 << 20;
  c.n_head = 1 << 10;
  c.n_kv_head = 1 << 10;
  EXPECT_EQ(refusal(c).rfind("--d-ff: value 2000000000 is invalid", 0), 0u) << refusal(c);
  c = model_preset("tiny");
  c.vocab_size = 2147483600;
  EXPECT_EQ(refusal(c).rfind("--vocab-size: value 2147483600 is invalid", 0), 0u) << refusal(c);
  c.vocab_size = 2000000000;
  c.d_model = 1 << 20;
  c.n_head = 1 << 10;
  c.n_kv_head = 1 << 10;
  EXPECT_EQ(refusal(c).rfind("--vocab-size: value 2000000000 is invalid: the model would", 0), 0u)
      << refusal(c);
  EXPECT_EQ(refusal(model_preset("gpt-1.3b")), "");
}

}  // namespace
}  // namespace fsdp
