// The trainer's side of checkpoints: when to resume from what, what metadata
// a save carries, and the guard that keeps a fresh run from overwriting an
// earlier run's checkpoints. The file format lives in shard/checkpoint.h.
#pragma once

#include <cstdint>
#include <string>

#include "data/batch_loader.h"
#include "model/ops.h"
#include "shard/engine.h"
#include "src/options.h"

namespace fsdp {

struct RunPosition {
  int64_t step = 0;         // optimizer steps completed
  int64_t tokens_seen = 0;  // training tokens consumed by those steps
  std::string resumed_from;
};

// Throws when --checkpoint-dir already holds checkpoints and no --resume was
// given: starting over there would replace them. Collective.
void refuse_to_overwrite(const Options& o, MPI_Comm world);

// Applies --resume: loads engine state and the data order, or returns step 0.
// Prints (rank 0) what it resumed from and any damaged checkpoint it skipped.
RunPosition resume_if_asked(const Options& o, FsdpEngine& engine, Ops& ops, BatchLoader& loader,
                            MPI_Comm world, bool lead);

// Saves after `pos.step` steps; returns the file written. Collective.
std::string save_run(const Options& o, const RunPosition& pos, FsdpEngine& engine, Ops& ops,
                     const BatchLoader& loader, MPI_Comm world);

}  // namespace fsdp
