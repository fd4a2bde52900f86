// Saving checkpoints, crash-safely: the file is written as .tmp by every rank
// together, flushed, closed and renamed into place only when all succeeded;
// a full disk is found before anything is written where it can be, and a
// failed write leaves no half file and the previous checkpoints untouched.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/collective.h"
#include "checkpoint/dir.h"
#include "checkpoint/file_format.h"
#include "checkpoint/h5.h"
#include "comm/mpi_check.h"
#include "common/error.h"
#include "common/hdf5_lock.h"
#include "common/test_hooks.h"
#include "model/params.h"

namespace fsdp {

namespace {

using namespace ckpt;
namespace fs = std::filesystem;

// Replicas hold identical shards, so of the ranks with the same shard rank
// only the lowest world rank writes; the others select nothing.
bool is_writer(int me, MPI_Comm world) {
  std::vector<int> all(size_t(size_of(world)));
  check_mpi(MPI_Allgather(&me, 1, MPI_INT, all.data(), 1, MPI_INT, world), "MPI_Allgather");
  for (int r = 0; r < rank_of(world); ++r)
    if (all[size_t(r)] == me) return false;
  return true;
}

// The error path of a save, on every rank: gives the space of the half
// written `tmp` back first (rank 0 truncates it), so that HDF5 can flush what
// it still holds and close the file on every rank, then deletes it. Rank 0
// calls `judge` with the free space seen before the truncation.
template <typename Judge>
void abandon(const std::string& tmp, H5& file, MPI_Comm world, Judge&& judge) {
  const bool root = rank_of(world) == 0;
  if (root) {
    std::error_code ec;
    const fs::path parent = fs::path(tmp).parent_path();
    int64_t free_bytes = 0;
    try {
      free_bytes = CheckpointDir(parent.empty() ? "." : parent.string()).free_bytes();
    } catch (const std::exception&) {
    }
    judge(free_bytes);
    fs::resize_file(tmp, 0, ec);
  }
  check_mpi(MPI_Barrier(world), "MPI_Barrier");
  // H5Fclose is collective: only when every rank still holds the file open.
  int open = 0;
  {
    Hdf5Lock lock;
    open = file.valid() && H5Iis_valid(file.get()) > 0 ? 1 : 0;
  }
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &open, 1, MPI_INT, MPI_MIN, world), "MPI_Allreduce");
  {
    Hdf5Lock lock;
    if (open) {
      file.close();
    } else {
      file.release();
    }
  }
  check_mpi(MPI_Barrier(world), "MPI_Barrier");
  if (root) {
    std::error_code ec;
    fs::remove(tmp, ec);
  }
}

constexpr double kMiB = 1 << 20;

// An upper bound on the file a save writes: three f32 copies of every
// parameter, plus HDF5's superblock, object headers and attributes (about
// 0.5 KiB per dataset and the config text; measured by the test
// CheckpointFile.FileIsItsDataWithoutHoles).
int64_t expected_file_bytes(const ModelConfig& model, const CheckpointMeta& meta) {
  int64_t elems = 0, datasets = 0;
  for (const UnitSpec& u : model_units(model))
    for (const ParamSpec& p : u.params) {
      int64_t n = 1;
      for (int64_t d : p.shape) n *= d;
      elems += n;
      ++datasets;
    }
  const int64_t groups = int64_t(std::size(kGroups));
  return groups * elems * int64_t(sizeof(float)) + groups * datasets * 1024 +
         int64_t(meta.config_text.size()) + 64 * 1024;
}

// `during`: the write itself hit ENOSPC; otherwise the space was found
// missing before anything was written.
std::string disk_full(const CheckpointMeta& m, const std::string& path, int64_t free_bytes,
                      int64_t need, bool during) {
  char numbers[128];
  std::snprintf(numbers, sizeof numbers, "%.1f MiB free, the checkpoint needs about %.1f MiB",
                double(free_bytes) / kMiB, double(need) / kMiB);
  return "cannot save step " + std::to_string(m.step) + " to '" + path + "': the disk is full (" +
         (during ? "ENOSPC during the write; " : "") + numbers +
         "); free space there or pass another --checkpoint-dir, then --resume auto continues "
         "from the last checkpoint saved, which is untouched";
}

// After a failed write, decides on rank 0 whether the disk was full: the
// MPI-IO layer says so on HDF5's stack, or the space is not there.
bool ran_out_of_space(const std::string& error, const std::string& stack, int64_t free_bytes,
                      int64_t need) {
  for (const char* sign : {"No space left", "NO_SPACE", "ENOSPC", "not enough space"})
    if (error.find(sign) != std::string::npos || stack.find(sign) != std::string::npos) return true;
  return free_bytes < need;
}

}  // namespace

void write_checkpoint_file(const SaveSource& src, const std::string& path,
                           const CheckpointMeta& meta, CheckpointIoStats* stats) {
  const MPI_Comm world = src.world;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tmp = CheckpointDir::tmp_path(path);
  const fs::path parent = fs::path(path).parent_path();
  const CheckpointDir dir(parent.empty() ? "." : parent.string());
  const int64_t need = expected_file_bytes(src.model, meta);
  on_root(world, [&] {
    dir.ensure_writable();
    // Refused before HDF5 opens anything, a full disk costs nothing and
    // leaves no half file. Once reserved, the space cannot run out under
    // the write, whose failure HDF5 cannot always clean up after.
    if (const int64_t free_bytes = dir.free_bytes(); free_bytes < need)
      throw Error(disk_full(meta, path, free_bytes, need, false));
    if (CheckpointDir::reserve(tmp, need) == ENOSPC)
      throw Error(disk_full(meta, path, dir.free_bytes(), need, false));
  });
  CheckpointMeta m = meta;
  m.format_version = kCheckpointFormatVersion;
  m.optimizer_steps = src.shards.optimizer_steps();
  m.world_size = size_of(world);
  m.shard_group_size = src.shards.shard_group_size();
  m.model = src.model;
  const bool writer = is_writer(src.shards.shard_rank(), world);
  if (stats) *stats = {};

  // The HDF5 lock is taken per piece, never across the whole save: a data
  // reader on another thread (and, under --async-checkpoint, the training
  // it feeds) waits for one call at most.
  std::string error, stack;
  // Outlives the try: a file HDF5 could not close (its last flush failed)
  // must be closed after making room, or HDF5's own clean-up at
  // MPI_Finalize dereferences the freed communicator and crashes.
  H5 file;
  try {
    {
      Hdf5Lock lock;
      h5_quiet();
      h5_clear_failure_stack();
      H5 fapl = make_fapl(world, tmp);
      // TRUNC: a .tmp left by a crashed save is simply overwritten.
      file = h5_own(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
                    "creating", tmp);
      write_meta(file.get(), m, tmp);
    }
    test_hooks::pause_in_save(tmp, rank_of(world));  // FSDP_TEST_CHECKPOINT_PAUSE_S
    Checksums sums;
    write_tensors(file.get(), src.model, src.shards, src.io, writer, tmp, stats, &sums);
    // Only the writers hashed anything, so the sum is each tensor's checksum.
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, sums.sums.data(), int(sums.sums.size()), MPI_UINT64_T,
                            MPI_SUM, world),
              "MPI_Allreduce");
    // The flush below syncs the whole file (MPI_File_sync) under the HDF5
    // lock, which the data reader needs every step: with gigabytes in the
    // page cache that is seconds of training stalled behind a background
    // save (an H200 node: 0.7 and 0.9 s on two steps after a 3.3 GB save).
    // Syncing them here first, outside the lock, leaves the flush little to do.
    if (writer) CheckpointDir::sync_file(tmp);
    Hdf5Lock lock;
    put_u64s(file.get(), kChecksumAttr, sums.sums, tmp);
    // Only flush reaches MPI_File_sync; close alone leaves data in caches.
    h5_check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "H5Fflush", tmp);
    if (H5Fclose(file.get()) < 0) h5_check(-1, "closing", tmp);
    file.release();
  } catch (const std::exception& e) {
    error = e.what();
    stack = h5_failure_stack();
  }
  int failed = error.empty() ? 0 : 1;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, world), "MPI_Allreduce");
  if (failed)
    abandon(tmp, file, world, [&](int64_t free_bytes) {
      if (ran_out_of_space(error, stack, free_bytes, need))
        error = disk_full(meta, path, free_bytes, need, true);
    });
  agree(world, error);
  on_root(world, [&] {
    CheckpointDir::release_reserve(tmp);
    CheckpointDir::publish(tmp, path);
  });
  if (stats) stats->seconds = seconds_since(t0);
}

void write_checkpoint_file(const CheckpointContext& c, const std::string& path,
                           const CheckpointMeta& meta, CheckpointIoStats* stats) {
  EngineShards shards(c);
  write_checkpoint_file(SaveSource{c.model, shards, c.world, c.io}, path, meta, stats);
}

std::string save_checkpoint(const SaveSource& src, const std::string& dir,
                            const CheckpointMeta& meta, const SaveOptions& options,
                            CheckpointIoStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const CheckpointDir d(dir);
  const std::string path = d.path_for_step(meta.step);
  write_checkpoint_file(src, path, meta, stats);
  // Only now, with the new file and the pointer to it durable, may old ones go.
  on_root(src.world, [&] {
    d.set_latest(path);
    d.prune(options.keep, options.protect);
  });
  if (stats) stats->seconds = seconds_since(t0);
  return path;
}

std::string save_checkpoint(const CheckpointContext& c, const std::string& dir,
                            const CheckpointMeta& meta, const SaveOptions& options,
                            CheckpointIoStats* stats) {
  EngineShards shards(c);
  return save_checkpoint(SaveSource{c.model, shards, c.world, c.io}, dir, meta, options, stats);
}

}  // namespace fsdp
