#include "comm/mpi_communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/mpi_check.h"
#include "comm/watchdog.h"

namespace fsdp {
namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::u8:
      return MPI_UINT8_T;
    default:
      throw_error("the MPI communicator does not support ", dtype_name(t),
                  " (the CPU path communicates f32 and i32; bf16 needs the NCCL backend)");
  }
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::max ? MPI_MAX : MPI_SUM;
}

// Several requests that together form one collective, plus what to do once
// all of them have completed (scale an average). The collective is watched
// from posting to completion, like the NCCL watchdog's, so a rank polling
// test() is covered as well as one blocked in wait().
class MpiWork final : public Work {
 public:
  MpiWork(std::vector<MPI_Request> requests, std::function<void()> finish, std::string what)
      : requests_(std::move(requests)), finish_(std::move(finish)) {
    watch_.emplace(std::move(what));
  }

  ~MpiWork() override {
    // Completing here keeps MPI from writing into buffers the caller is about
    // to free. While an exception unwinds, the peers may never arrive and
    // waiting would hang; the program is about to report the error and abort
    // the job, so the requests are abandoned instead.
    if (done_ || std::uncaught_exceptions() > 0) return;
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fsdptrain: error: %s\n", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  void wait() override {
    if (done_) return;
    for (MPI_Request& r : requests_) check_mpi(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
    finish();
  }

  bool test() override {
    if (done_) return true;
    for (MPI_Request& r : requests_) {
      if (r == MPI_REQUEST_NULL) continue;
      int flag = 0;
      check_mpi(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (!flag) return false;
    }
    finish();
    return true;
  }

 private:
  void finish() {
    done_ = true;
    watch_.reset();
    if (finish_) finish_();
  }

  std::vector<MPI_Request> requests_;
  std::function<void()> finish_;
  std::optional<WatchScope> watch_;
  bool done_ = false;
};

std::function<void()> divide_by(void* buf, size_t count, int n) {
  return [buf, count, n] {
    float* p = static_cast<float*>(buf);
    for (size_t i = 0; i < count; ++i) p[i] /= float(n);
  };
}

char* at(void* base, size_t elems, size_t elem_size) {
  return static_cast<char*>(base) + elems * elem_size;
}
const char* at(const void* base, size_t elems, size_t elem_size) {
  return static_cast<const char*>(base) + elems * elem_size;
}

}  // namespace

// What a rank stuck here was waiting in. The sequence number counts this
// group's collectives, so the lines of two ranks show whether they waited in
// the same one.
std::string MpiCommunicator::describe(const char* op, size_t count, DType dtype) {
  std::string what = "MPI " + std::string(op) + " #" + std::to_string(++posted_);
  if (count > 0) what += " (" + std::to_string(count) + " " + dtype_name(dtype) + ")";
  return what + " on a group of " + std::to_string(size_) + " rank(s)";
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, size_t max_message_elems)
    : max_elems_(max_message_elems) {
  FSDP_CHECK(max_elems_ >= 1 && max_elems_ <= size_t(INT_MAX));
  {
    WatchScope watch("MPI_Comm_dup (creating a communicator)");
    check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  }
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

WorkHandle MpiCommunicator::do_all_gather(const void* send, void* recv, size_t count, DType dtype) {
  MPI_Datatype t = mpi_type(dtype);
  const size_t es = dtype_size(dtype);
  char* mine = at(recv, rank_ * count, es);
  const bool in_place = send == mine;
  std::vector<MPI_Request> reqs;
  if (count <= max_elems_) {
    MPI_Request r;
    check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, int(count), t, recv, int(count), t,
                             comm_, &r),
              "MPI_Iallgather");
    reqs.push_back(r);
  } else {
    // Too many elements for one int count: every rank broadcasts its own
    // block, in pieces. Posting order is the same everywhere, as MPI needs.
    if (!in_place) std::memcpy(mine, send, count * es);
    for (int root = 0; root < size_; ++root)
      for (size_t off = 0; off < count; off += max_elems_) {
        MPI_Request r;
        check_mpi(MPI_Ibcast(at(recv, root * count + off, es),
                             int(std::min(max_elems_, count - off)), t, root, comm_, &r),
                  "MPI_Ibcast");
        reqs.push_back(r);
      }
  }
  return std::make_unique<MpiWork>(std::move(reqs), nullptr,
                                   describe("all_gather", count * size_, dtype));
}

WorkHandle MpiCommunicator::do_reduce_scatter(const void* send, void* recv, size_t count,
                                              DType dtype, ReduceOp op) {
  MPI_Datatype t = mpi_type(dtype);
  const size_t es = dtype_size(dtype);
  std::vector<MPI_Request> reqs;
  if (count <= max_elems_) {
    MPI_Request r;
    check_mpi(MPI_Ireduce_scatter_block(send, recv, int(count), t, mpi_op(op), comm_, &r),
              "MPI_Ireduce_scatter_block");
    reqs.push_back(r);
  } else {
    // Block by block, piece by piece, each reduced onto its owner.
    for (int root = 0; root < size_; ++root)
      for (size_t off = 0; off < count; off += max_elems_) {
        MPI_Request r;
        check_mpi(MPI_Ireduce(
                      at(send, root * count + off, es), root == rank_ ? at(recv, off, es) : nullptr,
                      int(std::min(max_elems_, count - off)), t, mpi_op(op), root, comm_, &r),
                  "MPI_Ireduce");
        reqs.push_back(r);
      }
  }
  return std::make_unique<MpiWork>(std::move(reqs),
                                   op == ReduceOp::avg ? divide_by(recv, count, size_) : nullptr,
                                   describe("reduce_scatter", count * size_, dtype));
}

WorkHandle MpiCommunicator::do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  MPI_Datatype t = mpi_type(dtype);
  const size_t es = dtype_size(dtype);
  std::vector<MPI_Request> reqs;
  for (size_t off = 0; off < count; off += max_elems_) {
    MPI_Request r;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, at(buf, off, es), int(std::min(max_elems_, count - off)),
                             t, mpi_op(op), comm_, &r),
              "MPI_Iallreduce");
    reqs.push_back(r);
  }
  return std::make_unique<MpiWork>(std::move(reqs),
                                   op == ReduceOp::avg ? divide_by(buf, count, size_) : nullptr,
                                   describe("all_reduce", count, dtype));
}

WorkHandle MpiCommunicator::do_broadcast(void* buf, size_t count, DType dtype, int root) {
  MPI_Datatype t = mpi_type(dtype);
  const size_t es = dtype_size(dtype);
  std::vector<MPI_Request> reqs;
  for (size_t off = 0; off < count; off += max_elems_) {
    MPI_Request r;
    check_mpi(
        MPI_Ibcast(at(buf, off, es), int(std::min(max_elems_, count - off)), t, root, comm_, &r),
        "MPI_Ibcast");
    reqs.push_back(r);
  }
  return std::make_unique<MpiWork>(std::move(reqs), nullptr, describe("broadcast", count, dtype));
}

WorkHandle MpiCommunicator::do_barrier() {
  MPI_Request r;
  check_mpi(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
  return std::make_unique<MpiWork>(std::vector<MPI_Request>{r}, nullptr,
                                   describe("barrier", 0, DType::i32));
}

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  {
    WatchScope watch("MPI_Comm_split (creating process groups)");
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
  }
  auto result = std::make_unique<MpiCommunicator>(sub, max_elems_);
  MPI_Comm_free(&sub);
  return result;
}

void MpiCommunicator::progress() {
  // Any MPI call runs Open MPI's progress engine; a probe that matches
  // nothing is the cheapest one that touches no request.
  int flag = 0;
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
}

}  // namespace fsdp
