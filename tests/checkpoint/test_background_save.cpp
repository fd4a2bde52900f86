// Background saves (checkpoint/background_save.h) on 1-4 ranks: the file
// holds the state at start() although the engine trains on during the
// write, one save at a time, and a failed save throws on every rank alike.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fstream>

#include "checkpoint/background_save.h"
#include "comm/process_groups.h"
#include "common/error.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace fsdp {
namespace {

using namespace testing;

TEST(BackgroundSave, WritesTheStateAtStartWhileTheEngineTrainsOn) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto a = make_run(*g.shard, nullptr, *g.world);
  for (int s = 0; s < 2; ++s) a->step(s, *g.world);
  const FullState at_start = full_state(a->engine, *g.shard);

  BackgroundSave save({a->cfg, a->engine, a->ops, MPI_COMM_WORLD});
  EXPECT_FALSE(save.finish().has_value());  // none in flight yet
  const BackgroundSave::Started s = save.start(dir.path(), example_meta(2), {});
  EXPECT_EQ(s.path, dir / "step_00000002.h5");
  EXPECT_GT(s.bytes, 0);
  // The training thread's collectives run beside the save thread's.
  for (int step = 2; step < 5; ++step) a->step(step, *g.world);
  ASSERT_FALSE(full_state(a->engine, *g.shard) == at_start);
  const auto done = save.finish();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->path, s.path);
  EXPECT_EQ(done->step, 2);
  EXPECT_GT(done->file_bytes, s.bytes * world_size() * 9 / 10);
  EXPECT_TRUE(save.done());
  EXPECT_FALSE(save.in_flight());

  auto b = make_run(*g.shard, nullptr, *g.world, /*seed=*/99);
  const CheckpointMeta got = load_checkpoint({b->cfg, b->engine, b->ops, MPI_COMM_WORLD}, s.path);
  EXPECT_TRUE(full_state(b->engine, *g.shard) == at_start);
  EXPECT_EQ(got.optimizer_steps, 2);  // the count at start(), not the engine's 5
  EXPECT_EQ(got.step, 2);
}

TEST(BackgroundSave, RefusesASecondSaveWhileOneIsInFlight) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto a = make_run(*g.shard, nullptr, *g.world);
  BackgroundSave save({a->cfg, a->engine, a->ops, MPI_COMM_WORLD});
  save.start(dir.path(), example_meta(1), {});
  EXPECT_THROW(save.start(dir.path(), example_meta(2), {}), Error);
  EXPECT_EQ(save.finish()->step, 1);
  save.start(dir.path(), example_meta(2), {});
  EXPECT_EQ(save.finish()->step, 2);
}

TEST(BackgroundSave, AFailedSaveThrowsAtFinishOnEveryRank) {
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto a = make_run(*g.shard, nullptr, *g.world);
  if (world_rank() == 0) std::ofstream(dir / "file") << "not a directory";
  MPI_Barrier(MPI_COMM_WORLD);
  BackgroundSave save({a->cfg, a->engine, a->ops, MPI_COMM_WORLD});
  save.start(dir / "file/ckpt", example_meta(1), {});
  std::string error;
  try {
    save.finish();
  } catch (const AgreedError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find(dir / "file/ckpt"), std::string::npos) << error;
  std::string first = error;
  bcast_string(first);
  EXPECT_EQ(error, first);                  // every rank threw the same
  EXPECT_FALSE(save.finish().has_value());  // the failed save is over
}

}  // namespace
}  // namespace fsdp
