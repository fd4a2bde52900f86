#include "comm/nccl_watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "comm/bounded_abort.h"
#include "comm/nccl_check.h"

namespace fsdp {

CudaEvent::CudaEvent() {
  FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

namespace {
std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}
}  // namespace

NcclWatchdog::NcclWatchdog(ncclComm_t comm, std::timed_mutex& comm_lock, int device, int world_rank,
                           double timeout_s, double poll_s)
    : comm_(comm),
      comm_lock_(comm_lock),
      device_(device),
      world_rank_(world_rank),
      host_(host_name()),
      timeout_(timeout_s),
      poll_(poll_s),
      thread_([this] { run(); }) {}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void NcclWatchdog::watch(std::shared_ptr<CudaEvent> done, const char* name, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({std::move(done), name, seq, std::chrono::steady_clock::now()});
}

void NcclWatchdog::run() {
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess)
    abort_job(std::string("NCCL watchdog on rank ") + std::to_string(world_rank_) +
              " cannot use device " + std::to_string(device_) + ": " + cudaGetErrorString(e));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, poll_, [this] { return stop_; });
    if (stop_) break;
    check();
  }
}

void NcclWatchdog::check() {
  while (!pending_.empty()) {
    Entry& oldest = pending_.front();
    cudaError_t e = cudaEventQuery(oldest.done->get());
    if (e == cudaSuccess) {
      pending_.pop_front();
      continue;
    }
    const std::string what = std::string("NCCL collective ") + oldest.name + " #" +
                             std::to_string(oldest.seq) + " on rank " +
                             std::to_string(world_rank_) + " (host " + host_ + ")";
    if (e != cudaErrorNotReady)
      abort_job(what + " failed on the GPU: " + cudaGetErrorString(e) + "; aborting");
    // Busy: the training thread is inside NCCL on this communicator; its
    // own call reports an error, or the next poll here does.
    std::unique_lock<std::timed_mutex> comm(comm_lock_, std::try_to_lock);
    if (comm.owns_lock()) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
      if (r != ncclSuccess) async = r;
      // NCCL's own account names the peer or transport that failed
      const char* detail = ncclGetLastError(comm_);
      const std::string why = std::string(ncclGetErrorString(async)) +
                              (detail && *detail ? std::string(" (") + detail + ")" : "");
      comm.unlock();
      if (async != ncclSuccess && async != ncclInProgress)
        abort_job(what + " failed: " + why + "; aborting");
    }
    const std::chrono::duration<double> age = std::chrono::steady_clock::now() - oldest.posted;
    if (age > timeout_) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_.count());
      abort_job(what + " did not finish within " + secs + " s (a rank died or hung); aborting");
    }
    return;
  }
}

void NcclWatchdog::abort_job(const std::string& line) {
  // The line first and whole: whatever the abort does next must not hide it.
  std::fprintf(stderr, "fsdptrain: error: %s\n", line.c_str());
  std::fflush(stderr);
  // Bounds: the lock is free within microseconds unless an NCCL call hangs;
  // ncclCommAbort and MPI_Abort take well under a second when they work.
  const ncclComm_t comm = comm_;
  const int device = device_;
  const AbortOutcome out = abort_bounded(
      comm_lock_,
      [comm, device] {
        cudaSetDevice(device);  // a thread of its own: the communicator's device
        ncclCommAbort(comm);
      },
      [] { MPI_Abort(MPI_COMM_WORLD, 1); }, std::chrono::seconds(5), std::chrono::seconds(10));
  // Only an MPI whose abort returned or hung gets here.
  std::fprintf(stderr,
               "fsdptrain: error: rank %d: MPI_Abort %s (the NCCL communicator was %s); exiting\n",
               world_rank_, out.job_ended ? "returned" : "did not finish within 10 s",
               out.comm_aborted ? "aborted"
               : out.locked     ? "still aborting after 10 s"
                                : "left alone: another thread was inside it");
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace fsdp
