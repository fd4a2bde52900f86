// How a watchdog ends the job when a collective cannot finish: within a
// bound, and never by pulling a communicator out from under the thread that
// is inside it. NCCL's calls on one communicator must not overlap (a
// non-blocking communicator's ncclCommGetAsyncError joins and frees the
// group job of the last collective), so every call holds the communicator's
// lock; ncclCommAbort then MPI_Abort can each hang on a broken peer, so each
// gets a bounded wait. Free of CUDA and MPI, so the CPU tests check it.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>

namespace fsdp {

// Runs `step` on a thread of its own and waits at most `bound` for it.
// Returns whether it finished; an overrunning step is left running detached
// (the process is about to end), so it must own what it touches.
bool run_bounded(std::function<void()> step, std::chrono::duration<double> bound);

struct AbortOutcome {
  bool locked = false;        // the communicator's lock was taken (and is kept)
  bool comm_aborted = false;  // abort_comm ran, and finished within the bound
  bool job_ended = false;     // end_job returned within the bound (MPI_Abort never does)
};

// 1. Takes `comm_lock`, waiting at most `lock_wait` (the training thread
//    holds it for one NCCL call at a time, so it is free within
//    microseconds unless that call itself hangs). With it, runs
//    `abort_comm` (ncclCommAbort: unblocks this rank's GPU) for at most
//    `step_bound`; without it, skips that: aborting a communicator while
//    another thread is inside it is a use after free, whose crash would hide
//    the watchdog's line. The lock is never given back, so the training
//    thread cannot enter the aborted communicator again.
// 2. Runs `end_job` (MPI_Abort: takes down the peers still waiting) for at
//    most `step_bound`. The caller exits the process if this returns.
AbortOutcome abort_bounded(std::timed_mutex& comm_lock, std::function<void()> abort_comm,
                           std::function<void()> end_job, std::chrono::duration<double> lock_wait,
                           std::chrono::duration<double> step_bound);

}  // namespace fsdp
