// Collectives over device buffers for several ranks that share one GPU: a test
// mode (--device-comm staged), not a fast path. NCCL refuses two ranks of one
// communicator on one device, so a machine with a single GPU could otherwise
// never run the sharded device code; this backend copies each collective's
// input to host memory, runs it with blocking MPI, and copies the result back.
// The engine cannot tell it from NCCL: same interface, same ordering rules.
//
// How bytes move between the caller's buffers and host memory is a Stager:
// cudaMemcpy for device buffers (make_cuda_stager), memcpy for host buffers
// (HostStager), which lets the CPU tests exercise everything but the copies.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace fsdp {

class Stager {
 public:
  virtual ~Stager() = default;
  // Later copies out of the caller's buffers see all work queued on
  // `producer` so far (see Communicator::wait_stream).
  virtual void wait_stream(StreamHandle producer) = 0;
  // Both copies are complete when they return, so nothing queued afterwards,
  // on any stream, can see stale data.
  virtual void to_host(void* host, const void* src, size_t bytes) = 0;
  virtual void to_device(void* dst, const void* host, size_t bytes) = 0;
};

class HostStager final : public Stager {
 public:
  void wait_stream(StreamHandle) override {}
  void to_host(void* host, const void* src, size_t bytes) override;
  void to_device(void* dst, const void* host, size_t bytes) override;
};

#ifdef FSDP_HAVE_NCCL
// Copies with the CUDA device current at the call (select_device).
std::shared_ptr<Stager> make_cuda_stager();
#endif

class StagedCommunicator final : public Communicator {
 public:
  // Collective over `comm`, which it duplicates (errors come back as fsdp::Error).
  StagedCommunicator(MPI_Comm comm, std::shared_ptr<Stager> stager);
  ~StagedCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "staged"; }

  void wait_stream(StreamHandle producer) override { stager_->wait_stream(producer); }

 private:
  // The collectives (checked by Communicator's front door first).
  // f32, bf16 and i32 for every collective; bf16 is reduced in f32 and rounded
  // once. The returned work is already complete.
  WorkHandle do_all_gather(const void* send, void* recv, size_t count_per_rank,
                           DType dtype) override;
  WorkHandle do_reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                               ReduceOp op) override;
  WorkHandle do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  WorkHandle do_broadcast(void* buf, size_t count, DType dtype, int root) override;
  WorkHandle do_barrier() override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;

  // recv = op over ranks of send (count elements of dtype each), in f32 or i32
  // on the host; reduce_scatter when `scatter`, else all_reduce.
  void reduce(const std::vector<char>& send, std::vector<char>& recv, size_t count, DType dtype,
              ReduceOp op, bool scatter);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<Stager> stager_;
  std::vector<char> send_host_, recv_host_;
};

}  // namespace fsdp
