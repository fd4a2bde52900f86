// One process group and the collectives over it. Every call is collective:
// all ranks of the group make the same calls, in the same order, with the same
// counts, dtypes and ops. Every collective is asynchronous and returns a
// WorkHandle; its buffers must stay alive and untouched until the work is
// waited (or, on a device backend, until a stream that waits on it runs).
//
// Buffers live where the backend computes: host memory for MpiCommunicator,
// device memory for NcclCommunicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/dtype.h"

namespace fsdp {

enum class ReduceOp : uint8_t { sum, max, avg };

inline const char* reduce_op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::max ? "max" : "avg";
}

// A CUDA stream carried through the backend-neutral interface; cudaStream_t
// converts to it implicitly. nullptr is the legacy default stream.
using StreamHandle = void*;

class Work {
 public:
  virtual ~Work() = default;
  // Blocks the calling thread until the collective has finished and its
  // results are in the output buffer. Idempotent.
  virtual void wait() = 0;
  // True when finished (then results are visible as after wait()); never blocks.
  virtual bool test() = 0;
  // Makes work queued on `stream` after this call run only once the
  // collective has finished. Host backends have nothing to enqueue on and
  // simply wait().
  virtual void wait_on(StreamHandle stream) {
    (void)stream;
    wait();
  }
};
using WorkHandle = std::unique_ptr<Work>;

// Several collectives waited as one (a unit gathered segment by segment).
class JoinedWork final : public Work {
 public:
  explicit JoinedWork(std::vector<WorkHandle> parts) : parts_(std::move(parts)) {}
  void wait() override {
    for (auto& w : parts_) w->wait();
  }
  bool test() override {
    bool done = true;
    for (auto& w : parts_) done = w->test() && done;  // test each: it may drive progress
    return done;
  }
  void wait_on(StreamHandle stream) override {
    for (auto& w : parts_) w->wait_on(stream);
  }

 private:
  std::vector<WorkHandle> parts_;
};
inline WorkHandle join_work(std::vector<WorkHandle> parts) {
  if (parts.size() == 1) return std::move(parts.front());
  return std::make_unique<JoinedWork>(std::move(parts));
}

// The one front door of every backend's collectives (the non-virtual
// interface idiom, as Ops in model/ops.h): each collective is a plain method
// that checks what holds for every backend (buffers that must not overlap,
// element types a reduction cannot take, a root inside the group) and then
// runs the backend's private do_ method. A backend overrides only those and
// checks only what is its own (MPI's element types, int counts).
class Communicator {
 public:
  Communicator() = default;
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend_name() const = 0;

  // recv (size() * count_per_rank elements) = every rank's send block in rank
  // order. In place when send == recv + rank() * count_per_rank elements;
  // otherwise send and recv must not overlap.
  WorkHandle all_gather(const void* send, void* recv, size_t count_per_rank, DType dtype);
  // send holds size() * count_per_rank elements; rank r receives the reduction
  // of everyone's block r. send and recv must not overlap.
  WorkHandle reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                            ReduceOp op);
  WorkHandle all_reduce(void* buf, size_t count, DType dtype, ReduceOp op);
  WorkHandle broadcast(void* buf, size_t count, DType dtype, int root);
  WorkHandle barrier();

  // A sub-group of the ranks passing the same colour (>= 0), ordered by key
  // (ties by rank here), on the same backend. Collective over this group.
  std::unique_ptr<Communicator> split(int color, int key);

  // Collectives posted after this call read data only once the work already
  // queued on `producer` has run. Host backends compute synchronously, so
  // there is nothing to order.
  virtual void wait_stream(StreamHandle producer) { (void)producer; }

  // Lets posted collectives advance while the caller computes. Open MPI moves
  // non-blocking collectives forward only inside MPI calls, so the training
  // loop may call this between units; without it the work still completes
  // correctly, in wait().
  virtual void progress() {}

 private:
  // ---- what a backend implements (see the public collective of the same name)
  virtual WorkHandle do_all_gather(const void* send, void* recv, size_t count_per_rank,
                                   DType dtype) = 0;
  virtual WorkHandle do_reduce_scatter(const void* send, void* recv, size_t count_per_rank,
                                       DType dtype, ReduceOp op) = 0;
  virtual WorkHandle do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  virtual WorkHandle do_broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual WorkHandle do_barrier() = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;
};

}  // namespace fsdp
