// GoogleTest main for suites run under mpirun: every rank runs every test, only
// rank 0 prints, and the exit code is the verdict of all ranks together so one
// failing rank fails the CTest entry; an entry whose every case skipped on
// every rank exits 77, which CTest reports as Skipped (tests/gtest_verdict.h).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "comm/mpi_io_choice.h"
#include "tests/gtest_verdict.h"

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
  // Skipped only if every rank skipped every case (tests/gtest_verdict.h);
  // rank 0 names the cases.
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string name = argv[0];
  name = name.substr(name.find_last_of('/') + 1) + " on " + std::to_string(size) + " rank(s)";
  int skipped = fsdp::testing::verdict(false, name, rank == 0) == fsdp::testing::kSkippedExit;
  int all_skipped = 0;
  MPI_Allreduce(&skipped, &all_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  if (any_failed) return 1;
  return all_skipped ? fsdp::testing::kSkippedExit : 0;
}
