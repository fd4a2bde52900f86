// The NCCL watchdog's way out (comm/bounded_abort.h), with the communicator's
// abort and MPI_Abort replaced by steps that finish, hang or find the lock
// taken. A hanging step is released at the end of its test, so that no
// detached thread outlives the state it touches.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/bounded_abort.h"

namespace fsdp {
namespace {

using namespace std::chrono_literals;

// A step that blocks until release(), as an ncclCommAbort or MPI_Abort stuck
// on a broken peer does.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

TEST(RunBounded, SaysWhetherTheStepFinished) {
  EXPECT_TRUE(run_bounded([] {}, 10s));
  auto gate = std::make_shared<Gate>();
  EXPECT_FALSE(run_bounded([gate] { gate->wait(); }, 50ms));
  gate->release();
  EXPECT_TRUE(run_bounded([] { throw 1; }, 10s)) << "a step that throws has finished";
}

TEST(AbortBounded, AbortsTheCommunicatorUnderItsLockThenEndsTheJob) {
  std::timed_mutex lock;
  std::atomic<int> order{0};
  int comm_at = -1, job_at = -1;
  std::atomic<bool> lock_held_during_abort{false};
  const AbortOutcome out = abort_bounded(
      lock,
      [&] {
        comm_at = order++;
        // the watchdog's thread holds it, so no other thread can take it now
        lock_held_during_abort = !lock.try_lock();
      },
      [&] { job_at = order++; }, 10s, 10s);
  EXPECT_TRUE(out.locked);
  EXPECT_TRUE(out.comm_aborted);
  EXPECT_TRUE(out.job_ended);
  EXPECT_EQ(comm_at, 0);
  EXPECT_EQ(job_at, 1);
  EXPECT_TRUE(lock_held_during_abort);
  // kept: the training thread must never enter the aborted communicator
  std::thread other([&] { EXPECT_FALSE(lock.try_lock()); });
  other.join();
  lock.unlock();
}

// The training thread is inside NCCL (it holds the lock, and that call
// hangs): aborting the communicator under it would be a use after free, so
// the job is ended without it.
TEST(AbortBounded, ABusyCommunicatorIsLeftAloneAndTheJobStillEnds) {
  std::timed_mutex lock;
  Gate inside;
  std::atomic<bool> holding{false};
  std::thread training([&] {
    std::lock_guard<std::timed_mutex> held(lock);
    holding = true;
    inside.wait();
  });
  while (!holding) std::this_thread::yield();
  bool comm_ran = false, job_ran = false;
  const AbortOutcome out = abort_bounded(
      lock, [&] { comm_ran = true; }, [&] { job_ran = true; }, 50ms, 10s);
  EXPECT_FALSE(out.locked);
  EXPECT_FALSE(out.comm_aborted);
  EXPECT_FALSE(comm_ran);
  EXPECT_TRUE(out.job_ended);
  EXPECT_TRUE(job_ran);
  inside.release();
  training.join();
}

// ncclCommAbort or MPI_Abort that hangs does not hold the way out.
TEST(AbortBounded, HangingStepsAreWaitedForOnlyUpToTheBound) {
  std::timed_mutex lock;
  auto comm_gate = std::make_shared<Gate>(), job_gate = std::make_shared<Gate>();
  const AbortOutcome out = abort_bounded(
      lock, [comm_gate] { comm_gate->wait(); }, [job_gate] { job_gate->wait(); }, 10s, 50ms);
  EXPECT_TRUE(out.locked);
  EXPECT_FALSE(out.comm_aborted);
  EXPECT_FALSE(out.job_ended);
  comm_gate->release();
  job_gate->release();
  lock.unlock();
}

}  // namespace
}  // namespace fsdp
