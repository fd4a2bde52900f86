#include "comm/launch.h"

#include <cerrno>
#include <cstdlib>

#include "common/error.h"

namespace fsdp {

LaunchEnv read_launch_env() {
  LaunchEnv e;
  auto take = [&](LaunchEnv::Kind kind, const char* name) {
    const char* v = std::getenv(name);
    if (e.kind != LaunchEnv::none || v == nullptr) return;
    e = {kind, name, v};
  };
  take(LaunchEnv::mpirun, "OMPI_COMM_WORLD_SIZE");
  take(LaunchEnv::srun, "SLURM_STEP_NUM_TASKS");
  return e;
}

void check_launch(const WorldInfo& world, const LaunchEnv& launch) {
  if (launch.kind == LaunchEnv::none) return;
  char* end = nullptr;
  errno = 0;
  const long expected = std::strtol(launch.value.c_str(), &end, 10);
  if (launch.value.empty() || errno != 0 || *end != '\0' || expected <= 0)
    throw_error(launch.variable, "=", launch.value, " is not a positive number of tasks");
  if (expected == world.size) return;
  const std::string launched = std::to_string(world.size) + (world.size == 1 ? " rank" : " ranks");
  if (launch.kind == LaunchEnv::srun)
    throw_error("srun started ", expected, " tasks (", launch.variable, ") but MPI sees ", launched,
                ": srun could not wire the tasks together. Use srun --mpi=pmix with an Open MPI "
                "built with PMIx (`srun --mpi=list` shows what Slurm offers), or run mpirun "
                "inside the allocation (slurm/h100_4node.sh: FSDP_LAUNCHER=mpirun)");
  throw_error("mpirun started ", expected, " ranks (", launch.variable, ") but MPI sees ", launched,
              ": fsdptrain was linked against another MPI than the mpirun that started it; "
              "use the mpirun of the Open MPI it was built with");
}

}  // namespace fsdp
