// Collectives over host buffers with MPI's non-blocking collectives, for the
// CPU reference path. Supports f32 and i32 (bf16 has no MPI type and the CPU
// path computes in f32).
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace fsdp {

class MpiCommunicator final : public Communicator {
 public:
  // Works on a duplicate of `comm` (collective over it), so this group's
  // messages never match anyone else's, and errors on it come back as
  // fsdp::Error instead of aborting. `max_message_elems` caps the count of a
  // single MPI call (MPI counts are int); larger collectives are posted as
  // several calls. Tests lower it to exercise that path.
  explicit MpiCommunicator(MPI_Comm comm, size_t max_message_elems = INT_MAX);
  // Frees the duplicate; must run before MPI_Finalize.
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "mpi"; }

  void progress() override;

  MPI_Comm mpi_comm() const { return comm_; }

 private:
  // The collectives (checked by Communicator's front door first).
  WorkHandle do_all_gather(const void* send, void* recv, size_t count_per_rank,
                           DType dtype) override;
  WorkHandle do_reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                               ReduceOp op) override;
  WorkHandle do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  WorkHandle do_broadcast(void* buf, size_t count, DType dtype, int root) override;
  WorkHandle do_barrier() override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;

  std::string describe(const char* op, size_t count, DType dtype);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  size_t max_elems_;
  uint64_t posted_ = 0;  // collectives posted on this group
};

}  // namespace fsdp
