#include "comm/runtime.h"

#include <gtest/gtest.h>
#include <mpi.h>

namespace fsdp {
namespace {

TEST(WorldInfo, OneMachineIsOneNode) {
  WorldInfo w = world_info();
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(w.rank, rank);
  EXPECT_EQ(w.size, size);
  EXPECT_EQ(w.local_rank, rank);
  EXPECT_EQ(w.local_size, size);
  EXPECT_EQ(w.node, 0);
  EXPECT_EQ(w.num_nodes, 1);
}

TEST(MpiRuntime, LeavesAnExistingMpiAlone) {
  int argc = 0;
  char** argv = nullptr;
  {
    MpiRuntime runtime(&argc, &argv);
    EXPECT_FALSE(runtime.owns_mpi());
    EXPECT_GE(runtime.thread_level(), MPI_THREAD_SERIALIZED);
  }
  int finalised = 1;
  MPI_Finalized(&finalised);
  EXPECT_EQ(finalised, 0);
  // MPI still works after the runtime went away.
  int one = 1, sum = 0;
  EXPECT_EQ(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(sum, world_info().size);
}

TEST(WorldInfo, OneMachineIsPackedByNode) {
  // Every rank of one machine is on node 0 in rank order: packed, so a
  // node-sized shard group would be the whole machine.
  EXPECT_TRUE(world_info().packed_by_node);
}

}  // namespace
}  // namespace fsdp
