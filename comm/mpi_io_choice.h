// Which MPI-IO layer the checkpoints go through: chosen before MPI_Init, by
// every main that opens HDF5 files in parallel (fsdptrain, the MPI test main,
// checkpoint_bench).
#pragma once

#include <cstdlib>

namespace fsdp {

// Open MPI 4.1 and 5.0 ship two MPI-IO layers and default to their own,
// ompio. ompio opens a shared-file-pointer module with every file, though
// HDF5 never uses one, and its default module (sharedfp/sm) names a POSIX
// semaphore after the file's base name alone (/dev/shm/sem.OMPIO_<name>) and
// takes it inside MPI_File_open. A rank killed in that window (preemption,
// the OOM killer, tests/src/chaos_test.py) leaves the semaphore in /dev/shm,
// taken, and every later open of a file of that name on the node waits
// forever: the resumed run hangs in the very save it was killed in
// (step_00000015.h5.tmp, 2026-11-25). ROMIO keeps no such state (it is the
// layer under HDF5 in MPICH, Cray MPICH and Intel MPI too), so fsdptrain asks
// Open MPI for it. A choice the user made (OMPI_MCA_io in the environment, as
// `mpirun --mca io ompio` sets it) is left alone; other MPIs ignore the name.
inline void prefer_romio_for_mpi_io() {
  setenv("OMPI_MCA_io", "^ompio", /*overwrite=*/0);
}

}  // namespace fsdp
