// The process groups of hybrid sharding. Parameters are sharded over a shard
// group of K consecutive ranks (consecutive so that, with ranks packed by
// node, a shard group stays on one node's NVLink); the world/K ranks that hold
// the same shard form a replicate group, over which gradients are averaged.
// K = world size is plain FSDP: one shard group, replicate groups of one.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/runtime.h"

namespace fsdp {

enum class Backend : uint8_t {
  mpi,     // host buffers, MPI non-blocking collectives (CPU reference path)
  nccl,    // device buffers, NCCL on its own stream; needs a build with FSDP_CUDA
  staged,  // device buffers through host memory over MPI: several ranks on one
           // GPU, a test mode (comm/staged_communicator.h); needs FSDP_CUDA
};

const char* backend_name(Backend b);

// A communicator over (a duplicate of) `comm`, collective over it. For NCCL the
// CUDA device must already be chosen (select_device in comm/device.h).
std::unique_ptr<Communicator> make_communicator(Backend backend, MPI_Comm comm);

struct ProcessGroups {
  // world is null on NCCL: a world communicator would hold GPU memory and
  // proxy threads that nothing uses (the engine needs shard and replicate;
  // scalars travel on host groups), so it is released once they are split.
  std::unique_ptr<Communicator> world, shard, replicate;
  int shard_group_size = 1;
};

// What --shard-group-size 0 means for this job: on several nodes whose ranks
// are packed by node, the ranks of one node (hybrid sharding: the parameter
// gathers stay on NVLink, only the replica all-reduce of gradient shards
// crosses InfiniBand, as torchtitan's HSDP and Megatron's distributed
// optimizer place them); otherwise every rank. `why` says which, for the
// start-up line. A positive request is returned as given.
int resolve_shard_group_size(int requested, const WorldInfo& world, std::string* why = nullptr);

// Throws fsdp::Error, on every rank alike and before any communication, when
// shard_group_size (the --shard-group-size value; 0 means the world size) is
// negative or does not divide the world size. Collective over `world`.
ProcessGroups make_process_groups(Backend backend, int shard_group_size,
                                  MPI_Comm world = MPI_COMM_WORLD);
// The same groups split from a given world communicator (tests pass a
// StagedCommunicator over host buffers).
ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, int shard_group_size);

}  // namespace fsdp
