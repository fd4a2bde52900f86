#include "comm/nccl_watchdog.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "comm/nccl_check.h"

namespace fsdp {

CudaEvent::CudaEvent() {
  FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

NcclWatchdog::NcclWatchdog(ncclComm_t comm, int device, int world_rank, double timeout_s,
                           double poll_s)
    : comm_(comm),
      device_(device),
      world_rank_(world_rank),
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
                             std::to_string(oldest.seq) + " on rank " + std::to_string(world_rank_);
    if (e != cudaErrorNotReady)
      abort_job(what + " failed on the GPU: " + cudaGetErrorString(e) + "; aborting");
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
    if (r != ncclSuccess) async = r;
    if (async != ncclSuccess && async != ncclInProgress)
      abort_job(what + " failed: " + ncclGetErrorString(async) + "; aborting");
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
  std::fprintf(stderr, "fsdptrain: error: %s\n", line.c_str());
  std::fflush(stderr);
  ncclCommAbort(comm_);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this is for an MPI that does
}

}  // namespace fsdp
