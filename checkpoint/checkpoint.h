// Saving, loading and choosing checkpoints (the layout: checkpoint/meta.h).
//
// Every function here is collective over the context's world (or `world`)
// and throws fsdp::Error on every rank alike. Saving lives in save.cpp,
// loading and choosing what to resume from in load.cpp; the file's contents
// (file_format.h), its HDF5 plumbing (h5.h) and the directory (dir.h) are
// theirs alone.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "checkpoint/context.h"
#include "checkpoint/meta.h"
#include "checkpoint/shard_source.h"

namespace fsdp {

struct SaveOptions {
  int keep = 0;         // keep the newest K checkpoints (0: keep all)
  std::string protect;  // never delete this one (the file the run resumed from)
};

// What a save writes, and with which ranks: the model, this rank's shards
// (the engine's, or a snapshot of them: checkpoint/shard_source.h) and the
// communicator of every rank (under --async-checkpoint the save thread's own).
struct SaveSource {
  const ModelConfig& model;
  ShardSource& shards;
  MPI_Comm world;
  CheckpointIoOptions io = {};
};

// Writes DIR/step_<step>.h5 crash-safely (DIR/step_<step>.h5.tmp, flush,
// close, barrier, rename, fsync DIR), then points DIR/latest at it the same
// way, then prunes to options.keep. Creates DIR if needed. Returns the path.
// Collective over `src.world`.
std::string save_checkpoint(const SaveSource& src, const std::string& dir,
                            const CheckpointMeta& meta, const SaveOptions& options = {},
                            CheckpointIoStats* stats = nullptr);
// The same, straight from the context's engine.
std::string save_checkpoint(const CheckpointContext& c, const std::string& dir,
                            const CheckpointMeta& meta, const SaveOptions& options = {},
                            CheckpointIoStats* stats = nullptr);

// The file-writing half of save_checkpoint: writes `path` via `path`.tmp and
// renames it into place, without touching `latest`.
void write_checkpoint_file(const SaveSource& src, const std::string& path,
                           const CheckpointMeta& meta, CheckpointIoStats* stats = nullptr);
void write_checkpoint_file(const CheckpointContext& c, const std::string& path,
                           const CheckpointMeta& meta, CheckpointIoStats* stats = nullptr);

// Validates the file against the context's model (opens, format version,
// every dataset present in its expected shape), then reads each rank's slices
// into the engine's masters and moments, sets its optimizer step count and
// refreshes its send buffers. Works for any world and shard-group size.
CheckpointMeta load_checkpoint(const CheckpointContext& c, const std::string& path,
                               CheckpointIoStats* stats = nullptr);

// Only the metadata (e.g. to show what a checkpoint was trained with). Given
// `model`, also refuses a file whose fields or datasets do not fit it, with
// the error a load would give, before anything is built to load it into.
CheckpointMeta read_checkpoint_meta(const std::string& path, MPI_Comm world,
                                    const ModelConfig* model = nullptr);

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
