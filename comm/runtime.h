// MPI start-up and the shape of the job: which rank this is, in the world and
// on its node, and how many nodes there are.
#pragma once

#include <mpi.h>

#include <string>

namespace fsdp {

// Owns MPI_Init/MPI_Finalize for the program. Requests MPI_THREAD_MULTIPLE
// and needs at least SERIALIZED: the training thread posts and waits every
// collective of a step, and the NCCL watchdog thread may call MPI_Abort as
// its last act (so not FUNNELED); MULTIPLE is for --async-checkpoint, whose
// save thread writes the file while training goes on, and which refuses to
// start without it. MULTIPLE's locking in Open MPI's fast path was not
// measurable where MPI carries the most: a 2-rank CPU run of the tiny model,
// 1500 steps whose gradients all go through MPI, took 0.997x the time it took
// under SERIALIZED (median of 5 pairs, 2026-11-26); on a GPU MPI carries only
// a few small collectives a step. If MPI is already initialised (a test main
// did it), this neither initialises nor finalises.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // The thread level MPI granted (>= MPI_THREAD_SERIALIZED, else the
  // constructor threw).
  int thread_level() const { return thread_level_; }
  bool owns_mpi() const { return owns_; }

 private:
  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
};

struct WorldInfo {
  int rank = 0, size = 1;              // in MPI_COMM_WORLD
  int local_rank = 0, local_size = 1;  // among the ranks sharing this node's memory
  int node = 0, num_nodes = 1;         // nodes numbered by their lowest world rank
  // Every node holds the same number of consecutive world ranks (mpirun
  // --map-by ppr:N:node, srun's block distribution): then groups of
  // local_size consecutive ranks are exactly the nodes.
  bool packed_by_node = true;
};

// Collective over MPI_COMM_WORLD.
WorldInfo world_info();

// This rank's node as a batch script names it: Slurm's node name
// (SLURMD_NODENAME, which `scontrol update ExcNodeList=` takes) under Slurm,
// else the host name.
std::string node_name();

}  // namespace fsdp
