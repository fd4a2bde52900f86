#include "comm/device.h"

#include <cuda_runtime.h>

#include "comm/cuda_check.h"

namespace fsdp {

int select_device(const WorldInfo& world) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw_error("rank ", world.rank, " on node ", world.node, " sees no CUDA device (",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                "): run on a GPU node, or use --device cpu");
  if (world.local_size > count)
    throw_error(world.local_size, " ranks share node ", world.node, " but it has only ", count,
                " visible GPU", count == 1 ? "" : "s",
                ": launch one rank per GPU (and check CUDA_VISIBLE_DEVICES)");
  FSDP_CUDA_CHECK(cudaSetDevice(world.local_rank));
  return world.local_rank;
}

}  // namespace fsdp
