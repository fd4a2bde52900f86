// The run's saves and loads, and when each happens. It owns the save policy
// (--checkpoint-every, the last step, a stop) and carries a save out,
// ordinary or under --async-checkpoint started at its step and finished at a
// later step boundary, with what each cost in the metrics. The resume and a
// rollback's load are watched like collectives. RunCheckpoints
// (checkpointing.h) holds what they write and read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "src/options/options.h"
#include "src/trainer/checkpointing.h"
#include "src/trainer/metrics.h"

namespace fsdp {

class Checkpointer {
 public:
  // `loader`: the training data's order, saved with the weights (null under
  // --eval-only).
  Checkpointer(const Options& o, const CheckpointContext& context, BatchLoader* loader,
               MetricsLog& metrics, bool lead);

  // --resume and --init-from (RunCheckpoints::resume). Collective.
  RunPosition resume();
  // Whether applied step `done` saves: a run with --checkpoint-dir saves on
  // --checkpoint-every's period, at its last step and where it stops early.
  bool due(int done, bool last, bool stop) const;
  // Saves after `step` steps the position `position` returns, asked for
  // once the save before it is finished (so the budget's clock it carries
  // counts the wait). Refuses weights that hold NaN or Inf. Collective.
  void save(int64_t step, const std::string& steps_text,
            const std::function<RunPosition()>& position);
  // --async-checkpoint: whether this rank's part of the save in flight has
  // ended (true when none is), to be agreed over every rank; then finishing
  // it reports what it wrote. Throws its error on every rank alike.
  // Collective.
  bool background_save_done() const { return files_.background_save_done(); }
  void finish_background_save();
  // --on-divergence rollback after 0-based `step`: the newest checkpoint,
  // the data order continued at `skip_to` (RunCheckpoints::roll_back).
  // Collective.
  RunPosition roll_back(int step, int64_t skip_to);

 private:
  const Options& o_;
  FsdpEngine& engine_;
  RunCheckpoints files_;
  MetricsLog& metrics_;
  bool lead_;
};

}  // namespace fsdp
