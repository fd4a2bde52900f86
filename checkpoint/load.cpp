// Loading checkpoints and choosing which one to resume from. Every file is
// first probed on rank 0 alone (opens, metadata in range, the model's
// datasets in their shapes), so a damaged or foreign file is refused with
// one message before any rank reads a tensor; the collective read then
// checks each tensor against its checksum.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/collective.h"
#include "checkpoint/dir.h"
#include "checkpoint/file_format.h"
#include "checkpoint/h5.h"
#include "common/error.h"
#include "common/hdf5_lock.h"

namespace fsdp {

namespace {

using namespace ckpt;
namespace fs = std::filesystem;

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

// Every replica reads its shard, so the tensors were hashed `replicas` times.
// Every file of format 1 this program writes has checksums (read_meta refuses
// one without): accepting a file without them would let a changed tensor load.
void verify_checksums(hid_t file, Checksums& sums, int replicas, MPI_Comm world,
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
CheckpointMeta read_file(const std::string& path, const ModelConfig* model, MPI_Comm world,
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

}  // namespace

bool checkpoint_is_damaged(const std::string& error) {
  return error.find("' is damaged") != std::string::npos;
}

CheckpointMeta load_checkpoint(const CheckpointContext& c, const std::string& path,
                               CheckpointIoStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  if (stats) *stats = {};
  const CheckpointMeta meta = read_file(path, &c.model, c.world, [&](hid_t file) {
    Checksums sums;
    read_tensors(file, c, path, stats, &sums);
    verify_checksums(file, sums, size_of(c.world) / shard_group_size(c.engine), c.world, path);
  });
  c.engine.set_optimizer_steps(meta.optimizer_steps);
  c.engine.refresh_send_buffers();
  if (stats) stats->seconds = seconds_since(t0);
  return meta;
}

CheckpointMeta read_checkpoint_meta(const std::string& path, MPI_Comm world,
                                    const ModelConfig* model) {
  return read_file(path, model, world, [](hid_t) {});
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
