// Which GPU this rank drives.
#pragma once

#include "comm/runtime.h"

namespace fsdp {

// The index of the visible GPU for this rank, or fsdp::Error naming what to
// change. One visible GPU is used whatever the local rank: that is how
// per-rank CUDA_VISIBLE_DEVICES and cgroup isolation (Slurm's
// --gpus-per-task, gres binding) present a node. Otherwise the local_rank-th
// GPU, and there must be one per local rank, since NCCL does not allow two
// ranks of one communicator on one device; `shared` (--device-comm staged)
// lifts that and deals ranks round-robin onto the GPUs. Pure, so the CPU tests
// check it.
int choose_device(const WorldInfo& world, int visible_gpus, bool shared);

// choose_device with the GPUs this process sees, made current. Call it
// before any CUDA or NCCL work. Only in builds with FSDP_HAVE_NCCL.
int select_device(const WorldInfo& world, bool shared = false);

// Throws the same fsdp::Error on every rank when two ranks drive one GPU
// without `shared` (say, CUDA_VISIBLE_DEVICES=0 for all of them), which NCCL
// would otherwise report as an obscure init failure or a hang. Collective over
// MPI_COMM_WORLD; call it after select_device succeeded on every rank.
void check_devices_distinct(bool shared);

}  // namespace fsdp
