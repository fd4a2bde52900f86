#include "comm/device.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/mpi_check.h"
#include "comm/watchdog.h"
#include "common/cuda_check.h"

namespace fsdp {

int select_device(const WorldInfo& world, bool shared) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  const int device = choose_device(world, count, shared);
  FSDP_CUDA_CHECK(cudaSetDevice(device), "rank's GPU");
  return device;
}

void check_devices_distinct(bool shared) {
  int device = 0, size = 1;
  FSDP_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  FSDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "the rank's GPU");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  // A fixed record: the UUID, then NCCL_HOSTID cut to what fits (two values
  // equal in their first kHost - 1 bytes read as one host: refused, never
  // wrongly accepted).
  constexpr int kId = sizeof(prop.uuid.bytes), kHost = 256, kRecord = kId + kHost;
  std::vector<char> mine(kRecord, 0), all(size_t(size) * kRecord);
  std::memcpy(mine.data(), prop.uuid.bytes, kId);
  if (const char* h = std::getenv("NCCL_HOSTID")) std::strncpy(&mine[kId], h, kHost - 1);
  {
    WatchScope watch("comparing the ranks' GPUs (MPI_Allgather)");
    check_mpi(MPI_Allgather(mine.data(), kRecord, MPI_BYTE, all.data(), kRecord, MPI_BYTE,
                            MPI_COMM_WORLD),
              "MPI_Allgather");
  }
  std::vector<RankGpu> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const char* rec = &all[size_t(r) * kRecord];
    ranks[size_t(r)] = {std::string(rec, kId), std::string(rec + kId)};
  }
  check_gpu_sharing(ranks, shared);
}

}  // namespace fsdp
