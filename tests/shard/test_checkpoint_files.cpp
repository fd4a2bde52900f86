// The checkpoint as a file: logical shapes a plain HDF5 reader sees, crash
// safety (leftover .tmp, truncated newest), choosing what to resume from,
// pruning, and the errors a user gets.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "comm/process_groups.h"
#include "common/hdf5_lock.h"
#include "shard/checkpoint.h"
#include "shard/checkpoint_dir.h"
#include "tests/shard/checkpoint_test_util.h"

namespace fsdp {
namespace {

using namespace testing;
namespace fs = std::filesystem;

struct Saved {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  std::unique_ptr<EngineRun> run = make_run(*g.shard, nullptr, *g.world);
  Saved() { run->step(0, *g.world); }
  std::string save(const std::string& dir, int64_t step, SaveOptions opt = {}) {
    return save_checkpoint(dir, example_meta(step), run->cfg, run->engine, run->ops, MPI_COMM_WORLD,
                           opt);
  }
};

// The message of the fsdp::Error f throws on this rank ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointFile, DatasetsHaveTheirLogicalShape) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 1);
  const FullState full = full_state(s.run->engine, *s.g.shard);
  if (world_rank() != 0) return;
  const auto units = model_units(s.run->cfg);
  // blocks.0 is unit 1; attn.wq is its second parameter.
  const ParamSpec& wq = units[1].params[1];
  ASSERT_EQ(wq.name, "blocks.0.attn.wq");
  Hdf5Lock lock;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (const char* group : {"model", "optim/exp_avg_sq"}) {
    hid_t d = H5Dopen2(f, (std::string(group) + "/blocks.0.attn.wq").c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0);
    hid_t sp = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    ASSERT_EQ(H5Sget_simple_extent_ndims(sp), 2);
    H5Sget_simple_extent_dims(sp, dims, nullptr);
    EXPECT_EQ(dims[0], hsize_t(wq.shape[0]));
    EXPECT_EQ(dims[1], hsize_t(wq.shape[1]));
    std::vector<float> got(size_t(wq.numel()));
    ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()), 0);
    const auto& unit = std::string(group) == "model" ? full.master[1] : full.exp_avg_sq[1];
    const auto off = units[1].offset_of(1);
    EXPECT_EQ(got, std::vector<float>(unit.begin() + off, unit.begin() + off + wq.numel()))
        << group;
    H5Sclose(sp);
    H5Dclose(d);
  }
  H5Fclose(f);
}

TEST(CheckpointFile, LeftoverTmpIsIgnored) {
  TestDir dir;
  Saved s;
  const std::string one = s.save(dir.path(), 1);
  if (world_rank() == 0) std::ofstream(dir / "step_00000002.h5.tmp") << "half-written";
  const ResumeChoice c = resolve_resume("auto", dir.path(), MPI_COMM_WORLD);
  EXPECT_EQ(c.path, one);
  EXPECT_EQ(c.warning, "");
}

TEST(CheckpointFile, TruncatedNewestFallsBackToThePreviousOne) {
  TestDir dir;
  Saved s;
  const std::string one = s.save(dir.path(), 1);
  const std::string two = s.save(dir.path(), 2);
  if (world_rank() == 0) {
    EXPECT_EQ(::truncate(two.c_str(), off_t(fs::file_size(two) / 2)), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const ResumeChoice c = resolve_resume("auto", dir.path(), MPI_COMM_WORLD);
  EXPECT_EQ(c.path, one);
  EXPECT_NE(c.warning.find("'" + two + "' is damaged or truncated"), std::string::npos)
      << c.warning;
  EXPECT_NE(c.warning.find("previous valid checkpoint '" + one + "'"), std::string::npos)
      << c.warning;

  // Named explicitly, the damaged file is an error on every rank.
  const std::string e = error_of([&] { resolve_resume(two, dir.path(), MPI_COMM_WORLD); });
  EXPECT_NE(e.find("checkpoint '" + two + "' is damaged or truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("--resume PATH"), std::string::npos) << e;
  const std::string l = error_of(
      [&] { load_checkpoint(two, s.run->cfg, s.run->engine, s.run->ops, MPI_COMM_WORLD); });
  EXPECT_NE(l.find("is damaged or truncated"), std::string::npos) << l;
  if (world_rank() == 0) std::printf("[ message  ] %s\n", e.c_str());
}

TEST(CheckpointFile, NothingToResumeStartsFresh) {
  TestDir dir;
  const ResumeChoice c = resolve_resume("auto", dir / "never_made", MPI_COMM_WORLD);
  EXPECT_EQ(c.path, "");
  EXPECT_EQ(c.warning, "");
  const std::string e =
      error_of([&] { resolve_resume(dir / "missing.h5", dir.path(), MPI_COMM_WORLD); });
  EXPECT_NE(e.find("'" + dir / "missing.h5" + "' does not exist"), std::string::npos) << e;
}

TEST(CheckpointFile, LatestPointerIsFollowedFirst) {
  TestDir dir;
  Saved s;
  s.save(dir.path(), 9);
  const std::string four = s.save(dir.path(), 4);  // e.g. a run that resumed from an older file
  EXPECT_EQ(resolve_resume("auto", dir.path(), MPI_COMM_WORLD).path, four);
}

TEST(CheckpointFile, KeepDeletesOnlyOlderOnes) {
  TestDir dir;
  Saved s;
  SaveOptions keep2;
  keep2.keep = 2;
  for (int step = 1; step <= 4; ++step) s.save(dir.path(), step, keep2);
  const CheckpointDir d(dir.path());
  EXPECT_EQ(d.list(),
            (std::vector<std::string>{dir / "step_00000004.h5", dir / "step_00000003.h5"}));
  SaveOptions keep1;
  keep1.keep = 1;
  keep1.protect = dir / "step_00000003.h5";  // the file this run resumed from
  s.save(dir.path(), 5, keep1);
  EXPECT_EQ(d.list(),
            (std::vector<std::string>{dir / "step_00000005.h5", dir / "step_00000003.h5"}));
  EXPECT_EQ(d.latest(), dir / "step_00000005.h5");
  // Re-saving a step replaces the file whole (written as .tmp, renamed over).
  s.save(dir.path(), 5, keep1);
  EXPECT_EQ(resolve_resume("auto", dir.path(), MPI_COMM_WORLD).path, dir / "step_00000005.h5");
  EXPECT_FALSE(fs::exists(dir / "step_00000005.h5.tmp"));
}

TEST(CheckpointFile, OtherModelShapeNamesTheDataset) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 1);
  ModelConfig other = engine_test_config();
  other.d_ff = 48;
  auto b = make_run(*s.g.shard, nullptr, *s.g.world, 0, other);
  const std::string e =
      error_of([&] { load_checkpoint(path, other, b->engine, b->ops, MPI_COMM_WORLD); });
  EXPECT_NE(e.find("dataset model/blocks.0.mlp.w1 has shape [40, 24] but the current model "
                   "expects [48, 24]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--d-ff 40"), std::string::npos) << e;

  ModelConfig untied = engine_test_config();
  untied.tie_embeddings = false;
  auto c = make_run(*s.g.shard, nullptr, *s.g.world, 0, untied);
  const std::string u =
      error_of([&] { load_checkpoint(path, untied, c->engine, c->ops, MPI_COMM_WORLD); });
  EXPECT_NE(u.find("has no dataset model/head.weight"), std::string::npos) << u;
  if (world_rank() == 0) std::printf("[ message  ] %s\n", e.c_str());
}

TEST(CheckpointFile, UnwritableDirectoryIsAClearError) {
  TestDir dir;
  Saved s;
  if (world_rank() == 0) std::ofstream(dir / "a_file") << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string bad = dir / "a_file/ckpt";
  const std::string e = error_of([&] { s.save(bad, 1); });
  EXPECT_NE(e.find("checkpoint directory '" + bad + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("--checkpoint-dir"), std::string::npos) << e;
}

// A checkpoint is its tensors plus a little HDF5 metadata, written without
// gaps: aligning each tensor to 1 MiB once made files 2-5x their data, the
// gaps holes that a copy to another file system fills in.
TEST(CheckpointFile, FileIsItsDataWithoutHoles) {
  TestDir dir;
  ModelConfig cfg = engine_test_config();
  cfg.d_model = 128;  // tensors of 64-256 KiB, which the alignment spaced out
  cfg.n_head = 4;
  cfg.d_ff = 256;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto run = make_run(*g.shard, nullptr, *g.world, 0, cfg);
  const CheckpointMeta meta = example_meta(1);
  const std::string path =
      save_checkpoint(dir.path(), meta, cfg, run->engine, run->ops, MPI_COMM_WORLD);
  if (world_rank() != 0) return;
  int64_t elems = 0, datasets = 0;
  for (const UnitSpec& u : model_units(cfg))
    for (const ParamSpec& p : u.params) elems += p.numel(), ++datasets;
  const int64_t data = 3 * elems * 4;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  // HDF5's own headers: measured 0.4 KiB per dataset plus the root's.
  EXPECT_GE(st.st_size, data);
  EXPECT_LE(st.st_size, data + 3 * datasets * 1024 + 64 * 1024)
      << "data " << data << " bytes in " << 3 * datasets << " datasets";
  EXPECT_GE(int64_t(st.st_blocks) * 512, st.st_size) << "the file has holes";
  std::printf("[ size     ] %lld bytes for %lld bytes of tensors, %lld on disk\n",
              (long long)st.st_size, (long long)data, (long long)st.st_blocks * 512);
}

// Not a test of its own: writes checkpoints for the Python tools' CTest
// (tests/tools), which sets FSDP_CKPT_TOOL_OUT.
TEST(CheckpointFile, WritesToolFixture) {
  const char* out = std::getenv("FSDP_CKPT_TOOL_OUT");
  if (!out) GTEST_SKIP() << "FSDP_CKPT_TOOL_OUT not set";
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  for (bool tied : {true, false}) {
    ModelConfig cfg = engine_test_config();
    cfg.tie_embeddings = tied;
    auto run = make_run(*g.shard, nullptr, *g.world, 0, cfg);
    for (int st = 0; st < 2; ++st) run->step(st, *g.world);
    save_checkpoint(std::string(out) + (tied ? "/tied" : "/untied"), example_meta(2), cfg,
                    run->engine, run->ops, MPI_COMM_WORLD);
  }
}

}  // namespace
}  // namespace fsdp
