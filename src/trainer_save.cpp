// The run's saves (src/checkpointing.h holds what they write): at the step
// that asks for one, or under --async-checkpoint started there and finished
// at a later step boundary, with what each cost in the metrics.
#include <chrono>
#include <cstdio>

#include "comm/watchdog.h"
#include "src/trainer.h"

namespace fsdp {

void Trainer::save() {
  // Weights are finite after every applied step unless the update itself
  // overflowed; a checkpoint of them would be resumed by --resume auto.
  if (!engine_->masters_finite())
    throw_agreed_error("not saving step ", pos_.step,
                       ": the weights hold NaN or Inf after the update; lower --lr");
  // --async-checkpoint: at most one save in flight, so the previous one is
  // finished first; a step that waits for it here says so in the metrics.
  const auto t0 = std::chrono::steady_clock::now();
  finish_background_save();
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pos_.budget_used_s = budget_used_s();
  pos_.loss_history = spikes_.history();
  RunCheckpoints::Saving s;
  {
    // Collective parallel-HDF5 writes: the whole save is one wait on peers
    // and the file system, watched like a collective.
    WatchScope watch("checkpoint save of step " + std::to_string(pos_.step));
    s = checkpoints_->save(pos_);
  }
  if (!s.background) {
    metrics_.write({{"step", std::to_string(pos_.step)}, {"checkpoint", json_string(s.path)}});
    if (lead_)
      std::printf("step %5lld/%s | saved %s\n", (long long)pos_.step, steps_text().c_str(),
                  s.path.c_str());
    return;
  }
  // What the step paid: the wait for the previous save and the host copy.
  metrics_.write({{"step", std::to_string(pos_.step)},
                  {"checkpoint_started", json_string(s.path)},
                  {"host_copy_bytes", std::to_string(s.copy_bytes)},
                  {"host_copy_s", json_number(s.copy_s)},
                  {"waited_for_previous_save_s", json_number(waited_s)}});
  if (lead_)
    std::printf("step %5lld/%s | saving %s in the background (%.0f MB copied to host in %.0f ms)\n",
                (long long)pos_.step, steps_text().c_str(), s.path.c_str(), s.copy_bytes / 1e6,
                s.copy_s * 1e3);
}

void Trainer::finish_background_save() {
  const auto f = checkpoints_->finish_background_save();
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

}  // namespace fsdp
