// Checkpoints: one parallel-HDF5 file per save, written collectively by every
// rank, holding each parameter and AdamW moment as a dataset in its logical
// shape (model/<name>, optim/exp_avg/<name>, optim/exp_avg_sq/<name>) plus the
// run's metadata as attributes. Each rank writes and reads only the slices its
// shard owns, so a file saved on one world and shard-group size loads on any
// other.
//
// File layout (format_version 1):
//   /            attrs format_version, step, tokens_seen, optimizer_steps, seed,
//                world_size, shard_group_size, config (INI text),
//                tensor_checksums (uint64, one per tensor)
//   /model       attrs vocab_size, n_layer, d_model, n_head, n_kv_head, d_ff,
//                max_seq_len, rope_theta, norm_eps, init_std, tie_embeddings, name;
//                one f32 dataset per parameter, e.g. model/blocks.3.attn.wq
//   /optim/exp_avg, /optim/exp_avg_sq   the same names and shapes
//   /sampler     one int64 attr per SamplerState::kNames entry
//
// Every function here is collective over `world` (all ranks of the shard and
// replicate groups together) and throws fsdp::Error on every rank alike.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/ops.h"
#include "shard/engine.h"

namespace fsdp {

constexpr int kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  // Filled by the caller before saving (identical on every rank).
  int64_t step = 0;  // optimizer steps completed; names the file
  int64_t tokens_seen = 0;
  uint64_t seed = 0;        // the run's --seed (parameter init)
  std::string config_text;  // the full configuration, INI
  // Data-sampler state as named int64 values: SamplerState::kNames zipped
  // with to_array(). Names are free-form, so shard/ need not know data/.
  std::vector<std::pair<std::string, int64_t>> sampler;

  // Filled by save from the engine and communicator, and by load from the file.
  int format_version = kCheckpointFormatVersion;
  int optimizer_steps = 0;
  int world_size = 0;
  int shard_group_size = 0;
  ModelConfig model;
};

struct CheckpointIoOptions {
  // MPI-IO before HDF5 1.12.3 breaks on calls of 2 GiB or more, so each rank's
  // part of a dataset is moved in collective calls of at most this many bytes.
  int64_t max_call_bytes = int64_t{1} << 30;
};

struct CheckpointIoStats {
  int64_t bytes = 0;             // tensor bytes this rank moved
  int data_calls = 0;            // collective H5Dwrite/H5Dread calls this rank made
  int not_collective_calls = 0;  // of those, how many HDF5 did not do collectively
  double seconds = 0;            // wall time of the whole save or load
};

struct SaveOptions {
  int keep = 0;         // keep the newest K checkpoints (0: keep all)
  std::string protect;  // never delete this one (the file the run resumed from)
  CheckpointIoOptions io;
};

// Writes DIR/step_<step>.h5 crash-safely (DIR/step_<step>.h5.tmp, flush,
// close, barrier, rename, fsync DIR), then points DIR/latest at it the same
// way, then prunes to options.keep. Creates DIR if needed. Returns the path.
std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                            const ModelConfig& model, FsdpEngine& engine, Ops& ops, MPI_Comm world,
                            const SaveOptions& options = {}, CheckpointIoStats* stats = nullptr);

// The file-writing half of save_checkpoint: writes `path` via `path`.tmp and
// renames it into place, without touching `latest`.
void write_checkpoint_file(const std::string& path, const CheckpointMeta& meta,
                           const ModelConfig& model, FsdpEngine& engine, Ops& ops, MPI_Comm world,
                           const CheckpointIoOptions& io = {}, CheckpointIoStats* stats = nullptr);

// Validates the file against `model` (opens, format version, every dataset
// present in its expected shape), then reads each rank's slices into the
// engine's masters and moments, sets its optimizer step count and refreshes
// its send buffers. Works for any world and shard-group size.
CheckpointMeta load_checkpoint(const std::string& path, const ModelConfig& model,
                               FsdpEngine& engine, Ops& ops, MPI_Comm world,
                               const CheckpointIoOptions& io = {},
                               CheckpointIoStats* stats = nullptr);

// Only the metadata (e.g. to show what a checkpoint was trained with).
CheckpointMeta read_checkpoint_meta(const std::string& path, MPI_Comm world);

// True for the errors of a file that is damaged (unreadable, truncated,
// metadata of the wrong type or out of range, a checksum mismatch), as
// opposed to one that is sound but does not fit this run (another model).
bool checkpoint_is_damaged(const std::string& error);

struct ResumeChoice {
  std::string path;     // empty: start fresh
  std::string warning;  // non-empty when a damaged newer checkpoint was skipped
};

// `resume` is "auto" or a path. auto: the newest loadable checkpoint in `dir`
// (the one `latest` names first, then step_*.h5 by step, newest first),
// skipping damaged ones with a warning; none at all is a fresh start. A path:
// that file, or an fsdp::Error saying why it cannot be used.
// `skip`: files already found damaged while loading (a checksum mismatch),
// passed over like files that fail the structural probe.
ResumeChoice resolve_resume(const std::string& resume, const std::string& dir, MPI_Comm world,
                            const std::vector<std::string>& skip = {});

}  // namespace fsdp
