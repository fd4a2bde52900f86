#include "comm/process_groups.h"

#include "comm/mpi_check.h"
#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "common/error.h"

#ifdef FSDP_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace fsdp {

const char* backend_name(Backend b) {
  return b == Backend::mpi ? "mpi" : b == Backend::nccl ? "nccl" : "staged";
}

std::unique_ptr<Communicator> make_communicator(Backend backend, MPI_Comm comm) {
  switch (backend) {
    case Backend::mpi:
      return std::make_unique<MpiCommunicator>(comm);
    case Backend::nccl:
#ifdef FSDP_HAVE_NCCL
      return std::make_unique<NcclCommunicator>(comm);
#else
      throw_error(
          "this fsdptrain was built without CUDA (FSDP_CUDA=OFF), so it has no NCCL "
          "communicator: use --device cpu or rebuild with nvcc available");
#endif
    case Backend::staged:
#ifdef FSDP_HAVE_NCCL
      return std::make_unique<StagedCommunicator>(comm, make_cuda_stager());
#else
      throw_error(
          "this fsdptrain was built without CUDA (FSDP_CUDA=OFF), so it has no staged device "
          "communicator: use --device cpu or rebuild with nvcc available");
#endif
  }
  throw_error("unknown communication backend ", int(backend));
}

int resolve_shard_group_size(int requested, const WorldInfo& world, std::string* why) {
  std::string reason = "as asked";
  int k = requested;
  if (requested == 0 && world.num_nodes > 1 && world.packed_by_node) {
    k = world.local_size;
    reason = "the ranks of a node";
  } else if (requested == 0) {
    k = world.size;
    reason = world.num_nodes > 1 ? "all ranks: ranks are not packed by node, so a node-sized "
                                   "group would span nodes"
                                 : "all ranks";
  }
  if (why) *why = reason;
  return k;
}

namespace {
// The shard group size for a --shard-group-size value, checked the same way on
// every rank before any communication.
int shard_size(int shard_group_size, int world_size) {
  if (shard_group_size < 0)
    throw_error("--shard-group-size ", shard_group_size,
                " must be 0 (the whole world) or a positive divisor of the world size ",
                world_size);
  const int k = shard_group_size == 0 ? world_size : shard_group_size;
  if (world_size % k != 0)
    throw_error("--shard-group-size ", k, " does not divide the world size ", world_size);
  return k;
}
}  // namespace

ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, int shard_group_size) {
  const int rank = world->rank(), k = shard_size(shard_group_size, world->size());
  ProcessGroups g;
  g.shard_group_size = k;
  g.shard = world->split(rank / k, rank);
  g.replicate = world->split(rank % k, rank);
  g.world = std::move(world);
  return g;
}

ProcessGroups make_process_groups(Backend backend, int shard_group_size, MPI_Comm world) {
  int size = 1;
  check_mpi(MPI_Comm_size(world, &size), "MPI_Comm_size");
  shard_size(shard_group_size, size);  // before any communicator exists
  ProcessGroups g = make_process_groups(make_communicator(backend, world), shard_group_size);
  if (backend == Backend::nccl) g.world.reset();
  return g;
}

}  // namespace fsdp
