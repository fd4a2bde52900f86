// Which GPU this rank drives. Only in builds with FSDP_HAVE_NCCL (FSDP_CUDA ON).
#pragma once

#include "comm/runtime.h"

namespace fsdp {

// Makes the local_rank-th visible GPU current and returns its index; call it
// before any CUDA or NCCL work. Throws fsdp::Error when the node has no GPU or
// fewer GPUs than ranks: NCCL does not support two ranks of one communicator
// on one GPU.
int select_device(const WorldInfo& world);

}  // namespace fsdp
