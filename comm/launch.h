// Which launcher started this process and how many ranks it meant to start,
// read before MPI_Init: afterwards MPI itself may have set the same variables.
// Comparing that count with MPI's world size catches the classic failure of
// `srun` without PMIx, where every process comes up as rank 0 of 1 and all of
// them would train alone, write the same files and never notice.
#pragma once

#include <string>

#include "comm/runtime.h"

namespace fsdp {

struct LaunchEnv {
  enum Kind { none, mpirun, srun } kind = none;
  std::string variable;  // the variable the count came from, for messages
  std::string value;     // its raw text (checked in check_launch)
};

// mpirun/orted (OMPI_COMM_WORLD_SIZE) wins over Slurm: under mpirun inside an
// allocation the ranks on other nodes run in the orted step, whose
// SLURM_STEP_NUM_TASKS counts orteds, not ranks. SLURM_NTASKS is never used:
// in a batch script it counts the job's tasks, not this launch's (a
// single-rank debug run inside an 8-task job is fine).
LaunchEnv read_launch_env();

// Throws fsdp::Error when the launcher meant to start a different number of
// ranks than MPI sees, or its variable is not a positive number. A singleton
// (no launcher) accepts any world.
void check_launch(const WorldInfo& world, const LaunchEnv& launch);

}  // namespace fsdp
