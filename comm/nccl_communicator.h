// Collectives over device buffers with NCCL, on a communication stream of
// their own so they overlap with compute. Only in builds with FSDP_HAVE_NCCL.
//
// Ordering with compute is explicit: wait_stream(compute) before a collective
// that reads what compute wrote, and work->wait_on(compute) before compute
// reads what the collective wrote. Nothing else synchronises the two streams.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace fsdp {

class NcclWatchdog;

struct NcclOptions {
  // A collective outstanding longer than this aborts the job (see
  // nccl_watchdog.h). Default 600 s, or FSDP_NCCL_TIMEOUT_S.
  double timeout_s = 600;
  // Communicator set-up (init, split) that has not finished after this stops
  // every rank of the group with an error. Default 120 s, or
  // FSDP_NCCL_INIT_TIMEOUT_S.
  double init_timeout_s = 120;
  double poll_interval_s = 0.1;

  // Throws fsdp::Error when FSDP_NCCL_TIMEOUT_S or FSDP_NCCL_INIT_TIMEOUT_S is
  // set but not a positive number.
  static NcclOptions from_env();
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm`. Rank 0 makes the NCCL unique id and broadcasts it
  // over (a duplicate of) `comm`. The communicator is non-blocking
  // (ncclConfig blocking = 0) so that set-up can time out: a rank whose peer
  // failed or never arrives stops after options.timeout_s instead of hanging,
  // and all ranks agree on the outcome before any returns, so one rank's
  // failure stops every rank with its message. Calls that return
  // ncclInProgress are settled before the next (see settle()). Hangs after
  // set-up are the watchdog's business. The CUDA device must already be
  // current (select_device); the communicator stays bound to it.
  explicit NcclCommunicator(MPI_Comm comm, const NcclOptions& options = NcclOptions::from_env());
  // ncclCommFinalize then ncclCommDestroy (every rank must get here), or
  // ncclCommAbort when destroyed while an exception unwinds, since the peers
  // may never arrive.
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "nccl"; }

  // The comm stream waits for everything queued so far on `producer`.
  void wait_stream(StreamHandle producer) override;
  // The comm stream waits for `event` (recorded by the caller).
  void wait_event(cudaEvent_t event);

  cudaStream_t stream() const { return stream_; }
  ncclComm_t nccl_comm() const { return comm_; }
  int device() const { return device_; }

 private:
  // The collectives (checked by Communicator's front door first).
  // f32, bf16 and i32; avg needs f32 or bf16. Count 0 enqueues nothing.
  WorkHandle do_all_gather(const void* send, void* recv, size_t count_per_rank,
                           DType dtype) override;
  WorkHandle do_reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                               ReduceOp op) override;
  WorkHandle do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  WorkHandle do_broadcast(void* buf, size_t count, DType dtype, int root) override;
  // An all-reduce of one float on the comm stream: a device-side barrier.
  WorkHandle do_barrier() override;
  // ncclCommSplit of this communicator (no new unique id, shared resources
  // where NCCL can), with the same timeout and agreement as the constructor.
  std::unique_ptr<Communicator> do_split(int color, int key) override;

  // A child of split(): ncclCommSplit of `parent` by color and key;
  // `mpi_comm` (owned from now on) holds the same ranks, for agreement and
  // later splits.
  NcclCommunicator(NcclCommunicator& parent, int color, int key, MPI_Comm mpi_comm);
  // Takes mpi_comm_ (already owned) as the group, runs `create` (which makes
  // comm_) and finish_setup() on every rank and agrees on the outcome; on
  // failure releases everything and rethrows.
  void set_up(const std::function<void()>& create);
  // Buffers, streams, the watchdog: everything after the ncclComm_t exists.
  void finish_setup();
  // How long set-up's agreement waits for a peer: a rank whose init timed
  // out tells the others within another init timeout, not the collective
  // watchdog's (by default 600 s).
  WatchLimit setup_limit() const { return {options_.init_timeout_s, "FSDP_NCCL_INIT_TIMEOUT_S"}; }
  // A non-blocking communicator may return ncclInProgress from any call; the
  // next call may only follow once ncclCommGetAsyncError says it settled.
  // Polls up to the timeout (set-up's when `setup` or before the watchdog
  // exists), then throws naming the call and its site. Each poll holds
  // nccl_mu_; the waits between polls start at microseconds (a collective's
  // group job usually settles that fast) and back off to a millisecond.
  void settle(ncclComm_t comm, ncclResult_t r, const char* call, const char* file, int line,
              bool setup = false);
  // The NCCL rank and size of comm_ must be MPI's in mpi_comm_: a split whose
  // colors or keys went wrong would otherwise exchange the wrong shards.
  void check_ranks_match();
  // Records completion of what was just enqueued and hands it to the watchdog.
  WorkHandle finish(const char* name);
  void release(bool abort) noexcept;

  NcclOptions options_;
  MPI_Comm mpi_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, world_rank_ = 0, device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_done_ = nullptr;
  float* barrier_scratch_ = nullptr;
  uint64_t seq_ = 0;
  // Held around every NCCL call on comm_, by this thread and by the watchdog
  // (with try_lock): NCCL's calls on one communicator must not overlap, and
  // on a non-blocking one even ncclCommGetAsyncError frees state (the group
  // job of the last collective), so two threads polling it is a double
  // free. PyTorch's ProcessGroupNCCL guards the same calls.
  std::timed_mutex nccl_mu_;
  std::unique_ptr<NcclWatchdog> watchdog_;
};

}  // namespace fsdp
