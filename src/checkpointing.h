// The trainer's side of checkpoints: when to resume from what, what metadata
// a save carries, and the guard that keeps a fresh run from overwriting an
// earlier run's checkpoints. The file format lives in shard/checkpoint.h.
#pragma once

#include <cstdint>
#include <string>

#include "data/batch_loader.h"
#include "model/ops.h"
#include "shard/dir_lock.h"
#include "shard/engine.h"
#include "src/options.h"

namespace fsdp {

struct RunPosition {
  int64_t step = 0;         // optimizer steps completed
  int64_t tokens_seen = 0;  // training tokens consumed by those steps
  std::string resumed_from;
};

// Claims --checkpoint-dir for this run before any training, on rank 0: makes
// it and proves it writable, locks it against a second run (the lock lasts
// as long as the returned object), refuses to start over where checkpoints
// exist without --resume (that would replace them), then deletes the .tmp
// files of crashed saves, saying so. Throws fsdp::Error naming the directory
// and what to do. Collective; without --checkpoint-dir it does nothing.
DirLock claim_checkpoint_dir(const Options& o, MPI_Comm world);

// Applies --resume: loads engine state and the data order (into `loader`;
// none under --eval-only, which needs only the weights), or returns step 0.
// Prints (rank 0) what it resumed from and any damaged checkpoint it skipped.
RunPosition resume_if_asked(const Options& o, FsdpEngine& engine, Ops& ops, BatchLoader* loader,
                            MPI_Comm world, bool lead);

// Saves after `pos.step` steps; returns the file written. Collective.
std::string save_run(const Options& o, const RunPosition& pos, FsdpEngine& engine, Ops& ops,
                     const BatchLoader& loader, MPI_Comm world);

}  // namespace fsdp
