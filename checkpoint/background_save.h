// Checkpoints written while training goes on (--async-checkpoint).
//
// start() is all a step pays: it copies this rank's shards to host memory
// (a ShardSnapshot, checkpoint/shard_source.h) and hands the write to a
// thread of its own. The thread runs the ordinary save_checkpoint on the
// snapshot over its own duplicate of the world communicator, so its
// collectives (the file's MPI-IO, the agreement on errors) never meet the
// training's, and it takes the HDF5 lock one dataset at a time, so the data
// reader is not held up by the save. The file, its checksums, the rename
// into place, `latest` and pruning are a save's as always: a crash during a
// background save leaves the previous checkpoint intact, and its .tmp is
// removed by the next run (claim_checkpoint_dir).
//
// At most one save is in flight: start() refuses to run while one is, and
// the caller finish()es it first. A save's outcome is agreed by every rank's
// thread on the save's communicator, so finish() returns or throws the same
// on every rank; done() is this rank's alone, for a caller to agree on
// (with an all-reduce) before finishing without waiting.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/shard_source.h"

namespace fsdp {

class BackgroundSave {
 public:
  // Collective over c.world, which it duplicates. Throws fsdp::Error when
  // MPI was not initialised with MPI_THREAD_MULTIPLE (the save thread and
  // the training both call MPI).
  explicit BackgroundSave(const CheckpointContext& c);
  // Waits for a save in flight: the checkpoint it writes is not lost to an
  // error elsewhere. A destructor cannot throw, so a failure of that save
  // is printed (rank 0) as a warning.
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  struct Started {
    std::string path;   // the file the save will write
    int64_t bytes = 0;  // host bytes copied from the engine
    double copy_s = 0;  // what the copy took: the step's whole cost
  };
  // Copies the shards now and starts saving them as `dir`'s checkpoint of
  // meta.step. Collective over the context's world.
  Started start(const std::string& dir, const CheckpointMeta& meta, const SaveOptions& options);

  bool in_flight() const { return thread_.joinable(); }
  // This rank's part of the save in flight has ended (true when none is).
  bool done() const { return !in_flight() || done_.load(std::memory_order_acquire); }

  struct Finished {
    std::string path;
    int64_t step = 0;
    int64_t file_bytes = 0;  // the file's size
    double seconds = 0;      // from start() to the rename and `latest`, on this rank
  };
  // Waits for the save in flight and says what it wrote (nullopt: none was
  // in flight). Throws its error, as fsdp::AgreedError on every rank alike.
  std::optional<Finished> finish();

 private:
  CheckpointContext context_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the save thread's
  int rank_ = 0;
  ShardSnapshot snapshot_;  // reused: the host memory is allocated once
  std::thread thread_;
  std::atomic<bool> done_{false};
  Finished result_;
  std::exception_ptr error_;
};

}  // namespace fsdp
