#include "comm/nccl_communicator.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "comm/cuda_check.h"
#include "comm/mpi_check.h"
#include "comm/nccl_watchdog.h"

namespace fsdp {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
  }
  throw_error("unknown dtype ", int(t));
}

ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::avg:
      if (t == DType::i32) throw_error("ReduceOp avg needs f32 or bf16, got i32");
      return ncclAvg;
  }
  throw_error("unknown reduce op ", int(op));
}

class NcclWork final : public Work {
 public:
  explicit NcclWork(std::shared_ptr<CudaEvent> done) : done_(std::move(done)) {}

  // A peer that never arrives blocks this forever; the watchdog ends it.
  void wait() override { FSDP_CUDA_CHECK(cudaEventSynchronize(done_->get())); }

  bool test() override {
    cudaError_t e = cudaEventQuery(done_->get());
    if (e == cudaErrorNotReady) return false;
    FSDP_CUDA_CHECK(e);
    return true;
  }

  void wait_on(StreamHandle stream) override {
    FSDP_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_->get(), 0));
  }

 private:
  std::shared_ptr<CudaEvent> done_;
};

}  // namespace

NcclOptions NcclOptions::from_env() {
  NcclOptions o;
  if (const char* v = std::getenv("FSDP_NCCL_TIMEOUT_S"); v && *v) {
    char* end = nullptr;
    errno = 0;
    double t = std::strtod(v, &end);
    if (errno != 0 || *end != '\0' || !(t > 0))
      throw_error("FSDP_NCCL_TIMEOUT_S=", v, " is not a positive number of seconds");
    o.timeout_s = t;
  }
  return o;
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, const NcclOptions& options) : options_(options) {
  try {
    check_mpi(MPI_Comm_dup(comm, &mpi_comm_), "MPI_Comm_dup");
    check_mpi(MPI_Comm_set_errhandler(mpi_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(mpi_comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(mpi_comm_, &size_), "MPI_Comm_size");
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
    FSDP_CUDA_CHECK(cudaGetDevice(&device_));

    // Rank 0's failure travels with the id, so the others throw too instead
    // of hanging in ncclCommInitRankConfig.
    struct {
      ncclUniqueId id;
      int ok;
    } boot{};
    ncclResult_t id_result = ncclSuccess;
    if (rank_ == 0) {
      id_result = ncclGetUniqueId(&boot.id);
      boot.ok = id_result == ncclSuccess;
    }
    check_mpi(MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, mpi_comm_), "MPI_Bcast");
    if (rank_ == 0) check_nccl(id_result, "ncclGetUniqueId");
    if (!boot.ok) throw_error("ncclGetUniqueId failed on rank 0 of the group");

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    ncclComm_t created = nullptr;
    check_nccl(ncclCommInitRankConfig(&created, size_, boot.id, rank_, &config),
               "ncclCommInitRankConfig");
    comm_ = created;

    FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&producer_done_, cudaEventDisableTiming));
    FSDP_CUDA_CHECK(cudaMalloc(&barrier_scratch_, sizeof(float)));
    FSDP_CUDA_CHECK(cudaMemsetAsync(barrier_scratch_, 0, sizeof(float), stream_));
    watchdog_ = std::make_unique<NcclWatchdog>(comm_, device_, world_rank_, options_.timeout_s,
                                               options_.poll_interval_s);
  } catch (...) {
    release(/*abort=*/true);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  release(std::uncaught_exceptions() > 0);
}

void NcclCommunicator::release(bool abort) noexcept {
  // Stopped first so that it cannot abort a communicator being torn down.
  watchdog_.reset();
  auto report = [this](const char* call, const char* what) {
    std::fprintf(stderr, "fsdptrain: warning: %s failed on rank %d while shutting down: %s\n", call,
                 world_rank_, what);
  };
  if (comm_) {
    if (abort) {
      ncclCommAbort(comm_);
    } else {
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r != ncclSuccess) report("ncclCommFinalize", ncclGetErrorString(r));
      r = ncclCommDestroy(comm_);
      if (r != ncclSuccess) report("ncclCommDestroy", ncclGetErrorString(r));
    }
    comm_ = nullptr;
  }
  if (barrier_scratch_) cudaFree(barrier_scratch_);
  if (producer_done_) cudaEventDestroy(producer_done_);
  if (stream_) cudaStreamDestroy(stream_);
  barrier_scratch_ = nullptr;
  producer_done_ = nullptr;
  stream_ = nullptr;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised && mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_comm_);
}

WorkHandle NcclCommunicator::finish(const char* name) {
  auto done = std::make_shared<CudaEvent>();
  FSDP_CUDA_CHECK(cudaEventRecord(done->get(), stream_));
  watchdog_->watch(done, name, ++seq_);
  return std::make_unique<NcclWork>(std::move(done));
}

WorkHandle NcclCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  ncclDataType_t t = nccl_type(dtype);
  if (count > 0) FSDP_NCCL_CHECK(ncclAllGather(send, recv, count, t, comm_, stream_), comm_);
  return finish("all_gather");
}

WorkHandle NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                            ReduceOp op) {
  ncclDataType_t t = nccl_type(dtype);
  ncclRedOp_t o = nccl_op(op, dtype);
  if (count > 0) FSDP_NCCL_CHECK(ncclReduceScatter(send, recv, count, t, o, comm_, stream_), comm_);
  return finish("reduce_scatter");
}

WorkHandle NcclCommunicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  ncclDataType_t t = nccl_type(dtype);
  ncclRedOp_t o = nccl_op(op, dtype);
  if (count > 0) FSDP_NCCL_CHECK(ncclAllReduce(buf, buf, count, t, o, comm_, stream_), comm_);
  return finish("all_reduce");
}

WorkHandle NcclCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  ncclDataType_t t = nccl_type(dtype);
  if (root < 0 || root >= size_)
    throw_error("broadcast root ", root, " is not a rank of a group of ", size_);
  if (count > 0) FSDP_NCCL_CHECK(ncclBroadcast(buf, buf, count, t, root, comm_, stream_), comm_);
  return finish("broadcast");
}

WorkHandle NcclCommunicator::barrier() {
  FSDP_NCCL_CHECK(
      ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_, stream_),
      comm_);
  return finish("barrier");
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  FSDP_CHECK(color >= 0, "every rank must belong to a sub-group");
  MPI_Comm sub = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(mpi_comm_, color, key, &sub), "MPI_Comm_split");
  std::unique_ptr<Communicator> result;
  try {
    result = std::make_unique<NcclCommunicator>(sub, options_);
  } catch (...) {
    MPI_Comm_free(&sub);
    throw;
  }
  MPI_Comm_free(&sub);
  return result;
}

void NcclCommunicator::wait_stream(StreamHandle producer) {
  FSDP_CUDA_CHECK(cudaEventRecord(producer_done_, static_cast<cudaStream_t>(producer)));
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_done_, 0));
}

void NcclCommunicator::wait_event(cudaEvent_t event) {
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0));
}

}  // namespace fsdp
