// The trainer's side of checkpoints: when to resume from what, what metadata
// a save carries, and the guard that keeps a fresh run from overwriting an
// earlier run's checkpoints. The files themselves are checkpoint/'s.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/background_save.h"
#include "checkpoint/context.h"
#include "checkpoint/dir_lock.h"
#include "checkpoint/meta.h"
#include "data/batch_loader.h"
#include "src/options/options.h"

namespace fsdp {

struct RunPosition {
  int64_t step = 0;         // optimizer steps completed
  int64_t tokens_seen = 0;  // training tokens consumed by those steps
  std::string resumed_from;
  std::string initialised_from;  // --init-from's file, where it was used
  int64_t initialised_step = 0;  // the step that file was saved at (--eval-only reports it)
  // --time-budget (src/policy/time_budget.h): the step count it fixed (0: not yet)
  // and the seconds the run had used here, over every process that ran it.
  int64_t budget_steps = 0;
  double budget_used_s = 0;
  // --on-divergence (src/policy/divergence.h): the losses of the last applied
  // steps, the rollbacks made, and the [first, end) ranges of global
  // sequence positions they skipped, in pairs.
  std::vector<double> loss_history;
  int rollbacks = 0;
  std::vector<int64_t> skipped_sequences;
};

// Claims --checkpoint-dir for this run before any training, on rank 0: makes
// it and proves it writable, locks it against a second run (the lock lasts
// as long as the returned object), refuses to start over where checkpoints
// exist without --resume (that would replace them), then deletes the .tmp
// files of crashed saves, saying so. Throws fsdp::Error naming the directory
// and what to do. Collective; without --checkpoint-dir it does nothing.
DirLock claim_checkpoint_dir(const Options& o, MPI_Comm world);

// The trainer's checkpoints once the engine is built: one object made with
// everything a save and a resume work on, so a save is one call with the
// position. `loader` is the training data's order, saved and restored with
// the weights; null under --eval-only, which needs only the weights.
class RunCheckpoints {
 public:
  RunCheckpoints(const Options& o, const CheckpointContext& context, BatchLoader* loader,
                 bool lead);

  // Applies --resume: loads engine state and the data order, or returns
  // step 0, with --init-from's weights where it found no checkpoint. Prints
  // (rank 0) what it resumed from and any damaged checkpoint it skipped.
  // Collective.
  RunPosition resume();

  // Saves after `pos.step` steps. Under --async-checkpoint only starts the
  // save (checkpoint/background_save.h): no other may be in flight. Collective.
  struct Saving {
    std::string path;         // written, or being written in the background
    bool background = false;  // --async-checkpoint: finish_background_save() ends it
    int64_t copy_bytes = 0;   // the host copy the step paid for, in the background case
    double copy_s = 0;
  };
  Saving save(const RunPosition& pos);
  // --async-checkpoint: whether this rank's part of the save in flight has
  // ended (true when none is): to be agreed over every rank before finishing.
  bool background_save_done() const { return !background_ || background_->done(); }
  // Waits for the save in flight; what it wrote, or nullopt when none was in
  // flight. Throws its error on every rank alike. Collective.
  std::optional<BackgroundSave::Finished> finish_background_save();

  // --on-divergence rollback: loads the newest sound checkpoint of
  // --checkpoint-dir and continues the data order at position `skip_to` (the
  // bad step's end), so the positions from the checkpoint's up to there are
  // never trained on. Returns the checkpoint's position, its range of skipped
  // positions appended (its rollback count is the caller's to raise).
  // Collective.
  RunPosition roll_back(int64_t skip_to);

 private:
  // A checkpoint loaded into the engine, and what it says about the run.
  struct Loaded {
    std::string path;     // "" where `spec` found none
    std::string warning;  // resolve_resume's, for rank 0 to print
    CheckpointMeta meta;
    SamplerState sampler;
  };
  // Loads --resume's kind of `spec` (auto, or a file); under auto a damaged
  // file is skipped, with a warning, for the one before it. Collective.
  Loaded load(const std::string& spec);
  void reset_optimizer_state();  // --reset-optimizer: zero moments and momentum, step 0
  RunPosition init_from();       // --init-from: the weights, all else afresh
  void zero_optimizer_state();   // moments and momentum zero, step count 0
  const Options& o_;
  CheckpointContext context_;
  BatchLoader* loader_;
  bool lead_;  // rank 0 prints
  // --reset-optimizer: checkpoints up to this step hold optimizer state the
  // run reset at its resume (-1: none).
  int64_t reset_through_ = -1;
  std::optional<BackgroundSave> background_;  // --async-checkpoint
};

}  // namespace fsdp
