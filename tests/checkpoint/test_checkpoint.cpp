// Checkpoint round trips: same ranks (bitwise), any other rank count and
// shard-group size (each rank reads only what it now owns), hybrid sharding
// (only one replica writes), exact resume of training, and the I/O mode.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "checkpoint/checkpoint.h"
#include "comm/process_groups.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace fsdp {
namespace {

using namespace testing;

void expect_same_local(const FsdpEngine& a, const FsdpEngine& b) {
  ASSERT_EQ(a.num_units(), b.num_units());
  auto host = [](Tensor t) {
    const float* p = t.f32();
    return std::vector<float>(p, p + t.numel);
  };
  for (int u = 0; u < a.num_units(); ++u) {
    EXPECT_EQ(host(a.master(u)), host(b.master(u))) << "master, unit " << u;
    EXPECT_EQ(host(a.exp_avg(u)), host(b.exp_avg(u))) << "exp_avg, unit " << u;
    EXPECT_EQ(host(a.exp_avg_sq(u)), host(b.exp_avg_sq(u))) << "exp_avg_sq, unit " << u;
  }
  EXPECT_EQ(a.optimizer_steps(), b.optimizer_steps());
}

TEST(Checkpoint, SameRanksRoundTripIsBitwise) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto a = make_run(*g.shard, nullptr, *g.world);
  for (int s = 0; s < 3; ++s) a->step(s, *g.world);
  const CheckpointMeta meta = example_meta(3);
  CheckpointIoStats st;
  const std::string path =
      save_checkpoint({a->cfg, a->engine, a->ops, MPI_COMM_WORLD}, dir.path(), meta, {}, &st);
  EXPECT_EQ(path, dir / "step_00000003.h5");
  EXPECT_GT(st.data_calls, 0);

  auto b = make_run(*g.shard, nullptr, *g.world, /*seed=*/99);  // other weights, no moments
  const CheckpointMeta got = load_checkpoint({b->cfg, b->engine, b->ops, MPI_COMM_WORLD}, path);
  expect_same_local(a->engine, b->engine);
  EXPECT_EQ(b->engine.optimizer_steps(), 3);
  EXPECT_EQ(got.step, 3);
  EXPECT_EQ(got.tokens_seen, meta.tokens_seen);
  EXPECT_EQ(got.seed, meta.seed);
  EXPECT_EQ(got.config_text, meta.config_text);
  EXPECT_EQ(got.sampler, meta.sampler);
  EXPECT_EQ(got.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(got.world_size, g.world->size());
  EXPECT_EQ(got.shard_group_size, g.world->size());
  EXPECT_EQ(got.model.d_ff, a->cfg.d_ff);
  EXPECT_EQ(got.model.vocab_size, a->cfg.vocab_size);
  EXPECT_EQ(got.model.norm_eps, a->cfg.norm_eps);
  EXPECT_EQ(got.model.rope_theta, a->cfg.rope_theta);
  EXPECT_EQ(got.model.tie_embeddings, a->cfg.tie_embeddings);
  EXPECT_EQ(read_checkpoint_meta(path, MPI_COMM_WORLD).step, 3);
}

// Every rank alone (MPI_COMM_SELF, world size 1) reads the whole model.
TEST(Checkpoint, LoadsOnOneRankAsGatheredState) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto a = make_run(*g.shard, nullptr, *g.world);
  for (int s = 0; s < 2; ++s) a->step(s, *g.world);
  const std::string path =
      save_checkpoint({a->cfg, a->engine, a->ops, MPI_COMM_WORLD}, dir.path(), example_meta(2));
  const FullState want = full_state(a->engine, *g.shard);

  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  auto b = make_run(*self, nullptr, *self, 5);
  load_checkpoint({b->cfg, b->engine, b->ops, MPI_COMM_SELF}, path);
  EXPECT_TRUE(full_state(b->engine, *self) == want);
}

// An FP8 run lays its blocks out in segments (linears, then gains), yet
// saves parameters as any run does: bf16 resumes it on these ranks, and an
// FP8 run on one rank resumes the bf16 run's checkpoint, bit for bit. The
// loaded FP8 run's codes come from the loaded masters (refresh_send_buffers
// is collective there).
TEST(Checkpoint, ResumesAcrossFp8AndRankCounts) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig cfg = engine_test_config();
  auto f8 = make_run(*g.shard, nullptr, *g.world, 0, cfg, true);
  ASSERT_TRUE(f8->engine.fp8_gather());
  for (int s = 0; s < 2; ++s) f8->step(s, *g.world);
  const std::string from_fp8 =
      save_checkpoint({cfg, f8->engine, f8->ops, MPI_COMM_WORLD}, dir / "fp8", example_meta(2));
  const FullState want = full_state(f8->engine, *g.shard);

  auto plain = make_run(*g.shard, nullptr, *g.world, 5, cfg);
  load_checkpoint({cfg, plain->engine, plain->ops, MPI_COMM_WORLD}, from_fp8);
  EXPECT_TRUE(full_state(plain->engine, *g.shard) == want);
  plain->step(2, *g.world);
  const std::string from_plain = save_checkpoint({cfg, plain->engine, plain->ops, MPI_COMM_WORLD},
                                                 dir / "plain", example_meta(3));
  const FullState want2 = full_state(plain->engine, *g.shard);

  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  auto one = make_run(*self, nullptr, *self, 7, cfg, true);
  load_checkpoint({cfg, one->engine, one->ops, MPI_COMM_SELF}, from_plain);
  EXPECT_TRUE(full_state(one->engine, *self) == want2);
  EXPECT_FALSE(want2 == want);  // the step in between moved the weights
  // Its codes come from the loaded masters: its first loss is that of a run
  // that casts the loaded weights before each GEMM (--fp8-gather false), bit
  // for bit; codes left from its own initialisation would give another.
  EngineOptions cast_each;
  cast_each.seed = 9;
  cast_each.fp8_gather = false;
  EngineRun cast(cfg, *self, nullptr, 0, 1, kB, kT, kAccum, cast_each, true);
  load_checkpoint({cfg, cast.engine, cast.ops, MPI_COMM_SELF}, from_plain);
  EXPECT_EQ(one->step(3, *self), cast.step(3, *self));
}

// Saves on the first k ranks or with shard groups of d, loads on all ranks
// with every shard-group size: the full state must come back bit for bit.
TEST(Checkpoint, ReshardsAcrossRankCountsAndShardGroups) {
  TestDir dir;
  const int W = world_size(), me = world_rank();
  struct Save {
    int ranks, group;
  };
  std::vector<Save> saves;
  for (int k = 1; k <= W; ++k) saves.push_back({k, k});
  for (int d = 1; d < W; ++d)
    if (W % d == 0) saves.push_back({W, d});
  const ModelConfig cfg = engine_test_config();
  const int units = int(model_units(cfg).size());

  for (const Save& sv : saves) {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, me < sv.ranks ? 0 : MPI_UNDEFINED, me, &sub);
    const std::string path =
        dir / ("save_" + std::to_string(sv.ranks) + "_" + std::to_string(sv.group) + ".h5");
    FullState want;
    if (sub != MPI_COMM_NULL) {
      ProcessGroups sg = make_process_groups(Backend::mpi, sv.group, sub);
      auto a = make_run(*sg.shard, sg.replicate.get(), *sg.world);
      for (int s = 0; s < 2; ++s) a->step(s, *sg.world);
      write_checkpoint_file({cfg, a->engine, a->ops, sub}, path, example_meta(2));
      want = full_state(a->engine, *sg.shard);
      MPI_Comm_free(&sub);
    }
    bcast_state(want, units, cfg, MPI_COMM_WORLD);
    for (int d = 1; d <= W; ++d) {
      if (W % d != 0) continue;
      ProcessGroups lg = make_process_groups(Backend::mpi, d);
      auto b = make_run(*lg.shard, lg.replicate.get(), *lg.world, 11);
      const CheckpointMeta m = load_checkpoint({cfg, b->engine, b->ops, MPI_COMM_WORLD}, path);
      EXPECT_EQ(m.world_size, sv.ranks);
      EXPECT_EQ(m.shard_group_size, sv.group);
      EXPECT_EQ(b->engine.optimizer_steps(), 2);
      EXPECT_TRUE(full_state(b->engine, *lg.shard) == want)
          << "saved on " << sv.ranks << " ranks (shard group " << sv.group
          << "), loaded with shard group " << d;
    }
  }
}

TEST(Checkpoint, HybridSaveWritesFromOneReplicaOnly) {
  const int W = world_size();
  if (W % 2 != 0) GTEST_SKIP() << "hybrid sharding needs an even world size";
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, W / 2);  // two replicas
  auto a = make_run(*g.shard, g.replicate.get(), *g.world);
  for (int s = 0; s < 2; ++s) a->step(s, *g.world);
  CheckpointIoStats st;
  const std::string path = save_checkpoint({a->cfg, a->engine, a->ops, MPI_COMM_WORLD}, dir.path(),
                                           example_meta(2), {}, &st);
  // Ranks of replica 0 are world ranks [0, W/2).
  if (world_rank() < W / 2)
    EXPECT_GT(st.bytes, 0);
  else
    EXPECT_EQ(st.bytes, 0);
  // Every rank made the same number of collective calls, writer or not.
  int calls[2] = {st.data_calls, -st.data_calls};
  MPI_Allreduce(MPI_IN_PLACE, calls, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(calls[0], -calls[1]);

  const FullState want = full_state(a->engine, *g.shard);
  auto b = make_run(*g.shard, g.replicate.get(), *g.world, 3);
  load_checkpoint({b->cfg, b->engine, b->ops, MPI_COMM_WORLD}, path);
  expect_same_local(a->engine, b->engine);
  EXPECT_TRUE(full_state(b->engine, *g.shard) == want);
}

// 10 steps straight equal 5 steps, save, load into a fresh engine, 5 steps.
// Ten steps straight, or five, a save, and five more from the file in a
// fresh run: the same losses and state, bit for bit.
void expect_resume_is_bitwise(const OptimizerConfig& opt, float lr) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto straight = make_run(*g.shard, nullptr, *g.world);
  straight->optimizer = opt;
  for (int s = 0; s < 10; ++s) straight->step(s, *g.world, lr);

  std::string path;
  {
    auto first = make_run(*g.shard, nullptr, *g.world);
    first->optimizer = opt;
    for (int s = 0; s < 5; ++s) first->step(s, *g.world, lr);
    path = save_checkpoint({first->cfg, first->engine, first->ops, MPI_COMM_WORLD}, dir.path(),
                           example_meta(5));
  }
  auto second = make_run(*g.shard, nullptr, *g.world, 1234);
  second->optimizer = opt;
  const CheckpointMeta m =
      load_checkpoint({second->cfg, second->engine, second->ops, MPI_COMM_WORLD}, path);
  for (int64_t s = m.step; s < 10; ++s) second->step(int(s), *g.world, lr);
  ASSERT_EQ(second->losses.size(), 5u);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(second->losses[size_t(s)], straight->losses[size_t(s + 5)]);
  EXPECT_TRUE(full_state(second->engine, *g.shard) == full_state(straight->engine, *g.shard));
  // The weights moved: two frozen models would prove nothing.
  auto fresh = make_run(*g.shard, nullptr, *g.world);
  EXPECT_FALSE(full_state(fresh->engine, *g.shard) == full_state(straight->engine, *g.shard));
}

TEST(Checkpoint, ResumedTrainingIsBitwiseIdentical) {
  expect_resume_is_bitwise(EngineRun::adam(), 1e-3f);
}

// Muon's momentum lives in optim/exp_avg: a resumed Muon run continues
// exactly (a momentum lost or left from AdamW would change every step).
TEST(Checkpoint, ResumedMuonTrainingIsBitwiseIdentical) {
  OptimizerConfig muon = EngineRun::adam();
  muon.kind = OptimizerKind::muon;
  expect_resume_is_bitwise(muon, 1e-2f);
}

// NorMuon's row moments live in optim/exp_avg_sq (shard/muon.h): a resumed
// NorMuon run continues exactly too (moments restarted from zero would not).
TEST(Checkpoint, ResumedNorMuonTrainingIsBitwiseIdentical) {
  OptimizerConfig normuon = EngineRun::adam();
  normuon.kind = OptimizerKind::muon;
  normuon.muon.normuon = true;
  expect_resume_is_bitwise(normuon, 1e-2f);
}

// Tiny per-call limits force every dataset through several collective calls
// (the path a >2 GiB shard takes); HDF5 must still do each collectively.
TEST(Checkpoint, SplitCallsStayCollectiveAndExact) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto a = make_run(*g.shard, nullptr, *g.world);
  for (int s = 0; s < 2; ++s) a->step(s, *g.world);
  CheckpointIoOptions small;
  small.max_call_bytes = 100 * 4;
  CheckpointIoStats ws, rs, plain;
  const std::string path = save_checkpoint({a->cfg, a->engine, a->ops, MPI_COMM_WORLD, small},
                                           dir.path(), example_meta(2), {}, &ws);
  auto b = make_run(*g.shard, nullptr, *g.world, 8);
  load_checkpoint({b->cfg, b->engine, b->ops, MPI_COMM_WORLD, small}, path, &rs);
  expect_same_local(a->engine, b->engine);
  save_checkpoint({a->cfg, a->engine, a->ops, MPI_COMM_WORLD}, dir.path(), example_meta(3), {},
                  &plain);
  EXPECT_GT(ws.data_calls, plain.data_calls);
  EXPECT_EQ(ws.data_calls, rs.data_calls);
  EXPECT_EQ(ws.not_collective_calls, 0) << "of " << ws.data_calls << " writes";
  EXPECT_EQ(rs.not_collective_calls, 0) << "of " << rs.data_calls << " reads";
  EXPECT_EQ(plain.not_collective_calls, 0) << "of " << plain.data_calls << " writes";
  EXPECT_EQ(ws.bytes, plain.bytes);
  if (world_rank() == 0)
    std::printf("[ measured ] %d collective writes (%d split), 0 independent\n", plain.data_calls,
                ws.data_calls);
}

}  // namespace
}  // namespace fsdp
