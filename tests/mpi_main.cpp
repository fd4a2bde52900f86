// GoogleTest main for suites run under mpirun: every rank runs every test, only
// rank 0 prints, and the exit code is the verdict of all ranks together so one
// failing rank fails the CTest entry.
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/mpi_io_choice.h"

int main(int argc, char** argv) {
  int provided = 0;
  fsdp::prefer_romio_for_mpi_io();  // as fsdptrain does (comm/mpi_io_choice.h)
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && rank == 0 && !failed) fprintf(stderr, "a rank other than 0 failed\n");
  MPI_Finalize();
  return any_failed;
}
