// Which GPU this rank drives.
#pragma once

#include <string>
#include <vector>

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

// What a rank tells its peers about the GPU it drives.
struct RankGpu {
  std::string uuid;         // the device's UUID bytes
  std::string nccl_hostid;  // NCCL_HOSTID, empty when unset
};

// Throws fsdp::Error naming the first two ranks that drive one GPU where NCCL
// would refuse them ("Duplicate GPU detected", or a hang), unless `shared`
// (--device-comm staged, whose collectives do not go through NCCL). NCCL
// refuses two ranks on one GPU only when they also share a host hash, which
// it builds from NCCL_HOSTID when that is set: two ranks with their own
// values are two one-GPU "nodes" to NCCL, joined over its network transport
// (bench/cuda/nccl_rank.sh sets them; ../shared/PLATFORM-NOTES.md). So a
// pair on one GPU is accepted when both have set NCCL_HOSTID to different
// values. Pure, so the CPU tests check it.
void check_gpu_sharing(const std::vector<RankGpu>& ranks, bool shared);

// check_gpu_sharing over every rank's GPU and NCCL_HOSTID, with the same
// fsdp::Error on every rank. Collective over MPI_COMM_WORLD; call it after
// select_device succeeded on every rank.
void check_devices_distinct(bool shared);

}  // namespace fsdp
