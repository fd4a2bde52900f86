// The checkpoint as a file: logical shapes a plain HDF5 reader sees, crash
// safety (leftover .tmp, truncated newest), choosing what to resume from,
// pruning, and the errors a user gets.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <variant>

#include "checkpoint/checkpoint.h"
#include "checkpoint/dir.h"
#include "comm/process_groups.h"
#include "common/hdf5_lock.h"
#include "tests/checkpoint/checkpoint_test_util.h"
#include "tests/common/error_of.h"

namespace fsdp {
namespace {

using namespace testing;
namespace fs = std::filesystem;

struct Saved {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  std::unique_ptr<EngineRun> run = make_run(*g.shard, nullptr, *g.world);
  Saved() { run->step(0, *g.world); }
  std::string save(const std::string& dir, int64_t step, SaveOptions opt = {}) {
    return save_checkpoint({run->cfg, run->engine, run->ops, MPI_COMM_WORLD}, dir,
                           example_meta(step), opt);
  }
};

using testing::error_of;

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
  const std::string l = error_of([&] {
    load_checkpoint({s.run->cfg, s.run->engine, s.run->ops, MPI_COMM_WORLD}, two);
  });
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
  const std::string e = error_of([&] {
    load_checkpoint({other, b->engine, b->ops, MPI_COMM_WORLD}, path);
  });
  EXPECT_NE(e.find("checkpoint '" + path +
                   "' was saved by another model: --d-ff 40 (this run: "
                   "48); pass --d-ff 40"),
            std::string::npos)
      << e;

  ModelConfig untied = engine_test_config();
  untied.tie_embeddings = false;
  auto c = make_run(*s.g.shard, nullptr, *s.g.world, 0, untied);
  const std::string u = error_of([&] {
    load_checkpoint({untied, c->engine, c->ops, MPI_COMM_WORLD}, path);
  });
  EXPECT_NE(u.find("--tie-embeddings true (this run: false)"), std::string::npos) << u;
  if (world_rank() == 0) std::printf("[ message  ] %s\n", e.c_str());
}

// A checkpoint is untrusted input: each test below changes one attribute of
// a file save_checkpoint wrote, with the HDF5 C API as another program
// would, and the load must refuse it with a message naming the file and the
// attribute, before any tensor is read.

// Runs edit(file) on rank 0 only, as another program damaging the file
// would, then lets every rank see the result.
template <typename Edit>
void edit_file(const std::string& path, Edit edit) {
  if (world_rank() == 0) {
    Hdf5Lock lock;
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    edit(f);
    EXPECT_GE(H5Fclose(f), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Replaces attribute `name` of `object` ("/", "/model", "/sampler") with
// `values` stored as `file_type` (one value: a scalar; more: a 1-D array).
template <typename T>
void set_attr(const std::string& path, const char* object, const char* name, hid_t file_type,
              hid_t mem_type, const std::vector<T>& values) {
  edit_file(path, [&](hid_t f) {
    const hid_t o = H5Oopen(f, object, H5P_DEFAULT);
    if (H5Aexists(o, name) > 0) H5Adelete(o, name);
    const hsize_t n = values.size();
    const hid_t space = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
    const hid_t a = H5Acreate2(o, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(a, mem_type, values.data()), 0) << name;
    H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
  });
}

void set_i64(const std::string& path, const char* object, const char* name, int64_t v, int n = 1) {
  set_attr(path, object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, std::vector<int64_t>(size_t(n), v));
}

void set_f32(const std::string& path, const char* object, const char* name, float v, int n = 1) {
  set_attr(path, object, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, std::vector<float>(size_t(n), v));
}

// Why loading the file into the saving run's model fails ("" if it loads).
std::string load_error(Saved& s, const std::string& path) {
  return error_of([&] {
    load_checkpoint({s.run->cfg, s.run->engine, s.run->ops, MPI_COMM_WORLD}, path);
  });
}

// `e` names the file and says it is damaged, and contains `what`.
void expect_damaged(const std::string& e, const std::string& path, const std::string& what) {
  EXPECT_NE(e.find("checkpoint '" + path + "' is damaged: "), std::string::npos) << e;
  EXPECT_NE(e.find(what), std::string::npos) << e;
}

// H5Aread of an array into one scalar wrote past it: a crash.
TEST(CheckpointUntrusted, ArrayWhereOneNumberBelongs) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 2);
  set_i64(path, "/", "step", 2, 64);
  expect_damaged(load_error(s, path), path, "attribute 'step' is an array of 64 integers");

  const std::string p2 = s.save(dir.path(), 3);
  set_i64(p2, "/model", "n_layer", 3, 64);
  expect_damaged(load_error(s, p2), p2, "attribute 'n_layer' of /model is an array of 64");

  const std::string p3 = s.save(dir.path(), 4);
  set_f32(p3, "/model", "rope_theta", 10000.0f, 64);
  expect_damaged(load_error(s, p3), p3, "attribute 'rope_theta' of /model is an array of 64");

  const std::string p4 = s.save(dir.path(), 5);
  set_i64(p4, "/sampler", "seed", -5, 2);
  expect_damaged(load_error(s, p4), p4, "attribute 'seed' of /sampler is an array of 2");
}

// HDF5 would convert 64.5 to 64, and 2^64-1 to INT64_MAX, without a word.
TEST(CheckpointUntrusted, WrongClassOrRangeOfInteger) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 2);
  set_attr(path, "/", "tokens_seen", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, std::vector<double>{64.5});
  expect_damaged(load_error(s, path), path, "attribute 'tokens_seen' is a float, not one integer");

  const std::string p2 = s.save(dir.path(), 3);
  set_attr(p2, "/model", "vocab_size", H5T_STD_U64LE, H5T_NATIVE_UINT64,
           std::vector<uint64_t>{~uint64_t{0}});
  expect_damaged(load_error(s, p2), p2, "attribute 'vocab_size' of /model is 18446744073709551615");
}

TEST(CheckpointUntrusted, NumbersOutOfRangeOrInconsistent) {
  TestDir dir;
  Saved s;
  struct Case {
    const char* object;
    const char* name;
    int64_t value;
    const char* says;
  };
  // Case i is the file of step 2 + i, saved after one optimizer step.
  const Case cases[] = {
      {"/", "step", -1, "attribute 'step' is -1; it must be 0 or more"},
      {"/", "tokens_seen", -7, "attribute 'tokens_seen' is -7"},
      {"/", "optimizer_steps", 1000,
       "attribute 'optimizer_steps' is 1000; it must be between 0 "
       "and 4"},  // the file of step 4
      {"/", "format_version", 3, "attribute 'format_version' is 3; it must be between 1 and 2"},
      {"/", "world_size", 0, "attribute 'world_size' is 0"},
      {"/", "shard_group_size", 99, "attribute 'shard_group_size' is 99"},
      {"/model", "n_layer", -818412, "attribute 'n_layer' of /model is -818412"},
      {"/model", "tie_embeddings", 7, "attribute 'tie_embeddings' of /model is 7"},
      {"/model", "d_ff", int64_t{1} << 40, "attribute 'd_ff' of /model is 1099511627776"},
  };
  int64_t step = 2;
  for (const Case& c : cases) {
    const std::string path = s.save(dir.path(), step++);
    set_i64(path, c.object, c.name, c.value);
    expect_damaged(load_error(s, path), path, c.says);
  }
  const std::string nan = s.save(dir.path(), step++);
  set_f32(nan, "/model", "norm_eps", std::nanf(""));
  expect_damaged(load_error(s, nan), nan, "attribute 'norm_eps' of /model is nan");
  // In range one by one, yet no model: 4 heads of 6 do not divide among 3 KV heads.
  const std::string kv = s.save(dir.path(), step++);
  set_i64(kv, "/model", "n_kv_head", 3);
  expect_damaged(load_error(s, kv), kv, "/model attributes describe no valid model (--n-kv-head");
}

// Without its checksums nothing in the file can show a changed tensor.
// --on-divergence's optional attributes (checkpoint/meta.h): a loss window,
// a rollback count and ranges of skipped positions, each judged on load.
TEST(CheckpointUntrusted, DivergenceRecordIsChecked) {
  TestDir dir;
  Saved s;
  const std::string ok = s.save(dir.path(), 2);
  set_attr(ok, "/", "loss_history", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
           std::vector<double>{5.5, 5.25});
  set_attr(ok, "/", "skipped_sequences", H5T_STD_I64LE, H5T_NATIVE_INT64,
           std::vector<int64_t>{8, 16, 16, 40});
  set_i64(ok, "/", "rollbacks", 2);
  EXPECT_EQ(load_error(s, ok), "");

  const std::string nan = s.save(dir.path(), 3);
  set_attr(nan, "/", "loss_history", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
           std::vector<double>{5.5, std::nan("")});
  expect_damaged(load_error(s, nan), nan, "loss_history holds nan");
  const std::string f32 = s.save(dir.path(), 4);
  set_f32(f32, "/", "loss_history", 5.5f, 2);
  expect_damaged(load_error(s, f32), f32, "attribute 'loss_history' is not a 1-D array of float64");
  const std::string odd = s.save(dir.path(), 5);
  set_attr(odd, "/", "skipped_sequences", H5T_STD_I64LE, H5T_NATIVE_INT64,
           std::vector<int64_t>{8, 16, 24});
  expect_damaged(load_error(s, odd), odd, "skipped_sequences has 3 values");
  const std::string back = s.save(dir.path(), 6);
  set_attr(back, "/", "skipped_sequences", H5T_STD_I64LE, H5T_NATIVE_INT64,
           std::vector<int64_t>{8, 16, 12, 20});
  expect_damaged(load_error(s, back), back, "range [12, 20) is empty, negative or not after");
  const std::string neg = s.save(dir.path(), 7);
  set_i64(neg, "/", "rollbacks", -1);
  expect_damaged(load_error(s, neg), neg, "attribute 'rollbacks' is -1");
}

// --eval-only's engine holds no optimizer state (issue 65), yet its load
// reads every tensor and checks every checksum: the weights arrive as saved,
// and a changed moment is refused as it would be by a training run.
TEST(CheckpointUntrusted, ForwardOnlyLoadChecksEveryTensor) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 2);
  EngineOptions eo;
  eo.seed = 7;  // other weights until the load
  EngineRun eval(s.run->cfg, *s.g.shard, nullptr, s.g.world->rank(), s.g.world->size(), kB, kT,
                 kAccum, eo, false, ModelUse::forward_only);
  auto load = [&] {
    return error_of([&] {
      load_checkpoint({eval.cfg, eval.engine, eval.ops, MPI_COMM_WORLD}, path);
    });
  };
  EXPECT_EQ(load(), "");
  for (int u = 0; u < eval.engine.num_units(); ++u)
    EXPECT_EQ(eval.full_master(u, *s.g.shard), s.run->full_master(u, *s.g.shard)) << u;

  const std::string moment = "optim/exp_avg/" + model_units(s.run->cfg)[1].params[0].name;
  edit_file(path, [&](hid_t f) {
    const hid_t d = H5Dopen2(f, moment.c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0) << moment;
    const hid_t space = H5Dget_space(d);
    std::vector<float> v(size_t(H5Sget_simple_extent_npoints(space)));
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    v[0] += 1.0f;
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Sclose(space);
    H5Dclose(d);
  });
  expect_damaged(load(), path, "tensor " + moment + " does not match its checksum");
}

TEST(CheckpointUntrusted, ChecksumsAreRequired) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 2);
  edit_file(path, [](hid_t f) { EXPECT_GE(H5Adelete(f, "tensor_checksums"), 0); });
  expect_damaged(load_error(s, path), path, "attribute 'tensor_checksums' is missing");

  const std::string p2 = s.save(dir.path(), 3);
  set_attr(p2, "/", "tensor_checksums", H5T_STD_I32LE, H5T_NATIVE_INT32, std::vector<int32_t>(9));
  expect_damaged(load_error(s, p2), p2,
                 "attribute 'tensor_checksums' is not a 1-D array of uint64");
}

// Its /model fields match the run, so a missing tensor is damage, which
// --resume auto may skip, not a hint to change flags.
TEST(CheckpointUntrusted, MissingTensorOfTheSameModelIsDamage) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 2);
  edit_file(path, [](hid_t f) {
    EXPECT_GE(H5Ldelete(f, "optim/exp_avg/blocks.1.mlp.w2", H5P_DEFAULT), 0);
  });
  expect_damaged(load_error(s, path), path, "it has no dataset optim/exp_avg/blocks.1.mlp.w2");
}

// Same shapes, another model: the weights would load and compute something
// else. Not damage: the message names the flags that would match.
TEST(CheckpointUntrusted, AnotherModelNamesTheFlags) {
  TestDir dir;
  Saved s;
  const std::string path = s.save(dir.path(), 2);
  set_i64(path, "/model", "n_head", 2);  // d_model 24: heads of 12 instead of 6, same shapes
  set_f32(path, "/model", "rope_theta", 500000.0f);
  const std::string e = load_error(s, path);
  EXPECT_NE(e.find("checkpoint '" + path +
                   "' was saved by another model: --n-head 2 (this run: "
                   "4), --rope-theta 500000 (this run: 10000); pass --n-head 2 --rope-theta "
                   "500000"),
            std::string::npos)
      << e;
  EXPECT_FALSE(checkpoint_is_damaged(e)) << e;
  // A longer context is a legitimate change: RoPE has no learned positions.
  const std::string p2 = s.save(dir.path(), 3);
  set_i64(p2, "/model", "max_seq_len", 4096);
  EXPECT_EQ(load_error(s, p2), "");
  if (world_rank() == 0) std::printf("[ message  ] %s\n", e.c_str());
}

// --resume auto passes over a newest file whose metadata is damaged, as over
// a truncated one, and says why.
TEST(CheckpointUntrusted, AutoResumeSkipsDamagedMetadata) {
  TestDir dir;
  Saved s;
  const std::string one = s.save(dir.path(), 1);
  const std::string two = s.save(dir.path(), 2);
  set_i64(two, "/", "optimizer_steps", 1000);
  const ResumeChoice c = resolve_resume("auto", dir.path(), MPI_COMM_WORLD);
  EXPECT_EQ(c.path, one);
  EXPECT_NE(c.warning.find("'" + two + "' is damaged: attribute 'optimizer_steps' is 1000"),
            std::string::npos)
      << c.warning;
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
      save_checkpoint({cfg, run->engine, run->ops, MPI_COMM_WORLD}, dir.path(), meta);
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
// A checkpoint's /model is written, read and compared by model_fields()'
// rows (model/config.h), so a new model option needs nothing here. A model
// with every field at its example value (no preset's) saves and reads back
// equal; against `tiny` each field that gives the weights their meaning is
// named, and no other. A field stored only under a condition is absent from
// a file where the condition does not hold.
TEST(CheckpointFile, EveryModelFieldTravelsByItsRow) {
  ModelConfig cfg = model_preset("tiny");
  for (const ModelField& f : model_fields())
    std::visit(
        [&](auto field) {
          using T = std::remove_cvref_t<decltype(cfg.*field)>;
          if constexpr (std::is_same_v<T, bool>)
            cfg.*field = std::string(f.example) == "true";
          else if constexpr (std::is_same_v<T, float>)
            cfg.*field = std::stof(f.example);
          else
            cfg.*field = std::stoi(f.example);
        },
        f.member);
  validate_model(cfg);
  TestDir dir;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto run = make_run(*g.shard, nullptr, *g.world, 0, cfg);
  const std::string path =
      save_checkpoint({cfg, run->engine, run->ops, MPI_COMM_WORLD}, dir.path(), example_meta(1));
  EXPECT_EQ(read_checkpoint_meta(path, MPI_COMM_WORLD).model, cfg);
  EXPECT_EQ(read_checkpoint_meta(path, MPI_COMM_WORLD, &cfg).model, cfg);

  using R = ModelField::Resume;
  ModelConfig tiny = model_preset("tiny"), scaled = tiny;
  scaled.rope_scaling_factor = cfg.rope_scaling_factor;
  for (const ModelConfig* running : {&tiny, &scaled}) {
    const std::string e = error_of([&] { read_checkpoint_meta(path, MPI_COMM_WORLD, running); });
    EXPECT_NE(e.find("was saved by another model"), std::string::npos) << e;
    for (const ModelField& f : model_fields()) {
      const bool compared = f.resume == R::must_match ||
                            (f.resume == R::must_match_where_both_stored && running == &scaled);
      const bool differs =
          std::visit([&](auto field) { return cfg.*field != running->*field; }, f.member);
      EXPECT_EQ(e.find(std::string("--") + f.flag + " ") != std::string::npos, compared && differs)
          << f.flag << ": " << e;
    }
  }

  Saved s;
  const std::string plain = s.save(dir.path(), 2);
  if (world_rank() == 0) {
    Hdf5Lock lock;
    const hid_t file = H5Fopen(plain.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t model = H5Gopen2(file, "model", H5P_DEFAULT);
    for (const ModelField& f : model_fields())
      EXPECT_EQ(H5Aexists(model, f.attribute) > 0, !f.stored_if || f.stored_if(s.run->cfg))
          << f.attribute;
    H5Gclose(model);
    H5Fclose(file);
  }
}

TEST(CheckpointFile, WritesToolFixture) {
  const char* out = std::getenv("FSDP_CKPT_TOOL_OUT");
  if (!out) GTEST_SKIP() << "FSDP_CKPT_TOOL_OUT not set";
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  for (bool tied : {true, false}) {
    ModelConfig cfg = engine_test_config();
    cfg.tie_embeddings = tied;
    auto run = make_run(*g.shard, nullptr, *g.world, 0, cfg);
    for (int st = 0; st < 2; ++st) run->step(st, *g.world);
    save_checkpoint({cfg, run->engine, run->ops, MPI_COMM_WORLD},
                    std::string(out) + (tied ? "/tied" : "/untied"), example_meta(2));
  }
}

}  // namespace
}  // namespace fsdp
