#include "src/trainer/backend.h"

#include <string>

#include "comm/staged_communicator.h"
#include "common/error.h"
#include "model/cpu/cpu_ops.h"
#ifdef FSDP_HAVE_CUDA_OPS
#include "comm/device.h"
#include "model/cuda/cuda_ops.h"
#endif

namespace fsdp {

namespace {
int visible_gpus() {
#ifdef FSDP_HAVE_CUDA_OPS
  return cuda_device_count();
#else
  return 0;
#endif
}
}  // namespace

Device resolve_device(const Options& o) {
  const Device d = o.compute.device != Device::automatic ? o.compute.device
                   : visible_gpus() > 0                  ? Device::cuda
                                                         : Device::cpu;
  if (d == Device::cuda) {
#ifndef FSDP_HAVE_CUDA_OPS
    throw_error(
        "--device cuda: this fsdptrain was built without CUDA (FSDP_CUDA=OFF or no nvcc); "
        "rebuild with the CUDA toolkit, or use --device cpu");
#endif
    if (visible_gpus() == 0)
      throw_error("--device cuda: no CUDA device is visible on this machine; use --device cpu");
    if (o.compute.precision == Precision::fp32)
      throw_error("--precision fp32 runs on the CPU reference only; on --device cuda use bf16");
    return d;
  }
  if (o.engine.reduce_dtype != DType::f32)
    throw_error("--reduce-dtype ", choice_name(o.engine.reduce_dtype),
                ": the CPU reference reduces in fp32 only; use --reduce-dtype fp32");
  if (o.compute.precision == Precision::bf16)
    throw_error(
        "--precision bf16: the CPU reference computes in fp32; use --precision fp32 (or "
        "fp8, whose FP8 casts it emulates bit for bit)");
  return d;
}

std::unique_ptr<Ops> make_ops(Device device, const Options& o, const WorldInfo& world) {
  if (device == Device::cpu) return std::make_unique<CpuOps>();
#ifdef FSDP_HAVE_CUDA_OPS
  CudaOpsOptions co;
  co.device = select_device(world, o.compute.device_comm == DeviceComm::staged);
  co.deterministic = o.run.debug;
  co.sync_each_op = o.run.debug;
  return std::make_unique<CudaOps>(co);
#else
  (void)o;
  (void)world;
  throw_error("--device ", choice_name(device), ": not available in this build");
#endif
}

ProcessGroups make_engine_groups(Device device, const Options& o, int shard_group_size) {
  const bool staged = o.compute.device_comm == DeviceComm::staged;
  if (device == Device::cpu)
    return staged ? make_process_groups(std::make_unique<StagedCommunicator>(
                                            MPI_COMM_WORLD, std::make_shared<HostStager>()),
                                        shard_group_size)
                  : make_process_groups(Backend::mpi, shard_group_size);
#ifdef FSDP_HAVE_CUDA_OPS
  check_devices_distinct(staged);
#endif
  return make_process_groups(staged ? Backend::staged : Backend::nccl, shard_group_size);
}

}  // namespace fsdp
