// NCCL has no timeout: a collective whose peer died or hung waits forever.
// The watchdog turns that into an error. A background thread watches every
// collective's completion event; when the oldest one has been outstanding
// longer than the timeout, or NCCL reports an asynchronous error, it prints
// one line, aborts the NCCL communicator (which unblocks this rank's GPU) and
// MPI_Abort's the job (which takes down the ranks that are still waiting),
// each within a bound (comm/bounded_abort.h).
//
// The watchdog shares the communicator with the thread that issues
// collectives, and NCCL's calls on one communicator must not overlap: both
// take the communicator's lock around every NCCL call, the watchdog only
// with try_lock (a busy communicator is asked again at the next poll; the
// events and the clock need no lock).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace fsdp {

// Owns a CUDA event shared by a Work handle and the watchdog, destroyed when
// both are done with it.
class CudaEvent {
 public:
  CudaEvent();
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclWatchdog {
 public:
  // `world_rank` labels the message. The thread makes `device` current
  // because events and the communicator belong to that device's context.
  // `comm_lock` is the communicator's (see above); it outlives the watchdog.
  NcclWatchdog(ncclComm_t comm, std::timed_mutex& comm_lock, int device, int world_rank,
               double timeout_s, double poll_s);
  ~NcclWatchdog();  // stops and joins the thread; never aborts
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // `name` must be a string literal (it is kept, not copied).
  void watch(std::shared_ptr<CudaEvent> done, const char* name, uint64_t seq);

 private:
  struct Entry {
    std::shared_ptr<CudaEvent> done;
    const char* name;
    uint64_t seq;
    std::chrono::steady_clock::time_point posted;
  };

  void run();
  // Drops finished collectives; aborts the job on a timeout or error.
  void check();
  [[noreturn]] void abort_job(const std::string& line);

  ncclComm_t comm_;
  std::timed_mutex& comm_lock_;
  int device_, world_rank_;
  std::string host_;  // names this rank's node in the message
  std::chrono::duration<double> timeout_, poll_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> pending_;  // in posting order, so the front is the oldest
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fsdp
