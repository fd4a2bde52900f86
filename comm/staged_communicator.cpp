#include "comm/staged_communicator.h"

#include <climits>
#include <cstdint>
#include <cstring>

#include "comm/mpi_check.h"
#include "comm/watchdog.h"
#include "common/error.h"

namespace fsdp {
namespace {

// bf16 is the top half of an f32; rounding to nearest even, as the GPU does.
float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// Reductions run in f32 (f32, bf16) or i32 on the host.
std::vector<float> widen(const char* p, size_t n, DType t) {
  std::vector<float> v(n);
  if (t == DType::f32) {
    std::memcpy(v.data(), p, n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      v[i] = bf16_to_f32(h);
    }
  }
  return v;
}
void narrow(const std::vector<float>& v, char* p, DType t) {
  if (t == DType::f32) {
    std::memcpy(p, v.data(), v.size() * 4);
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

int checked_count(size_t n, const char* what) {
  FSDP_CHECK(n <= size_t(INT_MAX), what, " of ", n, " elements exceeds MPI's int count");
  return int(n);
}

// The staged collectives finish before they return.
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace

void HostStager::to_host(void* host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host, src, bytes);
}
void HostStager::to_device(void* dst, const void* host, size_t bytes) {
  if (bytes) std::memcpy(dst, host, bytes);
}

StagedCommunicator::StagedCommunicator(MPI_Comm comm, std::shared_ptr<Stager> stager)
    : stager_(std::move(stager)) {
  FSDP_CHECK(stager_ != nullptr);
  check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

StagedCommunicator::~StagedCommunicator() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

WorkHandle StagedCommunicator::do_all_gather(const void* send, void* recv, size_t count,
                                             DType dtype) {
  const size_t bytes = count * dtype_size(dtype);
  // Bytes, not elements: gathering moves data without interpreting it.
  const int n = checked_count(bytes, "all_gather");
  send_host_.resize(bytes);
  recv_host_.resize(bytes * size_);
  stager_->to_host(send_host_.data(), send, bytes);  // first: send may lie inside recv
  WatchScope watch("staged all_gather (MPI_Allgather)");
  check_mpi(MPI_Allgather(send_host_.data(), n, MPI_BYTE, recv_host_.data(), n, MPI_BYTE, comm_),
            "MPI_Allgather");
  stager_->to_device(recv, recv_host_.data(), bytes * size_);
  return std::make_unique<DoneWork>();
}

void StagedCommunicator::reduce(const std::vector<char>& send, std::vector<char>& recv,
                                size_t count, DType dtype, ReduceOp op, bool scatter) {
  const size_t in = scatter ? count * size_ : count;
  const int n = checked_count(count, "reduction");
  const MPI_Op mop = op == ReduceOp::max ? MPI_MAX : MPI_SUM;
  recv.resize(count * dtype_size(dtype));
  WatchScope watch(scatter ? "staged reduce_scatter" : "staged all_reduce");
  if (dtype == DType::i32) {
    check_mpi(scatter
                  ? MPI_Reduce_scatter_block(send.data(), recv.data(), n, MPI_INT32_T, mop, comm_)
                  : MPI_Allreduce(send.data(), recv.data(), n, MPI_INT32_T, mop, comm_),
              scatter ? "MPI_Reduce_scatter_block" : "MPI_Allreduce");
    return;
  }
  const std::vector<float> wide = widen(send.data(), in, dtype);
  std::vector<float> out(count);
  check_mpi(scatter ? MPI_Reduce_scatter_block(wide.data(), out.data(), n, MPI_FLOAT, mop, comm_)
                    : MPI_Allreduce(wide.data(), out.data(), n, MPI_FLOAT, mop, comm_),
            scatter ? "MPI_Reduce_scatter_block" : "MPI_Allreduce");
  if (op == ReduceOp::avg)
    for (float& x : out) x /= float(size_);
  narrow(out, recv.data(), dtype);
}

WorkHandle StagedCommunicator::do_reduce_scatter(const void* send, void* recv, size_t count,
                                                 DType dtype, ReduceOp op) {
  const size_t esize = dtype_size(dtype);
  send_host_.resize(count * size_ * esize);
  stager_->to_host(send_host_.data(), send, send_host_.size());
  reduce(send_host_, recv_host_, count, dtype, op, /*scatter=*/true);
  stager_->to_device(recv, recv_host_.data(), count * esize);
  return std::make_unique<DoneWork>();
}

WorkHandle StagedCommunicator::do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  send_host_.resize(count * dtype_size(dtype));
  stager_->to_host(send_host_.data(), buf, send_host_.size());
  reduce(send_host_, recv_host_, count, dtype, op, /*scatter=*/false);
  stager_->to_device(buf, recv_host_.data(), recv_host_.size());
  return std::make_unique<DoneWork>();
}

WorkHandle StagedCommunicator::do_broadcast(void* buf, size_t count, DType dtype, int root) {
  const size_t bytes = count * dtype_size(dtype);
  send_host_.resize(bytes);
  if (rank_ == root) stager_->to_host(send_host_.data(), buf, bytes);
  WatchScope watch("staged broadcast (MPI_Bcast)");
  check_mpi(MPI_Bcast(send_host_.data(), checked_count(bytes, "broadcast"), MPI_BYTE, root, comm_),
            "MPI_Bcast");
  if (rank_ != root) stager_->to_device(buf, send_host_.data(), bytes);
  return std::make_unique<DoneWork>();
}

WorkHandle StagedCommunicator::do_barrier() {
  WatchScope watch("staged barrier");
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Communicator> StagedCommunicator::do_split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  {
    WatchScope watch("staged split (MPI_Comm_split)");
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
  }
  std::unique_ptr<Communicator> result;
  try {
    result = std::make_unique<StagedCommunicator>(sub, stager_);
  } catch (...) {
    MPI_Comm_free(&sub);
    throw;
  }
  MPI_Comm_free(&sub);
  return result;
}

}  // namespace fsdp
