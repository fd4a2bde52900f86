// Saving, loading and choosing checkpoints, collectively. Decisions that
// depend on the file system (is the directory writable, is this file
// damaged, which checkpoint is newest) are made once, on rank 0, and shared,
// so every rank takes the same branch and throws the same error.
#include "shard/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "comm/mpi_check.h"
#include "common/error.h"
#include "common/hdf5_lock.h"
#include "model/params.h"
#include "shard/checkpoint_dir.h"
#include "shard/checkpoint_h5.h"
#include "shard/checkpoint_io.h"

namespace fsdp {

namespace {

using namespace ckpt;
namespace fs = std::filesystem;

int rank_of(MPI_Comm c) {
  int r = 0;
  check_mpi(MPI_Comm_rank(c, &r), "MPI_Comm_rank");
  return r;
}

int size_of(MPI_Comm c) {
  int n = 0;
  check_mpi(MPI_Comm_size(c, &n), "MPI_Comm_size");
  return n;
}

void bcast(std::string& s, int root, MPI_Comm c) {
  int64_t n = int64_t(s.size());
  check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, root, c), "MPI_Bcast");
  s.resize(size_t(n));
  if (n > 0) check_mpi(MPI_Bcast(s.data(), int(n), MPI_CHAR, root, c), "MPI_Bcast");
}

// Every rank throws the lowest failing rank's error, or none does. Also the
// barrier between writing and renaming.
void agree(MPI_Comm world, std::string error) {
  const int size = size_of(world);
  int first = error.empty() ? size : rank_of(world);
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, world), "MPI_Allreduce");
  if (first == size) return;
  bcast(error, first, world);
  // Every rank holds the same message: main() may print it once and let all
  // ranks exit normally instead of aborting the job.
  throw AgreedError(error);
}

// Runs f on rank 0 only and shares its fsdp::Error with every rank.
template <typename F>
void on_root(MPI_Comm world, F&& f) {
  std::string error;
  if (rank_of(world) == 0) try {
      f();
    } catch (const std::exception& e) {
      // Any failure on rank 0 (std::filesystem too) must reach every rank,
      // or they would wait for it in the next collective.
      error = e.what();
    }
  agree(world, error);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Replicas hold identical shards, so of the ranks with the same shard rank
// only the lowest world rank writes; the others select nothing.
bool is_writer(const FsdpEngine& engine, MPI_Comm world) {
  const int me = engine.shard_rank();
  std::vector<int> all(size_t(size_of(world)));
  check_mpi(MPI_Allgather(&me, 1, MPI_INT, all.data(), 1, MPI_INT, world), "MPI_Allgather");
  for (int r = 0; r < rank_of(world); ++r)
    if (all[size_t(r)] == me) return false;
  return true;
}

int shard_group_size(const FsdpEngine& engine) {
  const UnitLayout& l = engine.layout(0);
  return int(l.padded / l.shard);
}

std::string damaged(const std::string& path, const std::string& reason) {
  return "checkpoint '" + path + "' is damaged or truncated: " + reason;
}

// A damaged file's error says what to do instead; other errors (a model
// mismatch) carry their own advice.
std::string advise(const std::string& error) {
  return checkpoint_is_damaged(error) ? error + "; use an earlier one or --resume PATH" : error;
}

// Single-process open for checks on rank 0. Empty H5 and *error set on failure.
H5 open_serial(const std::string& path, std::string* error) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    *error = "checkpoint '" + path + "' does not exist or is not a file";
    return H5();
  }
  H5 fapl = make_fapl(MPI_COMM_NULL, path);
  // A truncated file fails here: HDF5 compares the stored end of file with
  // the real one.
  H5 file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (file.get() < 0) *error = damaged(path, h5_reason());
  return file;
}

// Why `path` cannot be resumed from ("" if it can), checking the current
// model's datasets too when `model` is given. Rank 0 only.
std::string probe(const std::string& path, const ModelConfig* model) {
  Hdf5Lock lock;
  h5_quiet();
  std::string error;
  H5 file = open_serial(path, &error);
  if (!error.empty()) return error;
  try {
    const CheckpointMeta meta = read_meta(file.get(), path);
    // The saved model's fields first: they name the flag to pass, where a
    // dataset's shape could only hint at it.
    if (model) error = model_mismatch(meta.model, *model, path);
    if (model && error.empty()) error = check_datasets(file.get(), *model, path);
  } catch (const std::exception& e) {
    error = e.what();
  }
  return error;
}

H5 open_parallel(const std::string& path, MPI_Comm world) {
  H5 fapl = make_fapl(world, path);
  return h5_own(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, "opening", path);
}

// Test hook: FSDP_TEST_CHECKPOINT_PAUSE_S=N holds every rank for N seconds
// with the .tmp file half written, so a test can kill -9 a rank right there,
// or fill the disk. With FSDP_TEST_CHECKPOINT_PAUSE_UNTIL=PATH the pause ends
// as soon as PATH exists, so such a test need not sleep out all N seconds.
void pause_for_tests(const std::string& tmp, int rank) {
  const char* s = std::getenv("FSDP_TEST_CHECKPOINT_PAUSE_S");
  if (!s) return;
  if (rank == 0)
    std::fprintf(stderr, "checkpoint: pausing %s s while writing '%s'\n", s, tmp.c_str());
  const char* until = std::getenv("FSDP_TEST_CHECKPOINT_PAUSE_UNTIL");
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(s));
  while (std::chrono::steady_clock::now() < end) {
    if (std::error_code ec; until && fs::exists(until, ec)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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
  int open = file.valid() && H5Iis_valid(file.get()) > 0 ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &open, 1, MPI_INT, MPI_MIN, world), "MPI_Allreduce");
  if (open) {
    file.close();
  } else {
    file.release();
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

void write_checkpoint_file(const std::string& path, const CheckpointMeta& meta,
                           const ModelConfig& model, FsdpEngine& engine, Ops& ops, MPI_Comm world,
                           const CheckpointIoOptions& io, CheckpointIoStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tmp = CheckpointDir::tmp_path(path);
  const fs::path parent = fs::path(path).parent_path();
  const CheckpointDir dir(parent.empty() ? "." : parent.string());
  const int64_t need = expected_file_bytes(model, meta);
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
  m.optimizer_steps = engine.optimizer_steps();
  m.world_size = size_of(world);
  m.shard_group_size = shard_group_size(engine);
  m.model = model;
  const Selection sel{is_writer(engine, world), io};
  if (stats) *stats = {};

  std::string error;
  {
    Hdf5Lock lock;
    h5_quiet();
    // Outlives the try: a file HDF5 could not close (its last flush failed)
    // must be closed after making room, or HDF5's own clean-up at
    // MPI_Finalize dereferences the freed communicator and crashes.
    H5 file;
    std::string stack;
    try {
      h5_clear_failure_stack();
      H5 fapl = make_fapl(world, tmp);
      // TRUNC: a .tmp left by a crashed save is simply overwritten.
      file = h5_own(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
                    "creating", tmp);
      write_meta(file.get(), m, tmp);
      pause_for_tests(tmp, rank_of(world));
      Checksums sums;
      write_tensors(file.get(), model, engine, ops, sel, tmp, stats, &sums);
      // Only the writers hashed anything, so the sum is each tensor's checksum.
      MPI_Allreduce(MPI_IN_PLACE, sums.sums.data(), int(sums.sums.size()), MPI_UINT64_T, MPI_SUM,
                    world);
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
  }
  agree(world, error);
  on_root(world, [&] {
    CheckpointDir::release_reserve(tmp);
    CheckpointDir::publish(tmp, path);
  });
  if (stats) stats->seconds = seconds_since(t0);
}

std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                            const ModelConfig& model, FsdpEngine& engine, Ops& ops, MPI_Comm world,
                            const SaveOptions& options, CheckpointIoStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const CheckpointDir d(dir);
  const std::string path = d.path_for_step(meta.step);
  write_checkpoint_file(path, meta, model, engine, ops, world, options.io, stats);
  // Only now, with the new file and the pointer to it durable, may old ones go.
  on_root(world, [&] {
    d.set_latest(path);
    d.prune(options.keep, options.protect);
  });
  if (stats) stats->seconds = seconds_since(t0);
  return path;
}

bool checkpoint_is_damaged(const std::string& error) {
  return error.find("' is damaged") != std::string::npos;
}

// Every replica reads its shard, so the tensors were hashed `replicas` times.
// Every file of format 1 this program writes has checksums (read_meta refuses
// one without): accepting a file without them would let a changed tensor load.
static void verify_checksums(hid_t file, Checksums& sums, int replicas, MPI_Comm world,
                             const std::string& path) {
  MPI_Allreduce(MPI_IN_PLACE, sums.sums.data(), int(sums.sums.size()), MPI_UINT64_T, MPI_SUM,
                world);
  const std::vector<uint64_t> stored = get_u64s(file, kChecksumAttr, path);
  if (stored.size() != sums.sums.size())
    throw_error("checkpoint '", path, "' is damaged: it lists ", stored.size(),
                " tensor checksums for ", sums.sums.size(), " tensors");
  for (size_t i = 0; i < stored.size(); ++i)
    if (stored[i] * uint64_t(replicas) != sums.sums[i])
      throw_error("checkpoint '", path, "' is damaged: tensor ", sums.names[i],
                  " does not match its checksum (its bytes changed after the save); use an "
                  "earlier checkpoint with --resume PATH");
}

// Probes `path` on rank 0 (against `model` when given), opens it on every
// rank, reads the metadata, then runs `more` on the open file; errors from any
// rank reach every rank.
static CheckpointMeta read_file(const std::string& path, const ModelConfig* model, MPI_Comm world,
                                const std::function<void(hid_t)>& more) {
  on_root(world, [&] {
    if (std::string error = probe(path, model); !error.empty()) throw Error(advise(error));
  });
  CheckpointMeta meta;
  std::string error;
  try {
    Hdf5Lock lock;
    h5_quiet();
    H5 file = open_parallel(path, world);
    meta = read_meta(file.get(), path);
    more(file.get());
    h5_close(file, path);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(world, error);
  return meta;
}

CheckpointMeta load_checkpoint(const std::string& path, const ModelConfig& model,
                               FsdpEngine& engine, Ops& ops, MPI_Comm world,
                               const CheckpointIoOptions& io, CheckpointIoStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  if (stats) *stats = {};
  const CheckpointMeta meta = read_file(path, &model, world, [&](hid_t file) {
    Checksums sums;
    read_tensors(file, model, engine, ops, Selection{true, io}, path, stats, &sums);
    verify_checksums(file, sums, size_of(world) / shard_group_size(engine), world, path);
  });
  engine.set_optimizer_steps(meta.optimizer_steps);
  engine.refresh_send_buffers();
  if (stats) stats->seconds = seconds_since(t0);
  return meta;
}

CheckpointMeta read_checkpoint_meta(const std::string& path, MPI_Comm world) {
  return read_file(path, nullptr, world, [](hid_t) {});
}

ResumeChoice resolve_resume(const std::string& resume, const std::string& dir, MPI_Comm world,
                            const std::vector<std::string>& skip) {
  ResumeChoice choice;
  on_root(world, [&] {
    if (resume != "auto") {
      if (std::string error = probe(resume, nullptr); !error.empty()) throw Error(advise(error));
      choice.path = resume;
      return;
    }
    const CheckpointDir d(dir);
    std::vector<std::string> candidates;
    // `latest` first: after a resume from an older file it names this run's
    // newest save, which a higher-numbered leftover must not shadow.
    if (auto p = d.latest()) candidates.push_back(*p);
    for (const auto& p : d.list())
      if (std::error_code ec; candidates.empty() || !fs::equivalent(p, candidates.front(), ec))
        candidates.push_back(p);
    std::vector<std::string> skipped;
    for (const auto& p : candidates) {
      const bool known_bad = std::find(skip.begin(), skip.end(), p) != skip.end();
      const std::string error =
          known_bad ? "checkpoint '" + p + "' is damaged (said above)" : probe(p, nullptr);
      if (error.empty()) {
        choice.path = p;
        break;
      }
      skipped.push_back(error);
    }
    if (choice.path.empty() && !skipped.empty())
      throw_error("no loadable checkpoint in '", dir, "' (", skipped.front(),
                  "); pass --resume PATH, or move them away to start fresh");
    for (const auto& why : skipped) choice.warning += why + "; ";
    if (!skipped.empty())
      choice.warning += "resuming from the previous valid checkpoint '" + choice.path + "' instead";
  });
  bcast(choice.path, 0, world);
  bcast(choice.warning, 0, world);
  return choice;
}

}  // namespace fsdp
