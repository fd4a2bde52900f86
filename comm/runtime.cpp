#include "comm/runtime.h"

#include <unistd.h>

#include <cstdlib>

#include "comm/mpi_check.h"
#include "comm/mpi_io_choice.h"
#include "comm/watchdog.h"
#include "common/error.h"

namespace fsdp {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialised = 0;
  check_mpi(MPI_Initialized(&initialised), "MPI_Initialized");
  if (initialised) {
    check_mpi(MPI_Query_thread(&thread_level_), "MPI_Query_thread");
  } else {
    prefer_romio_for_mpi_io();
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_), "MPI_Init_thread");
    owns_ = true;
  }
  if (thread_level_ < MPI_THREAD_SERIALIZED)
    throw_error("MPI provides thread level ", thread_level_,
                " but fsdptrain needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED,
                "): use an MPI built with thread support");
}

MpiRuntime::~MpiRuntime() {
  if (!owns_) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

WorldInfo world_info() {
  WorldInfo w;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &w.size), "MPI_Comm_size");

  WatchScope watch("learning the nodes of the job (MPI_Comm_split_type)");
  MPI_Comm local = MPI_COMM_NULL;
  check_mpi(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local),
      "MPI_Comm_split_type");
  check_mpi(MPI_Comm_rank(local, &w.local_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(local, &w.local_size), "MPI_Comm_size");

  // The first rank of every node joins a "leaders" group; its rank there is
  // the node's index, which it then tells the rest of its node.
  MPI_Comm leaders = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, w.local_rank == 0 ? 0 : MPI_UNDEFINED, w.rank, &leaders),
            "MPI_Comm_split");
  int node_and_count[2] = {0, 1};
  if (leaders != MPI_COMM_NULL) {
    check_mpi(MPI_Comm_rank(leaders, &node_and_count[0]), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(leaders, &node_and_count[1]), "MPI_Comm_size");
    MPI_Comm_free(&leaders);
  }
  check_mpi(MPI_Bcast(node_and_count, 2, MPI_INT, 0, local), "MPI_Bcast");
  MPI_Comm_free(&local);
  w.node = node_and_count[0];
  w.num_nodes = node_and_count[1];

  const bool mine = w.rank / w.local_size == w.node && w.rank % w.local_size == w.local_rank;
  int packed[3] = {mine ? 1 : 0, w.local_size, -w.local_size};
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, packed, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
            "MPI_Allreduce");
  w.packed_by_node = packed[0] == 1 && packed[1] == -packed[2];
  return w;
}

std::string node_name() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm && *slurm) return slurm;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

}  // namespace fsdp
