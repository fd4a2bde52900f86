#include "comm/device.h"

#include <cuda_runtime.h>
#include <mpi.h>

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
  constexpr int kId = sizeof(prop.uuid.bytes);
  std::vector<char> ids(size_t(size) * kId);
  WatchScope watch("comparing the ranks' GPUs (MPI_Allgather)");
  check_mpi(
      MPI_Allgather(prop.uuid.bytes, kId, MPI_BYTE, ids.data(), kId, MPI_BYTE, MPI_COMM_WORLD),
      "MPI_Allgather");
  if (shared) return;
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b)
      if (std::memcmp(&ids[size_t(a) * kId], &ids[size_t(b) * kId], kId) == 0)
        throw_error("ranks ", a, " and ", b,
                    " drive the same GPU, which NCCL does not allow: give each rank its own GPU "
                    "(one rank per GPU; check CUDA_VISIBLE_DEVICES), or test with "
                    "--device-comm staged");
}

}  // namespace fsdp
