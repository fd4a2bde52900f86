// Checkpointer (checkpointer.h): when the run saves, and what each save and
// load cost, in the metrics and the log.
#include "src/trainer/checkpointer.h"

#include <chrono>
#include <cstdio>

#include "comm/watchdog.h"
#include "src/policy/cadence.h"

namespace fsdp {

Checkpointer::Checkpointer(const Options& o, const CheckpointContext& context, BatchLoader* loader,
                           MetricsLog& metrics, bool lead)
    : o_(o),
      engine_(context.engine),
      files_(o, context, loader, lead),
      metrics_(metrics),
      lead_(lead) {}

RunPosition Checkpointer::resume() {
  // Collective parallel-HDF5 reads: a rank stuck here holds up all of them.
  WatchScope watch("checkpoint load (--resume, --init-from)");
  return files_.resume();
}

bool Checkpointer::due(int done, bool last, bool stop) const {
  return !o_.checkpoint.dir.empty() && (last || stop || every(o_.checkpoint.every, done));
}

void Checkpointer::save(int64_t step, const std::string& steps_text,
                        const std::function<RunPosition()>& position) {
  // Weights are finite after every applied step unless the update itself
  // overflowed; a checkpoint of them would be resumed by --resume auto.
  if (!engine_.masters_finite())
    throw_agreed_error("not saving step ", step,
                       ": the weights hold NaN or Inf after the update; lower --lr");
  // --async-checkpoint: at most one save in flight, so the previous one is
  // finished first; a step that waits for it here says so in the metrics.
  const auto t0 = std::chrono::steady_clock::now();
  finish_background_save();
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const RunPosition pos = position();
  RunCheckpoints::Saving s;
  {
    // Collective parallel-HDF5 writes: the whole save is one wait on peers
    // and the file system, watched like a collective.
    WatchScope watch("checkpoint save of step " + std::to_string(pos.step));
    s = files_.save(pos);
  }
  if (!s.background) {
    metrics_.write({{"step", std::to_string(pos.step)}, {"checkpoint", json_string(s.path)}});
    if (lead_)
      std::printf("step %5lld/%s | saved %s\n", (long long)pos.step, steps_text.c_str(),
                  s.path.c_str());
    return;
  }
  // What the step paid: the wait for the previous save and the host copy.
  metrics_.write({{"step", std::to_string(pos.step)},
                  {"checkpoint_started", json_string(s.path)},
                  {"host_copy_bytes", std::to_string(s.copy_bytes)},
                  {"host_copy_s", json_number(s.copy_s)},
                  {"waited_for_previous_save_s", json_number(waited_s)}});
  if (lead_)
    std::printf("step %5lld/%s | saving %s in the background (%.0f MB copied to host in %.0f ms)\n",
                (long long)pos.step, steps_text.c_str(), s.path.c_str(), s.copy_bytes / 1e6,
                s.copy_s * 1e3);
}

void Checkpointer::finish_background_save() {
  const auto f = files_.finish_background_save();
  if (!f) return;
  const double mb_s = f->seconds > 0 ? f->file_bytes / 1e6 / f->seconds : 0;
  metrics_.write({{"step", std::to_string(f->step)},
                  {"checkpoint", json_string(f->path)},
                  {"background", "true"},
                  {"file_bytes", std::to_string(f->file_bytes)},
                  {"write_s", json_number(f->seconds)},
                  {"write_mb_per_s", json_number(mb_s)}});
  if (lead_)
    std::printf(
        "fsdptrain: saved %s (step %lld, written in the background: %.0f MB in %.1f s, "
        "%.0f MB/s)\n",
        f->path.c_str(), (long long)f->step, f->file_bytes / 1e6, f->seconds, mb_s);
}

RunPosition Checkpointer::roll_back(int step, int64_t skip_to) {
  // The newest checkpoint may still be being written (--async-checkpoint).
  finish_background_save();
  // Collective parallel-HDF5 reads, watched like the resume's.
  WatchScope watch("checkpoint load (rollback after step " + std::to_string(step + 1) + ")");
  return files_.roll_back(skip_to);
}

}  // namespace fsdp
