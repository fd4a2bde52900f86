#include "comm/process_groups.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"

namespace fsdp {
namespace {

struct World {
  int rank = 0, size = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
};

// Sum and max of the world ranks in this rank's group, computed over the group.
std::pair<int32_t, int32_t> member_sum_and_max(Communicator& c, int world_rank) {
  int32_t sum = world_rank, max = world_rank;
  auto a = c.all_reduce(&sum, 1, DType::i32, ReduceOp::sum);
  auto b = c.all_reduce(&max, 1, DType::i32, ReduceOp::max);
  a->wait();
  b->wait();
  return {sum, max};
}

void expect_members(Communicator& c, int world_rank, const std::vector<int>& members,
                    const std::string& what) {
  int32_t sum = 0, max = -1;
  for (int m : members) {
    sum += m;
    max = std::max(max, m);
  }
  auto [got_sum, got_max] = member_sum_and_max(c, world_rank);
  EXPECT_EQ(c.size(), int(members.size())) << what;
  EXPECT_EQ(got_sum, sum) << what;
  EXPECT_EQ(got_max, max) << what;
  int index = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == world_rank) index = int(i);
  EXPECT_EQ(c.rank(), index) << what << ": ranks follow world order";
}

WorldInfo nodes(int num_nodes, int per_node, bool packed) {
  WorldInfo w;
  w.size = num_nodes * per_node;
  w.local_size = per_node;
  w.num_nodes = num_nodes;
  w.packed_by_node = packed;
  return w;
}

TEST(ResolveShardGroupSize, SeveralPackedNodesShardWithinANode) {
  std::string why;
  EXPECT_EQ(resolve_shard_group_size(0, nodes(4, 8, true), &why), 8);
  EXPECT_EQ(why, "the ranks of a node");
}

TEST(ResolveShardGroupSize, OneNodeOrScatteredRanksShardOverAll) {
  std::string why;
  EXPECT_EQ(resolve_shard_group_size(0, nodes(1, 8, true), &why), 8);
  EXPECT_EQ(why, "all ranks");
  // Round-robin placement (--map-by node): consecutive ranks are on
  // different nodes, so a node-sized group of consecutive ranks would not be
  // a node.
  EXPECT_EQ(resolve_shard_group_size(0, nodes(4, 2, false), &why), 8);
  EXPECT_NE(why.find("not packed by node"), std::string::npos) << why;
}

TEST(ResolveShardGroupSize, AnExplicitSizeIsKept) {
  std::string why;
  EXPECT_EQ(resolve_shard_group_size(16, nodes(4, 8, true), &why), 16);
  EXPECT_EQ(why, "as asked");
}

TEST(ProcessGroups, FourRanksInShardGroupsOfTwo) {
  World w;
  if (w.size != 4) GTEST_SKIP() << "needs 4 ranks";
  ProcessGroups g = make_process_groups(Backend::mpi, 2);
  EXPECT_EQ(g.shard_group_size, 2);
  const std::vector<std::vector<int>> shard = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
  const std::vector<std::vector<int>> replicate = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  expect_members(*g.world, w.rank, {0, 1, 2, 3}, "world");
  expect_members(*g.shard, w.rank, shard[w.rank], "shard");
  expect_members(*g.replicate, w.rank, replicate[w.rank], "replicate");
}

TEST(ProcessGroups, EveryDivisorOfTheWorld) {
  World w;
  for (int k = 1; k <= w.size; ++k) {
    if (w.size % k != 0) continue;
    ProcessGroups g = make_process_groups(Backend::mpi, k);
    EXPECT_EQ(g.shard_group_size, k);
    std::vector<int> shard, replicate;
    for (int r = 0; r < w.size; ++r) {
      if (r / k == w.rank / k) shard.push_back(r);
      if (r % k == w.rank % k) replicate.push_back(r);
    }
    const std::string what = "k=" + std::to_string(k);
    expect_members(*g.shard, w.rank, shard, what + " shard");
    expect_members(*g.replicate, w.rank, replicate, what + " replicate");
    EXPECT_EQ(g.replicate->size(), w.size / k) << what;
  }
}

TEST(ProcessGroups, ZeroMeansTheWholeWorld) {
  World w;
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  EXPECT_EQ(g.shard_group_size, w.size);
  EXPECT_EQ(g.shard->size(), w.size);
  EXPECT_EQ(g.replicate->size(), 1);
  EXPECT_EQ(g.replicate->rank(), 0);
  EXPECT_STREQ(g.world->backend_name(), "mpi");
}

TEST(ProcessGroups, SizeMustDivideTheWorld) {
  World w;
  const int k = w.size == 4 ? 3 : w.size + 1;
  try {
    make_process_groups(Backend::mpi, k);
    ADD_FAILURE() << "no error for k=" << k;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--shard-group-size " + std::to_string(k) +
                                         " does not divide the world size " +
                                         std::to_string(w.size));
  }
  EXPECT_THROW(make_process_groups(Backend::mpi, -2), Error);
}

#ifndef FSDP_HAVE_NCCL
TEST(ProcessGroups, NcclNeedsACudaBuild) {
  EXPECT_THROW(make_process_groups(Backend::nccl, 0), Error);
}
#endif

}  // namespace
}  // namespace fsdp
