#include "checkpoint/background_save.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "checkpoint/collective.h"
#include "checkpoint/dir.h"
#include "comm/mpi_check.h"
#include "comm/watchdog.h"
#include "common/error.h"

namespace fsdp {

BackgroundSave::BackgroundSave(const CheckpointContext& c) : context_(c) {
  int level = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&level), "MPI_Query_thread");
  if (level < MPI_THREAD_MULTIPLE)
    throw_error("--async-checkpoint: this MPI library provides thread level ", level,
                ", but a save on its own thread needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                "); run without --async-checkpoint, or with an MPI built with thread support");
  check_mpi(MPI_Comm_dup(c.world, &comm_), "MPI_Comm_dup");
  rank_ = ckpt::rank_of(comm_);
}

// A run that ends on an error still finishes the save in flight (its
// snapshot was taken before the error), and says so: the log is where a
// user looks for the step to resume from.
BackgroundSave::~BackgroundSave() {
  try {
    if (const auto f = finish(); f && rank_ == 0)
      std::printf(
          "fsdptrain: saved %s (step %lld, written in the background: %.0f MB in %.1f s, "
          "finished as the run ended)\n",
          f->path.c_str(), (long long)f->step, double(f->file_bytes) / 1e6, f->seconds);
  } catch (const std::exception& e) {
    if (rank_ == 0)
      std::fprintf(stderr, "fsdptrain: warning: the background save of step %lld failed: %s\n",
                   (long long)result_.step, e.what());
  }
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

BackgroundSave::Started BackgroundSave::start(const std::string& dir, const CheckpointMeta& meta,
                                              const SaveOptions& options) {
  FSDP_CHECK(!in_flight(), "a background save of step ", result_.step,
             " is still in flight; finish() it first");
  const auto t0 = std::chrono::steady_clock::now();
  snapshot_.take(context_);
  Started s;
  s.copy_s = ckpt::seconds_since(t0);
  s.bytes = snapshot_.bytes();
  s.path = CheckpointDir(dir).path_for_step(meta.step);
  result_ = {};
  result_.path = s.path;
  result_.step = meta.step;
  error_ = nullptr;
  done_.store(false, std::memory_order_release);
  // The thread owns copies of what it needs; the engine and the device are
  // the training's again as soon as this returns.
  thread_ = std::thread([this, dir, meta, options, t0] {
    try {
      // A stuck peer or file system ends the job like a stuck collective.
      WatchScope watch("background checkpoint save of step " + std::to_string(meta.step));
      save_checkpoint(SaveSource{context_.model, snapshot_, comm_, context_.io}, dir, meta,
                      options);
      std::error_code ec;
      const auto size = std::filesystem::file_size(result_.path, ec);
      result_.file_bytes = ec ? 0 : int64_t(size);
    } catch (...) {
      error_ = std::current_exception();
    }
    result_.seconds = ckpt::seconds_since(t0);
    done_.store(true, std::memory_order_release);
  });
  return s;
}

std::optional<BackgroundSave::Finished> BackgroundSave::finish() {
  if (!in_flight()) return std::nullopt;
  thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return result_;
}

}  // namespace fsdp
