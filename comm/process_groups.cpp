#include "comm/process_groups.h"

#include "comm/mpi_check.h"
#include "comm/mpi_communicator.h"
#include "common/error.h"

#ifdef FSDP_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace fsdp {

const char* backend_name(Backend b) {
  return b == Backend::mpi ? "mpi" : "nccl";
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
  }
  throw_error("unknown communication backend ", int(backend));
}

ProcessGroups make_process_groups(Backend backend, int shard_group_size, MPI_Comm world) {
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(world, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(world, &size), "MPI_Comm_size");
  if (shard_group_size < 0)
    throw_error("--shard-group-size ", shard_group_size,
                " must be 0 (the whole world) or a positive divisor of the world size ", size);
  const int k = shard_group_size == 0 ? size : shard_group_size;
  if (size % k != 0)
    throw_error("--shard-group-size ", k, " does not divide the world size ", size);

  ProcessGroups g;
  g.shard_group_size = k;
  g.world = make_communicator(backend, world);
  g.shard = g.world->split(rank / k, rank);
  g.replicate = g.world->split(rank % k, rank);
  return g;
}

}  // namespace fsdp
