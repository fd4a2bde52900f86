#include "comm/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>

#include "comm/agree.h"
#include "comm/mpi_check.h"
#include "comm/nccl_check.h"
#include "comm/nccl_watchdog.h"
#include "comm/watchdog.h"
#include "common/test_hooks.h"

// Enqueues an NCCL call on this communicator under its lock, then settles
// ncclInProgress.
#define NCCL_CALL(call) \
  settle(comm_, under(nccl_mu_, [&] { return (call); }), #call, __FILE__, __LINE__)

namespace fsdp {
namespace {

// One NCCL call with the communicator's lock held (see nccl_mu_).
template <typename Call>
ncclResult_t under(std::timed_mutex& mu, Call&& call) {
  std::lock_guard<std::timed_mutex> lock(mu);
  return call();
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
      return ncclUint8;
  }
  throw_error("unknown dtype ", int(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::avg:
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
  auto seconds = [](const char* name, double& into) {
    const char* v = std::getenv(name);
    if (!v || !*v) return;
    char* end = nullptr;
    errno = 0;
    double t = std::strtod(v, &end);
    if (errno != 0 || *end != '\0' || !(t > 0) || !std::isfinite(t))
      throw_error(name, "=", v, " is not a positive number of seconds");
    into = t;
  };
  seconds("FSDP_NCCL_TIMEOUT_S", o.timeout_s);
  seconds("FSDP_NCCL_INIT_TIMEOUT_S", o.init_timeout_s);
  return o;
}

namespace {
ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}
}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, const NcclOptions& options) : options_(options) {
  check_mpi(MPI_Comm_dup(comm, &mpi_comm_), "MPI_Comm_dup");
  set_up([&] {
    // Rank 0's failure travels with the id, so the others throw too instead
    // of waiting in ncclCommInitRankConfig.
    struct {
      ncclUniqueId id;
      int ok;
    } boot{};
    ncclResult_t id_result = ncclSuccess;
    if (rank_ == 0) {
      id_result = ncclGetUniqueId(&boot.id);
      boot.ok = id_result == ncclSuccess;
    }
    {
      WatchScope watch("sharing the NCCL id (MPI_Bcast)");
      check_mpi(MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, mpi_comm_), "MPI_Bcast");
    }
    if (rank_ == 0) FSDP_NCCL_CHECK(id_result, nullptr);
    if (!boot.ok) throw_error("ncclGetUniqueId failed on rank 0 of the group");
    test_hooks::stall_at_init(world_rank_);  // FSDP_TEST_STALL: a peer that never inits
    ncclConfig_t config = nonblocking_config();
    const ncclResult_t r = under(
        nccl_mu_, [&] { return ncclCommInitRankConfig(&comm_, size_, boot.id, rank_, &config); });
    settle(comm_, r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  });
}

NcclCommunicator::NcclCommunicator(NcclCommunicator& parent, int color, int key, MPI_Comm mpi_comm)
    : options_(parent.options_), mpi_comm_(mpi_comm) {
  set_up([&] {
    ncclConfig_t config = nonblocking_config();
    const ncclResult_t r = under(
        parent.nccl_mu_, [&] { return ncclCommSplit(parent.comm_, color, key, &comm_, &config); });
    // Non-blocking, ncclCommSplit may return ncclSuccess while NCCL's own
    // thread is still making the child, and that thread writes the handle
    // into comm_ only when it is done (NULL until then). The split's progress
    // is the parent's async state: wait on it whatever the return, then for
    // the handle itself.
    parent.settle(parent.comm_, r == ncclSuccess ? ncclInProgress : r, "ncclCommSplit", __FILE__,
                  __LINE__, /*setup=*/true);
    const auto start = std::chrono::steady_clock::now();
    while (std::atomic_ref<ncclComm_t>(comm_).load(std::memory_order_acquire) == nullptr) {
      if (std::chrono::steady_clock::now() - start >
          std::chrono::duration<double>(options_.init_timeout_s))
        throw_error("ncclCommSplit on rank ", parent.world_rank_,
                    " finished without a communicator within ", options_.init_timeout_s,
                    " s; FSDP_NCCL_INIT_TIMEOUT_S sets the limit");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    settle(comm_, ncclInProgress, "ncclCommSplit", __FILE__, __LINE__);
  });
}

void NcclCommunicator::set_up(const std::function<void()>& create) {
  try {
    check_mpi(MPI_Comm_set_errhandler(mpi_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(mpi_comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(mpi_comm_, &size_), "MPI_Comm_size");
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
    all_or_none(
        mpi_comm_,
        [&] {
          FSDP_CUDA_CHECK(cudaGetDevice(&device_));
          create();
          finish_setup();
        },
        setup_limit());
  } catch (...) {
    release(/*abort=*/true);
    throw;
  }
}

void NcclCommunicator::finish_setup() {
  check_ranks_match();
  FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&producer_done_, cudaEventDisableTiming));
  FSDP_CUDA_CHECK(cudaMalloc(&barrier_scratch_, sizeof(float)), "barrier scratch");
  FSDP_CUDA_CHECK(cudaMemsetAsync(barrier_scratch_, 0, sizeof(float), stream_));
  watchdog_ = std::make_unique<NcclWatchdog>(comm_, nccl_mu_, device_, world_rank_,
                                             options_.timeout_s, options_.poll_interval_s);
}

void NcclCommunicator::check_ranks_match() {
  int nccl_rank = -1, nccl_size = -1;
  NCCL_CALL(ncclCommUserRank(comm_, &nccl_rank));
  NCCL_CALL(ncclCommCount(comm_, &nccl_size));
  if (nccl_rank != rank_ || nccl_size != size_)
    throw_error("the NCCL communicator of world rank ", world_rank_, " is rank ", nccl_rank, " of ",
                nccl_size, " where its MPI group makes it rank ", rank_, " of ", size_,
                ": its collectives would exchange the wrong shards");
}

void NcclCommunicator::settle(ncclComm_t comm, ncclResult_t r, const char* call, const char* file,
                              int line, bool setup_call) {
  if (r == ncclInProgress && comm != nullptr) {
    // Set-up gets its own (shorter) limit; a collective that is merely being
    // enqueued gets the watchdog's.
    const bool setup = setup_call || watchdog_ == nullptr;
    const double limit = setup ? options_.init_timeout_s : options_.timeout_s;
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(2);
    for (;;) {
      {
        std::lock_guard<std::timed_mutex> lock(nccl_mu_);
        check_nccl(ncclCommGetAsyncError(comm, &r), "ncclCommGetAsyncError", file, line, comm);
      }
      if (r != ncclInProgress) break;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > limit)
        throw_error(call_name(call), " on rank ", world_rank_, " (rank ", rank_, " of a group of ",
                    size_, ") did not finish within ", limit, " s at ", source_path(file), ":",
                    line, ": a peer failed or cannot be reached; ",
                    setup ? "FSDP_NCCL_INIT_TIMEOUT_S" : "FSDP_NCCL_TIMEOUT_S", " sets the limit");
      // A collective's group job settles in microseconds: a fixed 1 ms sleep
      // would cost up to 1 ms a collective (gpt-350m issues ~78 a
      // micro-batch) whenever NCCL answers ncclInProgress.
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  std::lock_guard<std::timed_mutex> lock(nccl_mu_);  // ncclGetLastError reads comm's state
  check_nccl(r, call, file, line, comm);
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
    if (!abort) {
      // Non-blocking: finalize must settle before destroy; if it cannot
      // (a peer is gone), abort instead of waiting forever.
      ncclResult_t r = ncclCommFinalize(comm_);
      const auto start = std::chrono::steady_clock::now();
      while (r == ncclInProgress && std::chrono::steady_clock::now() - start <
                                        std::chrono::duration<double>(options_.init_timeout_s)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
      }
      if (r != ncclSuccess) {
        report("ncclCommFinalize", r == ncclInProgress ? "timed out" : ncclGetErrorString(r));
        abort = true;
      }
    }
    if (abort) {
      ncclCommAbort(comm_);
    } else {
      ncclResult_t r = ncclCommDestroy(comm_);
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

WorkHandle NcclCommunicator::do_all_gather(const void* send, void* recv, size_t count,
                                           DType dtype) {
  ncclDataType_t t = nccl_type(dtype);
  if (count > 0) NCCL_CALL(ncclAllGather(send, recv, count, t, comm_, stream_));
  return finish("all_gather");
}

WorkHandle NcclCommunicator::do_reduce_scatter(const void* send, void* recv, size_t count,
                                               DType dtype, ReduceOp op) {
  ncclDataType_t t = nccl_type(dtype);
  ncclRedOp_t o = nccl_op(op);
  if (count > 0) NCCL_CALL(ncclReduceScatter(send, recv, count, t, o, comm_, stream_));
  return finish("reduce_scatter");
}

WorkHandle NcclCommunicator::do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  ncclDataType_t t = nccl_type(dtype);
  ncclRedOp_t o = nccl_op(op);
  if (count > 0) NCCL_CALL(ncclAllReduce(buf, buf, count, t, o, comm_, stream_));
  return finish("all_reduce");
}

WorkHandle NcclCommunicator::do_broadcast(void* buf, size_t count, DType dtype, int root) {
  ncclDataType_t t = nccl_type(dtype);
  if (count > 0) NCCL_CALL(ncclBroadcast(buf, buf, count, t, root, comm_, stream_));
  return finish("broadcast");
}

WorkHandle NcclCommunicator::do_barrier() {
  NCCL_CALL(
      ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
  return finish("barrier");
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key) {
  // The split is collective over this (the parent) group, so a failure in
  // one new group is agreed across the parent too: the ranks of the other
  // groups must not go on with a communicator their peers never got. A
  // child made here is then destroyed (aborted) as the error unwinds.
  std::unique_ptr<Communicator> child;
  all_or_none(
      mpi_comm_,
      [&] {
        MPI_Comm sub = MPI_COMM_NULL;
        {
          WatchScope watch("NCCL group split (MPI_Comm_split)");
          check_mpi(MPI_Comm_split(mpi_comm_, color, key, &sub), "MPI_Comm_split");
        }
        // The child owns `sub` from here and splits inside its agreement with
        // its own group's peers.
        child.reset(new NcclCommunicator(*this, color, key, sub));
      },
      setup_limit());
  return child;
}

void NcclCommunicator::wait_stream(StreamHandle producer) {
  FSDP_CUDA_CHECK(cudaEventRecord(producer_done_, static_cast<cudaStream_t>(producer)));
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_done_, 0));
}

void NcclCommunicator::wait_event(cudaEvent_t event) {
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0));
}

}  // namespace fsdp
